"""Identity is proven, not recorded (issue 23.3).

A state file is advice: a forged ``state.json`` can name any real pid with its real start time,
and (pid, start time) alone then "verifies". So when the agent must act on processes without a
live monitor to vouch for them (the monitor is gone without an exit record), a process is
signalled only when it also carries its server's id in its environment (``TUNELAB_SERVER_ID``,
set by the agent in every server's environment), read from ``/proc/PID/environ`` at that moment.
With a live monitor, its own account of its tree is the authority (``monitorclient``), and a
recorded leader that differs from the monitor's is replaced by the monitor's, with a log line.
"""

from __future__ import annotations

from pathlib import Path

from tunelab.common.specbounds import RESERVED_ENV

MAX_ENVIRON = 1 << 20


def carries_server_id(pid: int, server_id: str, proc: Path = Path("/proc")) -> bool:
    """Whether process ``pid`` has ``TUNELAB_SERVER_ID=<server_id>`` in its environment now."""
    if pid <= 1 or not server_id:
        return False
    try:
        with (proc / str(pid) / "environ").open("rb") as handle:
            environ = handle.read(MAX_ENVIRON)
    except OSError:
        return False
    marker = f"{RESERVED_ENV}={server_id}".encode()
    return marker in environ.split(b"\0")
