"""README's runnable examples: extract them, and run them as a person would.

A block is runnable when its fence's info string is ``console {.runnable}`` (a Markdown
attribute, so the docs site still renders it as a console block). Each ``$ `` line (with
``\\`` continuation lines) is one command, run by bash from the checkout root with ``.venv/bin``
first on PATH (as after ``. .venv/bin/activate``); other lines are the output a person sees and
are not compared (ids and timings change). A command ending in ``&`` is a daemon: it runs in the
background and the next command starts once a new port listens. Every other command must exit 0.

``python -P tests/support/readme_blocks.py BLOCK.json`` runs one block and prints its results as
JSON; the test runs it inside fresh network, mount and pid namespaces so the fixed ports and
``/tmp`` paths of README cannot meet anything else on the machine, and everything it started
ends with the namespace.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```console \{\.runnable\}\s*$")
COMMAND_TIMEOUT = 120.0
LISTEN_TIMEOUT = 30.0


def runnable_blocks(text: str) -> list[dict[str, Any]]:
    """``[{"line": N, "commands": [...]}]`` for each runnable block, in order."""
    blocks: list[dict[str, Any]] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        if not FENCE.match(lines[index]):
            index += 1
            continue
        start, index = index + 1, index + 1
        commands: list[str] = []
        while index < len(lines) and not lines[index].startswith("```"):
            line = lines[index]
            if line.startswith("$ "):
                command = line[2:]
                while command.endswith("\\") and index + 1 < len(lines):
                    index += 1
                    command = command[:-1] + " " + lines[index].strip()
                commands.append(command)
            index += 1
        blocks.append({"line": start, "commands": commands})
    return blocks


def _loopback_up() -> None:
    """``ip link set lo up`` without iproute2: SIOCSIFFLAGS with IFF_UP | IFF_RUNNING."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        ifreq = struct.pack("16sh", b"lo", 0x1 | 0x40)
        fcntl.ioctl(sock.fileno(), 0x8914, ifreq)


def _listeners() -> int:
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        count += sum(1 for row in rows if row.split()[3] == "0A")  # state LISTEN
    return count


def run_block(commands: list[str]) -> list[dict[str, Any]]:
    """Run one block's commands in order; a result per command."""
    env = {
        **os.environ,
        "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "XDG_CONFIG_HOME": "/tmp/readme-config",
        "XDG_STATE_HOME": "/tmp/readme-state",
        "HOME": "/tmp/readme-home",
    }
    for name in ("TUNELAB_CONTROLLER", "TUNELAB_AGENT", "TUNELAB_TOKEN"):
        env.pop(name, None)
    results: list[dict[str, Any]] = []
    logs = Path("/tmp/readme-daemons")
    logs.mkdir(parents=True, exist_ok=True)
    for number, command in enumerate(commands):
        if command.rstrip().endswith("&"):
            before = _listeners()
            log = logs / f"{number}.log"
            with log.open("wb") as out:
                subprocess.Popen(
                    ["bash", "-c", command.rstrip().removesuffix("&")],
                    cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                )  # fmt: skip
            deadline = time.monotonic() + LISTEN_TIMEOUT
            while _listeners() <= before and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.3)  # a daemon binds its ports one after another
            listening = _listeners() > before
            results.append(
                {"command": command, "code": 0 if listening else -1, "stdout": "",
                 "stderr": "" if listening else log.read_text(errors="replace")[-4000:]}
            )  # fmt: skip
            continue
        done = subprocess.run(
            ["bash", "-o", "pipefail", "-c", command], cwd=REPO, env=env,
            capture_output=True, text=True, timeout=COMMAND_TIMEOUT,
        )  # fmt: skip
        results.append(
            {"command": command, "code": done.returncode,
             "stdout": done.stdout[-4000:], "stderr": done.stderr[-4000:]}
        )  # fmt: skip
    return results


def _private_tmp() -> None:
    """A fresh /tmp for README's fixed paths, in this mount namespace only. A checkout that
    itself lives under /tmp (CI clones anywhere) is bound back at the same path first."""
    keep = REPO.is_relative_to("/tmp")
    if keep:
        aside = Path("/mnt")  # covered in this namespace only: nothing is left on the host
        subprocess.run(["mount", "--rbind", str(REPO), str(aside)], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", "/tmp"], check=True)
    if keep:
        REPO.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "--rbind", str(aside), str(REPO)], check=True)


def main() -> int:
    commands = json.loads(Path(sys.argv[1]).read_text())
    _private_tmp()
    _loopback_up()
    print(json.dumps(run_block(commands)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
