"""Issue 45.1: the scheduling pass and the attempts come before every per-object step, so a
step that raises past its guard (a bug in the driver's own listing, say) still cannot keep an
ordinary experiment QUEUED; and such a tick failure is logged bounded (the traceback once, then
at the 2nd, 4th, 8th... failure in a row), not 3 KB twice a second."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

from structlog.testing import capture_logs

from tunelab.controller.loop import ControlLoop
from tunelab.controller.store import FencingToken

TURN = FencingToken(epoch=1)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def poll_due(self, calls: Any, force: bool = False) -> None:
        self.calls.append("poll")

    @contextmanager
    def turn(self) -> Iterator[FencingToken]:
        yield TURN

    def pass_once(self, turn: FencingToken, dispatch: Callable[[Any], None]) -> int:
        self.calls.append("schedule")
        return 0

    def drive_all(self, calls: Any) -> None:
        self.calls.append("drive")


def test_scheduling_runs_first_and_a_failing_step_fails_only_what_comes_after() -> None:
    seen = Recorder()

    def watches(turn: FencingToken) -> int:
        seen.calls.append("watches")
        raise RuntimeError("a bug in the watch driver's listing\n" + "x" * 3000)

    def searches(turn: FencingToken) -> int:
        seen.calls.append("searches")
        return 0

    parts = cast(Any, seen)
    loop = ControlLoop(parts, parts, parts, searches=searches, watches=watches)
    with capture_logs() as logs:
        for _ in range(9):
            try:
                loop.tick_once()
            except RuntimeError as exc:
                loop._tick_failed(exc)  # what _run does with it
    loop.calls.close()
    assert seen.calls[:5] == ["poll", "schedule", "drive", "searches", "watches"]
    assert seen.calls.count("schedule") == 9  # every tick scheduled, the failure notwithstanding
    failed = [e for e in logs if e["event"] == "control_tick_failed"]
    assert [e["failures"] for e in failed] == [1, 2, 4, 8]
    assert "exc_info" in failed[0] and all("exc_info" not in e for e in failed[1:])
    assert all(len(e["error"]) <= 300 and "\n" not in e["error"] for e in failed)
