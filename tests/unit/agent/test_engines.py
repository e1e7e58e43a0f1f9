"""Unit: engine profiles over real captured logs (vLLM 0.32 CPU) and SGLang's source strings."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunelab.agent.engines.failures import FailureReason
from tunelab.agent.engines.phases import Phase, may_enter
from tunelab.agent.engines.profiles import (
    GENERIC,
    SGLANG,
    VLLM,
    EngineProfile,
    detect,
    profile_for,
)
from tunelab.agent.engines.status import EngineStatus
from tunelab.agent.engines.watch import EngineWatch
from tunelab.agent.servers.probe import served_name_hint

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "engines"


def feed_file(watch: EngineWatch, name: str, chunk: int = 997) -> list[Phase]:
    """Feed a fixture in odd-sized chunks (lines split across reads); the phases entered."""
    data = (FIXTURES / name).read_bytes()
    for i in range(0, len(data), chunk):
        watch.feed(data[i : i + chunk], float(i))
    return [span.phase for span in watch.status.phases]


@pytest.mark.parametrize(
    ("argv", "engine"),
    [
        (["vllm", "serve", "/m"], "vllm"),
        (["/opt/venv/bin/vllm", "serve", "/m"], "vllm"),
        (["python", "-P", "-m", "vllm.entrypoints.openai.api_server"], "vllm"),
        (["python3", "-m", "sglang.launch_server", "--model-path", "/m"], "sglang"),
        (["sglang", "serve", "--model-path", "/m"], "sglang"),
        (["python", "server.py", "--model", "vllm-like-name"], "generic"),
        (["llama-server", "-m", "/m"], "generic"),
    ],
)
def test_detect_from_argv(argv: list[str], engine: str) -> None:
    assert detect(argv).name == engine


def test_explicit_engine_wins_over_argv() -> None:
    assert profile_for("sglang", ["vllm", "serve"]).name == "sglang"
    assert profile_for("", ["vllm", "serve"]) is VLLM


def test_vllm_real_start_goes_through_its_phases() -> None:
    watch = EngineWatch(VLLM, 0.0)
    seen = feed_file(watch, "vllm-0.32-cpu-start.log")
    assert seen == [Phase.IMPORTING, Phase.LOADING_WEIGHTS, Phase.COMPILING, Phase.WARMING_UP]
    assert watch.progress is not None
    assert (watch.progress.done, watch.progress.total) == (4, 4)
    assert watch.progress.phase == Phase.LOADING_WEIGHTS.value
    spans = watch.status.phases
    assert [s.phase for s in spans] == seen
    assert all(s.seconds >= 0 for s in spans)


def test_vllm_ready_line_hints_the_probe() -> None:
    watch = EngineWatch(VLLM, 0.0)
    assert not watch.feed(b"INFO:     Waiting for application startup.\n", 1.0).ready_hint
    assert watch.feed(b"INFO:     Application startup complete.\n", 2.0).ready_hint


def test_sglang_phases_with_bars_per_phase() -> None:
    watch = EngineWatch(SGLANG, 0.0)
    seen = feed_file(watch, "sglang-start-from-source-strings.log", chunk=131)
    assert seen == [
        Phase.IMPORTING,
        Phase.LOADING_WEIGHTS,
        Phase.AUTOTUNING,
        Phase.CAPTURING_CUDA_GRAPHS,
        Phase.WARMING_UP,
    ]
    # the last bar seen is the CUDA-graph capture bar, redrawn with \r, tagged with its phase
    assert watch.progress is not None
    assert watch.progress.label.startswith("Capturing batches")
    assert watch.progress.phase == Phase.CAPTURING_CUDA_GRAPHS.value
    assert (watch.progress.done, watch.progress.total) == (4, 4)


def test_sglang_shard_bar_sets_loading_weights_progress() -> None:
    watch = EngineWatch(SGLANG, 0.0)
    line = (
        b"Loading safetensors checkpoint shards:  54% Completed | 45/83 [00:14<00:13,  3.13it/s]\n"
    )
    update = watch.feed(line, 5.0)
    assert update.changed
    assert watch.status.phase is Phase.LOADING_WEIGHTS
    assert watch.progress is not None and (watch.progress.done, watch.progress.total) == (45, 83)


def phase_of(watch: EngineWatch) -> Phase:
    """The watch's phase as of now (read afresh after each feed)."""
    return watch.status.phase


def test_ready_is_never_left_and_never_set_by_a_line() -> None:
    watch = EngineWatch(SGLANG, 0.0)
    watch.feed(b"The server is fired up and ready to roll!\n", 1.0)
    assert phase_of(watch) is not Phase.READY
    watch.ready(2.0)
    watch.feed(b"Load weight begin. avail mem=1 GB\n", 3.0)
    assert phase_of(watch) is Phase.READY
    assert not may_enter(Phase.READY, Phase.COMPILING)
    assert may_enter(Phase.CAPTURING_CUDA_GRAPHS, Phase.COMPILING)
    assert not may_enter(Phase.WARMING_UP, Phase.LOADING_WEIGHTS)


@pytest.mark.parametrize(
    ("fixture", "profile", "reason", "needle"),
    [
        ("vllm-0.32-cpu-bad-max-model-len.log", VLLM, FailureReason.BAD_ARGUMENT, "ModelConfig"),
        ("vllm-0.32-cpu-missing-model.log", VLLM, FailureReason.MODEL_NOT_FOUND, "Repo id"),
        ("vllm-0.32-cpu-unknown-flag.log", VLLM, FailureReason.BAD_ARGUMENT, "unrecognized"),
        (
            "sglang-ep-illegal-memory-access.log",
            SGLANG,
            FailureReason.ILLEGAL_MEMORY_ACCESS,
            "illegal memory access",
        ),
        ("sglang-cuda-oom.log", SGLANG, FailureReason.CUDA_OOM, "CUDA out of memory"),
    ],
)
def test_failure_reason_from_real_logs(
    fixture: str, profile: object, reason: FailureReason, needle: str
) -> None:
    assert profile in (VLLM, SGLANG)
    watch = EngineWatch(VLLM if profile is VLLM else SGLANG, 0.0)
    feed_file(watch, fixture)
    tail = (FIXTURES / fixture).read_text().splitlines()[-20:]
    failure = watch.failed(1, tail, ())
    assert failure.reason is reason
    assert needle in failure.line
    assert watch.status.failure_reason == reason.value


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("OSError: [Errno 98] Address already in use", FailureReason.ADDRESS_IN_USE),
        (
            (
                "ERROR: [Errno 98] error while attempting to bind on address ('127.0.0.1', 8000): "
                "address already in use"
            ),
            FailureReason.ADDRESS_IN_USE,
        ),
        (
            (
                "torch.distributed.DistBackendError: NCCL error in: ../ProcessGroupNCCL.cpp:1970, "
                "unhandled cuda error"
            ),
            FailureReason.NCCL_ERROR,
        ),
        (
            "OSError: /m does not appear to have a file named config.json",
            FailureReason.MODEL_NOT_FOUND,
        ),
        (
            "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find the requested files",
            FailureReason.MODEL_NOT_FOUND,
        ),
    ],
)
def test_signature_lines(line: str, reason: FailureReason) -> None:
    watch = EngineWatch(GENERIC, 0.0)
    assert watch.failed(1, ["some noise", line, "more noise"], ()).reason is reason


def test_a_cause_wins_over_its_consequence() -> None:
    tail = [
        "[rank5] Watchdog caught collective operation timeout: WorkNCCL(...) ran for 30000 ms",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    ]
    assert EngineWatch(SGLANG, 0.0).failed(1, tail, ()).reason is FailureReason.CUDA_OOM


def test_a_failure_line_scrolled_out_of_the_tail_is_still_found() -> None:
    watch = EngineWatch(VLLM, 0.0)
    watch.feed(b"RuntimeError: CUDA error: an illegal memory access was encountered\n", 1.0)
    watch.feed(b"".join(b"shutdown noise %d\n" % i for i in range(500)), 2.0)
    failure = watch.failed(1, [f"shutdown noise {i}" for i in range(480, 500)], ())
    assert failure.reason is FailureReason.ILLEGAL_MEMORY_ACCESS


def test_signal_oom_killer_and_unknown_exit() -> None:
    w = EngineWatch(GENERIC, 0.0)
    assert w.failed(-9, ["bye"], ()).reason is FailureReason.KILLED_BY_SIGNAL
    assert "SIGKILL" in w.status.failure_line
    oom = w.failed(-9, ["bye"], (4242,))
    assert oom.reason is FailureReason.OOM_KILLED and "4242" in oom.line
    assert w.failed(3, ["bye"], ()).reason is FailureReason.EXITED


def test_startup_timeout_unless_the_log_names_a_cause() -> None:
    w = EngineWatch(SGLANG, 0.0)
    assert (
        w.timed_out(["Capture cuda graph begin."], "no 2xx").reason is FailureReason.STARTUP_TIMEOUT
    )
    w.feed(b"NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited\n", 1.0)
    assert w.timed_out([], "no 2xx").reason is FailureReason.NCCL_ERROR


def test_hostile_log_is_bounded() -> None:
    watch = EngineWatch(GENERIC, 0.0)
    watch.feed(b"x" * (1 << 20), 1.0)  # one endless line
    watch.feed(b"\xff\xfe garbage \x00\n" * 1000, 2.0)
    watch.feed(b"CUDA out of memory. Tried to allocate 1 GiB\n" * 1000, 3.0)
    assert len(watch._pending) <= 4096
    assert len(watch._suspects) <= 20


def test_status_round_trips() -> None:
    watch = EngineWatch(VLLM, 10.0)
    feed_file(watch, "vllm-0.32-cpu-start.log")
    watch.ready(99.0)
    status, _ = watch.snapshot()
    again = EngineStatus.from_dict(status.to_dict())
    assert again == status
    assert again.phase is Phase.READY


def test_a_finished_bar_hints_ready_only_for_generic_servers() -> None:
    done = b"Loading safetensors checkpoint shards: 100% Completed | 8/8 [00:01<00:00, 8.0it/s]\n"
    assert EngineWatch(GENERIC, 0.0).feed(done, 1.0).ready_hint
    assert not EngineWatch(SGLANG, 0.0).feed(done, 1.0).ready_hint  # graphs are still to come


@pytest.mark.parametrize(
    ("profile", "name", "port"),
    [
        (VLLM, "vllm-0.32-cpu-start.log", 18431),
        (SGLANG, "sglang-start-from-source-strings.log", 30000),
    ],
)
def test_the_port_a_real_engine_says_it_listens_on(
    profile: EngineProfile, name: str, port: int
) -> None:
    """Issue 46: read from its log, so a port other than the probed one is said in seconds."""
    watch = EngineWatch(profile, 0.0)
    feed_file(watch, name)
    assert watch.listening is not None and watch.listening[0] == port


def test_a_ready_model_listed_by_its_path_names_the_flag() -> None:
    hint = served_name_hint("glm-5", ["/models/GLM-5"])
    assert "add --served-model-name glm-5" in hint and "'/models/GLM-5'" in hint
    assert served_name_hint("glm-5", ["other"]) == ""
    assert served_name_hint("glm-5", ["/models/GLM-5.1"]) == ""


def test_a_port_in_the_log_is_a_mismatch_only_where_the_server_answers_there() -> None:
    """A port the log names where the ready path does not answer 2xx (a metrics exporter's)
    is no reason to fail a server still loading; one where it does answer is."""
    from tunelab.agent.servers.engineside import EngineSupervision
    from tunelab.agent.servers.probe import ProbeResult
    from tunelab.agent.servers.record import ServerRecord
    from tunelab.agent.servers.spec import ServerSpec
    from tunelab.agent.servers.states import ServerState

    asked: list[int] = []
    answering = {9090: False, 8101: True}

    def probe(port: int, path: str, model: str) -> ProbeResult:
        asked.append(port)
        return ProbeResult(answering[port], f"GET {path} on {port}")

    spec = ServerSpec(argv=("python", "serve.py", "--port", "8100"), port=8100)
    record = ServerRecord(id="s", spec=spec, state=ServerState.STARTING, started_at=1.0)
    metrics = EngineSupervision(record, False, 0.05, probe=probe)
    metrics.on_log(b"metrics listening on http://0.0.0.0:9090\n", 2.0)
    assert metrics.port_mismatch(2.0) == "" and asked == [9090]
    assert metrics.port_mismatch(2.5) == "" and asked == [9090]  # asked at most once a second
    elsewhere = EngineSupervision(record, False, 0.05, probe=probe)
    elsewhere.on_log(b"INFO:     Uvicorn running on http://0.0.0.0:8101 (Press CTRL+C)\n", 2.0)
    said = elsewhere.port_mismatch(3.0)
    assert "ready on port 8101" in said and "probe uses port 8100" in said
