"""Unit: what the CLI's server bar shows for a phase with and without a bar of its own."""

from __future__ import annotations

from tunelab.cli.progress_view import progress_fields
from tunelab.cli.server_cmd import server_json
from tunelab.v1 import server_pb2

S = server_pb2


def test_a_phase_with_its_bar_shows_done_of_total() -> None:
    server = S.Server(state=S.SERVER_STATE_LOADING, phase=S.SERVER_PHASE_LOADING_WEIGHTS)
    server.progress.CopyFrom(
        S.LoadProgress(label="Loading safetensors checkpoint shards", done=45, total=83,
                       phase=S.SERVER_PHASE_LOADING_WEIGHTS)
    )  # fmt: skip
    fields = progress_fields(server, now=0.0)
    assert (fields["completed"], fields["total"]) == (45, 83)
    assert (
        fields["description"] == "LOADING  loading weights: Loading safetensors checkpoint shards"
    )


def test_a_phase_without_a_bar_pulses_with_its_time() -> None:
    server = S.Server(
        state=S.SERVER_STATE_LOADING, phase=S.SERVER_PHASE_COMPILING, phase_started_at=100.0
    )
    server.progress.CopyFrom(
        S.LoadProgress(label="shards", done=4, total=4, phase=S.SERVER_PHASE_LOADING_WEIGHTS)
    )
    fields = progress_fields(server, now=112.4)
    assert fields["total"] is None  # not stuck at 100 % of the last phase's bar
    assert fields["description"] == "LOADING  compiling (12 s)"


def test_json_names_phase_and_failure_reason() -> None:
    server = S.Server(
        state=S.SERVER_STATE_FAILED,
        phase=S.SERVER_PHASE_CAPTURING_CUDA_GRAPHS,
        failure_reason=S.FAILURE_REASON_CUDA_OOM,
        failure_line="torch.OutOfMemoryError: CUDA out of memory",
        engine="sglang",
    )
    server.phases.add(phase=S.SERVER_PHASE_IMPORTING, started_at=1.0, seconds=2.0)
    data = server_json(server)
    assert data["phase"] == "CAPTURING_CUDA_GRAPHS" and data["engine"] == "sglang"
    assert data["failure_reason"] == "CUDA_OOM"
    assert data["phases"] == [{"phase": "IMPORTING", "started_at": 1.0, "seconds": 2.0}]
