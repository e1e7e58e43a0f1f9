"""The one object a supervisor feeds: log bytes in; phase, progress, "probe now" and the failure
reason out. The supervisor calls :meth:`EngineWatch.feed` per log chunk, :meth:`ready` when the
probe succeeds and :meth:`failed` when the server exits or times out; nothing else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from tunelab.agent.engines.failures import (
    Failure,
    FailureReason,
    classify_exit,
    classify_lines,
    match_line,
)
from tunelab.agent.engines.phases import Phase, may_enter
from tunelab.agent.engines.profiles import EngineProfile
from tunelab.agent.engines.progress import LoadProgress, parse_progress_line, same_progress
from tunelab.agent.engines.status import EngineStatus

MAX_PENDING = 4096  # a partial line longer than this is cut (a log line is never trusted)
MAX_SUSPECTS = 20  # failure-looking lines kept from the whole log, beside the tail
# the port a server says it listens on (SGLang's uvicorn line, vLLM's "Starting vLLM server
# on http://127.0.0.1:18431", the simulator's "listening on"): tests/fixtures/engines
_LISTEN_LINE = re.compile(
    r"(?:Uvicorn running on|[Ll]istening on|Starting vLLM (?:API )?server (?:\d+ )?on) "
    r"https?://[^\s/]*:(\d{1,5})\b"
)


@dataclass(frozen=True)
class WatchUpdate:
    changed: bool  # phase or progress changed: persist and tell watchers
    ready_hint: bool  # the engine printed its ready line: probe now


class EngineWatch:
    def __init__(self, profile: EngineProfile, started_at: float) -> None:
        self.profile = profile
        self.status = EngineStatus(engine=profile.name)
        self.status.enter(Phase.IMPORTING, started_at)
        self.progress: LoadProgress | None = None  # the latest bar, tagged with its phase
        self._pending = ""
        self._suspects: list[str] = []  # lines matching a failure signature, first ones kept
        # the port the server's log says it listens on, with that line (the first such line)
        self.listening: tuple[int, str] | None = None

    @classmethod
    def resumed(cls, profile: EngineProfile, status: EngineStatus) -> EngineWatch:
        """For an adopted server: go on from the persisted status."""
        watch = cls(profile, status.phase_started_at)
        watch.status = status.copy()
        return watch

    def feed(self, data: bytes, now: float) -> WatchUpdate:
        text = self._pending + data.decode("utf-8", errors="replace")
        parts = re.split(r"[\r\n]", text)
        self._pending = parts.pop()[-MAX_PENDING:]
        changed = hint = False
        for line in parts:
            if not line:
                continue
            c, h = self._line(line[:MAX_PENDING], now)
            changed |= c
            hint |= h
        return WatchUpdate(changed, hint)

    def _line(self, line: str, now: float) -> tuple[bool, bool]:
        profile = self.profile
        changed = False
        bar = parse_progress_line(line, now)
        if bar is not None:
            phase = _phase_of(bar.label, profile) or self.status.phase
            changed |= self._enter(phase, now)
            if phase is self.status.phase and not same_progress(bar, self.progress):
                self.progress = replace(bar, phase=phase.value)
                changed = True
            return changed, profile.bar_done_hints_ready and bar.done == bar.total
        for rule in profile.phase_lines:
            if rule.pattern.search(line):
                changed |= self._enter(rule.phase, now)
                break
        if len(self._suspects) < MAX_SUSPECTS and match_line(line, profile.signatures):
            self._suspects.append(line)
        hint = profile.ready_lines is not None and bool(profile.ready_lines.search(line))
        if self.listening is None and (port := _LISTEN_LINE.search(line)):
            self.listening = (int(port.group(1)), line.strip()[:300])
        return changed, hint

    def _enter(self, phase: Phase, now: float) -> bool:
        if not may_enter(self.status.phase, phase) or phase is Phase.READY:
            return False
        self.status.enter(phase, now)
        return True

    def ready(self, now: float) -> None:
        self.status.enter(Phase.READY, now)

    def failed(self, exit_code: int | None, tail: list[str], oom_pids: tuple[int, ...]) -> Failure:
        """Decide and record the failure reason of a server that exited on its own."""
        lines = tail + self._suspects
        failure = classify_exit(exit_code, lines, self.profile.signatures, oom_pids)
        self._record(failure)
        return failure

    def timed_out(self, tail: list[str], detail: str) -> Failure:
        """A startup timeout, unless the log already names a cause (a hung NCCL init)."""
        found = classify_lines(tail + self._suspects, self.profile.signatures)
        failure = found or Failure(FailureReason.STARTUP_TIMEOUT, detail)
        self._record(failure)
        return failure

    def _record(self, failure: Failure) -> None:
        self.status.failure_reason = failure.reason.value
        self.status.failure_line = failure.line

    def snapshot(self) -> tuple[EngineStatus, LoadProgress | None]:
        progress = self.progress
        return self.status.copy(), replace(progress) if progress else None


def _phase_of(label: str, profile: EngineProfile) -> Phase | None:
    for rule in profile.bar_phases:
        if rule.pattern.search(label):
            return rule.phase
    return None
