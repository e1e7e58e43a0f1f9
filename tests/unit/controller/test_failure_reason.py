"""Unit: the run's failure reason travels into the attempt's result and out on the wire."""

from __future__ import annotations

from tunelab.controller.dispatch import with_failure
from tunelab.controller.wire import failure_reason_pb
from tunelab.v1 import run_pb2, server_pb2


def test_failure_reason_is_kept_beside_the_result() -> None:
    run = run_pb2.Run(
        failure_reason=server_pb2.FAILURE_REASON_CUDA_OOM,
        failure_line="torch.OutOfMemoryError: CUDA out of memory",
    )
    kept = with_failure({"points": []}, run)
    assert kept == {
        "points": [],
        "failure_reason": "CUDA_OOM",
        "failure_line": "torch.OutOfMemoryError: CUDA out of memory",
    }
    assert failure_reason_pb(kept) == server_pb2.FAILURE_REASON_CUDA_OOM
    assert with_failure(None, run_pb2.Run()) is None


def test_unknown_or_missing_reason_is_unspecified() -> None:
    assert failure_reason_pb(None) == server_pb2.FAILURE_REASON_UNSPECIFIED
    assert failure_reason_pb({"failure_reason": "FROM_A_NEWER_AGENT"}) == 0
