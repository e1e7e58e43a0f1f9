"""pid 1 of a test's PID namespace: runs one command and reaps every orphan until it ends.

``unshare --pid --fork --mount-proc python tests/support/nsinit.py CMD...``. When this exits,
the kernel kills everything left in the namespace: a regression can hurt only the test's own.
"""

from __future__ import annotations

import os
import subprocess
import sys


def main() -> int:
    child = subprocess.Popen(sys.argv[1:])
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 1
        if pid == child.pid:
            return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())
