"""A run as its agent reported it, in plain values: what dispatch (the attempt driver)
consumes. It is built at the edge, from the agent's ``run_pb2.Run`` (agent_client.py, for
GetRun/StartRun/CancelRun, and a Slurm job's ReportRun, slurm/driver.py); no protobuf goes
further in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tunelab.controller.states import AttemptState


@dataclass(frozen=True)
class RunReport:
    run_id: str
    target: AttemptState | None  # the attempt state the run's state means; None: not known
    message: str = ""
    kill_failed: bool = False  # a process survived the stop ladder
    agent_instance_id: str = ""
    progress: dict[str, Any] | None = None  # the benchmark's progress, when it has some
    provenance_json: str = ""
    result_json: str = ""
    failure_reason: str = ""  # without the enum's prefix ("CUDA_OOM"), or ""
    failure_line: str = ""
    server_detail: str = ""  # one line while the run's server starts (runwire.server_detail)

    def terminal(self) -> bool:
        return self.target is not None and self.target.is_terminal()
