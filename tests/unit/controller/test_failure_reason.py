"""Unit: the run's failure reason travels into the attempt (its column, and its result as
before) and out on the wire."""

from __future__ import annotations

from tunelab.controller.dispatch import with_failure
from tunelab.controller.runwire import failure_name, run_report
from tunelab.controller.wire import failure_reason_pb
from tunelab.v1 import run_pb2, server_pb2


def test_failure_reason_is_kept_beside_the_result() -> None:
    run = run_pb2.Run(
        failure_reason=server_pb2.FAILURE_REASON_CUDA_OOM,
        failure_line="torch.OutOfMemoryError: CUDA out of memory",
    )
    kept = with_failure({"points": []}, run_report(run))
    assert kept == {
        "points": [],
        "failure_reason": "CUDA_OOM",
        "failure_line": "torch.OutOfMemoryError: CUDA out of memory",
    }
    assert failure_name(run) == "CUDA_OOM"
    assert failure_reason_pb(failure_name(run)) == server_pb2.FAILURE_REASON_CUDA_OOM
    assert with_failure(None, run_report(run_pb2.Run())) is None
    assert failure_name(run_pb2.Run()) == ""


def test_unknown_or_missing_reason_is_unspecified() -> None:
    assert failure_reason_pb("") == server_pb2.FAILURE_REASON_UNSPECIFIED
    assert failure_reason_pb("FROM_A_NEWER_AGENT") == 0


SPEC = """
name: tiny
server:
  command: [vllm, serve, /models/tiny, --port, "{{port}}"]
  engine: {engine}
  ready: {{model: tiny}}
benchmark: {{concurrency: [1], requests: 4, input_len: 8, output_len: 8}}
"""


def test_server_engine_reaches_the_run_spec() -> None:
    import pytest

    from tunelab.controller.spec import SpecError, expand_text
    from tunelab.controller.spec.render import to_run_spec

    spec = expand_text(SPEC.format(engine="sglang"))[0].spec
    assert to_run_spec(spec, "tiny", []).server.engine == "sglang"
    without = expand_text(SPEC.format(engine="x").replace("  engine: x\n", ""))[0].spec
    assert "engine" not in without["server"], "specs without it normalise as before"
    with pytest.raises(SpecError, match=r"server\.engine"):
        expand_text(SPEC.format(engine="tgi"))
