"""The load generator against the real simulator: every expected value follows from the
simulator's schedule (chunk j at arrival + TTFT + j·D). Tolerances allow for a busy 2-core box.

Wall-clock figures (throughput, a point's duration) are bounded by the schedule only from the
side a busy machine cannot cross: nothing completes sooner than the simulator sends it. How close
the client comes to the schedule is a benchmark's figure (benchmarks/client_accuracy_overhead.py:
throughput over the steady-state truth C·N/(TTFT + (N-1)·D), TTFT and TPOT errors)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tunelab.bench.config import BenchConfig
from tunelab.bench.simulator.process import SimulatorProcess
from tunelab.bench.sweep import run_sweep
from tunelab.bench.workload import arrival_offsets


@pytest.fixture
def start_sim(tmp_path: Path) -> Iterator[Any]:
    procs: list[SimulatorProcess] = []

    def start(*args: str) -> str:
        proc = SimulatorProcess(list(args), tmp_path / f"sim{len(procs)}.log").start()
        procs.append(proc)
        return proc.url

    yield start
    for proc in procs:
        proc.stop()


LATE_MS = 25.0  # what a loaded CI machine may add to one time; the precision is a benchmark's


def scheduled(measured_ms: float, schedule_ms: float) -> bool:
    """A time the load generator measured against the one the simulator scheduled: never
    shorter (it cannot see a token before it is sent), longer only by machine noise. Averaged
    per-token figures (TPOT, ITL medians) keep their tight bounds; they do not carry one late
    wake-up of the client."""
    return schedule_ms - 1.0 <= measured_ms <= schedule_ms + LATE_MS


def bench(url: str, **kw: Any) -> dict[str, Any]:
    kw.setdefault("model", "tunelab-sim")
    kw.setdefault("input_len", 16)
    kw.setdefault("concurrency", (1,))
    doc = run_sweep(BenchConfig(url=url, **kw).with_preset())
    assert doc["status"] == "completed"
    return doc["points"][0]  # type: ignore[no-any-return]


def test_single_stream_decode(start_sim: Any) -> None:
    """The users' case: TTFT 300 ms, D = 97 ms, 50 tokens -> TPOT 97.0 ms, E2E 5053 ms."""
    url = start_sim("--ttft-ms", "300", "--itl-ms", "97")
    p = bench(url, output_len=50, requests=1)
    assert p["completed"] == 1 and p["failed"] == 0
    assert p["total_output_tokens"] == 50
    assert scheduled(p["mean_ttft_ms"], 300.0)
    assert p["mean_tpot_ms"] == pytest.approx(97.0, abs=0.5)
    assert scheduled(p["mean_e2el_ms"], 5053.0)
    assert p["median_itl_per_token_ms"] == pytest.approx(97.0, abs=1.0)
    assert p["itl_per_token_samples"] == 49
    assert p["token_count_source"] == {"usage_continuous": 1}
    assert p["duration"] >= 5.053 - 0.001  # the last token is sent 5053 ms after the request
    assert p["output_throughput"] == pytest.approx(50 / p["duration"])


def test_four_tokens_per_chunk(start_sim: Any) -> None:
    """k = 4: per-token ITL is D/4, per-chunk ITL is D, TPOT = D(N-k)/(k(N-1))."""
    url = start_sim("--ttft-ms", "100", "--itl-ms", "40", "--tokens-per-chunk", "4")
    p = bench(url, output_len=52, requests=2)
    assert p["total_output_tokens"] == 104
    assert scheduled(p["mean_ttft_ms"], 100.0)
    assert p["median_itl_ms"] == pytest.approx(40.0, abs=1.0)
    assert p["median_itl_per_token_ms"] == pytest.approx(10.0, abs=0.3)
    assert p["itl_per_token_samples"] == 2 * 48  # the first chunk's 4 tokens are in TTFT
    assert p["mean_tpot_ms"] == pytest.approx(40.0 * 48 / (4 * 51), abs=0.3)


def test_role_only_first_chat_chunk_does_not_set_ttft(start_sim: Any) -> None:
    url = start_sim("--ttft-ms", "120", "--itl-ms", "20", "--role-chunk-ms", "1")
    p = bench(url, api="chat", output_len=10, requests=2)
    assert p["completed"] == 2
    assert scheduled(p["mean_ttft_ms"], 120.0)  # not the role chunk's 1 ms
    assert p["itl_samples"] == 2 * 9  # no spurious interval from the role chunk
    assert p["median_itl_ms"] == pytest.approx(20.0, abs=1.0)  # content to content only


def test_early_eos_counts_the_tokens_generated(start_sim: Any) -> None:
    url = start_sim("--ttft-ms", "50", "--itl-ms", "20", "--eos-after", "20")
    p = bench(url, output_len=50, requests=2, ignore_eos=False)
    assert p["total_output_tokens"] == 40  # never max_tokens (sglang#24254)
    assert p["mean_output_tokens"] == 20
    assert p["mean_output_len_requested"] == 50
    assert p["mean_tpot_ms"] == pytest.approx(20.0, abs=0.5)
    assert scheduled(p["mean_e2el_ms"], 50 + 19 * 20)


def test_closed_loop_throughput_matches_the_schedule(start_sim: Any) -> None:
    """C·N/(TTFT + (N-1)·D): 16 streams of 20 tokens at TTFT 50 ms, D 20 ms -> at most 744
    tokens/s. 64 requests through 16 slots are four waves of 430 ms each, never shorter: the
    counts and that floor are asserted; how near 744 a client comes is the benchmark's figure
    (a loaded machine measured 720, 3.2 % under; issue 37)."""
    url = start_sim("--ttft-ms", "50", "--itl-ms", "20")
    p = bench(url, concurrency=(16,), output_len=20, requests=64, warmup=16)
    per_request = 0.050 + 19 * 0.020
    assert p["completed"] == 64 and p["max_in_flight_requests"] == 16
    assert p["max_concurrent_requests"] >= 16  # vLLM's: active in a one-second bucket
    assert p["total_output_tokens"] == 64 * 20
    assert p["duration"] >= 4 * per_request - 0.001  # four waves, as scheduled or later
    assert p["output_throughput"] == pytest.approx(64 * 20 / p["duration"])
    assert p["output_throughput"] <= 16 * 20 / per_request * 1.001
    assert p["itl_per_token_samples"] == 64 * 19


def test_faults_are_errors_by_kind_and_stay_out_of_latency(start_sim: Any) -> None:
    url = start_sim(
        "--ttft-ms", "40", "--itl-ms", "10",
        "--fault", "429:5", "--fault", "500:7", "--fault", "drop:3", "--fault", "malformed:4",
        "--fault", "hang:11",
    )  # fmt: skip
    p = bench(url, concurrency=(3,), output_len=8, requests=22, request_timeout_s=1.5)
    kinds = p["errors_by_kind"]
    # requests 1..22: 429 at 5,10,15,20; 500 at 7,14,21; drop at 3,6,9,12,18; malformed at 4,8,16;
    # hang at 11, 22
    assert kinds == {
        "http_429": 4,
        "http_500": 3,
        "disconnected": 5,
        "malformed_stream": 3,
        "timeout": 2,
    }
    assert p["failed"] == 17 and p["completed"] == 5
    # the successes' own times: never below the simulator's, and nowhere near a hang's 1.5 s
    # timeout (the exact figures belong to benchmarks: under CI load they drift by 50 ms)
    assert 40.0 <= p["max_ttft_ms"] < 1000
    assert 40 + 7 * 10 <= p["max_e2el_ms"] < 1000
    assert len(p["error_samples"]) == 10
    assert "errors" not in p, "per-request arrays only with save_detailed, as in vLLM"


def test_no_usage_falls_back_to_chunks_with_a_warning(start_sim: Any) -> None:
    url = start_sim("--ttft-ms", "20", "--itl-ms", "5", "--usage", "none")
    p = bench(url, output_len=12, requests=2)
    assert p["token_count_source"] == {"chunks": 2}
    assert p["total_output_tokens"] == 24
    assert any("one per chunk" in w for w in p["warnings"])


def test_final_usage_only_estimates_per_token_itl(start_sim: Any) -> None:
    url = start_sim(
        "--ttft-ms", "20", "--itl-ms", "20", "--usage", "final", "--tokens-per-chunk", "2"
    )
    p = bench(url, output_len=12, requests=1)
    assert p["token_count_source"] == {"usage_final": 1}
    assert p["total_output_tokens"] == 12
    assert p["median_itl_per_token_ms"] == pytest.approx(10.0, abs=0.5)
    assert any("estimated" in w for w in p["warnings"])


def test_open_loop_rate_and_goodput(start_sim: Any) -> None:
    url = start_sim("--ttft-ms", "30", "--itl-ms", "5")
    p = bench(
        url,
        concurrency=(),
        request_rate=40.0,
        requests=40,
        output_len=4,
        slo_ttft_ms=1000.0,
        slo_tpot_ms=0.001,  # every multi-token request misses it
    )
    assert p["completed"] == 40 and p["request_rate"] == 40.0
    last_arrival = list(arrival_offsets(40.0, 1.0, 0, 40))[-1]
    assert p["duration"] >= last_arrival + 0.045 - 0.001  # the last one, sent no earlier
    assert p["good_requests"] == 0
    # dispatch lag is the client's own figure (client_accuracy_overhead.py); here only that it
    # is measured against the schedule, never negative
    assert p["p99_dispatch_lag_ms"] >= 0.0
    assert p["max_concurrency"] is None


def test_duration_bounded_closed_loop_and_self_check_flag(start_sim: Any) -> None:
    url = start_sim("--ttft-ms", "20", "--itl-ms", "10")
    p = bench(
        url, concurrency=(2,), duration_seconds=1.0, output_len=5, max_client_cpu=0.0
    )  # every point exceeds a 0 % CPU budget: the flag and its figures must show
    per_request = 0.020 + 4 * 0.010
    assert p["requests_planned"] == 0
    # two slots for 1 s of 60 ms requests: never more than the schedule fits (a busy machine
    # fits fewer), and every request that started ran to the end
    assert 2 <= p["completed"] <= 2 * (1.0 + per_request) / per_request + 2
    assert p["duration"] >= 1.0 and p["failed"] == 0
    assert p["client_saturated"] is True
    check = p["client_check"]
    assert any("client CPU" in reason for reason in check["reasons"])
    assert check["cpu_seconds"] > 0 and check["loop_lag_p99_ms"] >= 0
