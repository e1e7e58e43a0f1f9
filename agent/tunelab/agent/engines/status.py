"""What the engine profile has learnt about one server: its phase history and failure reason.

A plain record carried by the server's record (``ServerRecord.engine``) and persisted with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from tunelab.agent.engines.phases import Phase, PhaseSpan


@dataclass
class EngineStatus:
    engine: str = ""  # the profile in force: vllm | sglang | generic
    phase: Phase = Phase.IMPORTING
    phase_started_at: float = 0.0
    phases: list[PhaseSpan] = field(default_factory=list)  # every phase entered, in order
    failure_reason: str = ""  # a FailureReason value once FAILED, else ""
    failure_line: str = ""  # the log line (or fact) that decided it
    http_probes: int = 0  # HTTP requests the readiness probe sent (TCP connects not counted)
    leftovers_removed: list[str] = field(default_factory=list)  # files a stop cleaned up

    def enter(self, phase: Phase, at: float) -> None:
        """Close the open span and open ``phase`` (the caller checked the transition)."""
        if self.phases:
            last = self.phases[-1]
            self.phases[-1] = replace(last, seconds=round(max(0.0, at - last.started_at), 4))
        self.phases.append(PhaseSpan(phase, at))
        self.phase = phase
        self.phase_started_at = at

    def copy(self) -> EngineStatus:
        return replace(
            self, phases=list(self.phases), leftovers_removed=list(self.leftovers_removed)
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "phase": self.phase.value,
            "phase_started_at": self.phase_started_at,
            "phases": [[s.phase.value, s.started_at, s.seconds] for s in self.phases],
            "failure_reason": self.failure_reason,
            "failure_line": self.failure_line,
            "http_probes": self.http_probes,
            "leftovers_removed": self.leftovers_removed,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> EngineStatus:
        if not data:
            return cls()
        return cls(
            engine=str(data.get("engine", "")),
            phase=Phase(data.get("phase", Phase.IMPORTING.value)),
            phase_started_at=float(data.get("phase_started_at", 0.0)),
            phases=[PhaseSpan(Phase(p), float(t), float(s)) for p, t, s in data.get("phases", [])],
            failure_reason=str(data.get("failure_reason", "")),
            failure_line=str(data.get("failure_line", "")),
            http_probes=int(data.get("http_probes", 0)),
            leftovers_removed=[str(p) for p in data.get("leftovers_removed", [])],
        )
