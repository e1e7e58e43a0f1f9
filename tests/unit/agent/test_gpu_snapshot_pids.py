"""A replayed snapshot's compute processes never name a process of this host (the demo hang)."""

from __future__ import annotations

import json
from pathlib import Path

from tunelab.agent.gpu import FOREIGN_PID_BASE, SnapshotBackend

SNAPSHOT = Path(__file__).resolve().parents[2] / "fixtures" / "nvml" / "h200-busy.json"


def test_captured_pids_are_moved_above_any_pid_this_kernel_can_hand_out() -> None:
    captured = [p["pid"] for p in json.loads(SNAPSHOT.read_text())["processes"]]
    assert captured == [467]  # the pid the demo's simulator once got after the pids wrapped
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    replayed = SnapshotBackend.load(SNAPSHOT).compute_processes()
    assert [p.pid for p in replayed] == [FOREIGN_PID_BASE + 467]
    assert all(p.pid > pid_max for p in replayed)
    assert (
        replayed[0].used_memory_bytes
        == json.loads(SNAPSHOT.read_text())["processes"][0]["used_memory_bytes"]
    )
