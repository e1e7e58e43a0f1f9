"""Datasets and arrivals end to end (issue 26): the real simulator, a real sweep in-process."""

from __future__ import annotations

import io
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tunelab.bench.config import BenchConfig
from tunelab.bench.simulator.process import SimulatorProcess
from tunelab.bench.sweep import run_sweep


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimulatorProcess]:
    log = tmp_path_factory.mktemp("sim") / "sim.log"
    with SimulatorProcess(["--ttft-ms", "20", "--itl-ms", "2"], log) as proc:
        yield proc


def sweep(sim: SimulatorProcess, **kw: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    values: dict[str, Any] = {"url": sim.url, "model": "tunelab-sim", "input_len": 8}
    values.update(kw)
    out = io.StringIO()
    doc = run_sweep(BenchConfig(**values).with_preset(), out)
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    return doc, [x for x in lines if not x["warmup"]]


def test_multi_turn_sends_a_turn_only_after_the_previous_answer(sim: SimulatorProcess) -> None:
    doc, lines = sweep(
        sim, dataset="multi-turn", turns=3, think_time_s=0.05, concurrency=(2,), requests=3,
        output_len=4, api="chat",
    )  # fmt: skip
    point = doc["points"][0]
    assert point["completed"] == 9 and point["conversations_planned"] == 3
    assert sorted(point["by_turn"]) == ["0", "1", "2"]
    for conv in range(3):
        turns = sorted((x for x in lines if x["conversation"] == conv), key=lambda x: x["turn"])
        assert [x["turn"] for x in turns] == [0, 1, 2]
        for before, after in itertools.pairwise(turns):
            assert after["start_s"] >= before["end_s"] + 0.05  # answer ended, then think time
            assert after["prompt_tokens"] > before["prompt_tokens"]  # the history grows
    # two conversations at a time: the third waited for a free one from the point's start
    firsts = sorted(x["queue_ms"] for x in lines if x["turn"] == 0)
    assert firsts[0] < firsts[2] and firsts[2] > 20.0


def test_trace_is_sent_no_earlier_than_its_timestamps(
    sim: SimulatorProcess, tmp_path: Path
) -> None:
    stamps = [0, 150, 160, 400, 650]
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        "".join(
            json.dumps({"timestamp_ms": 5000 + t, "input_length": 16, "output_length": 3,
                        "hash_ids": [1, 2 + i]}) + "\n"
            for i, t in enumerate(stamps)
        )
    )  # fmt: skip
    doc, lines = sweep(sim, dataset="trace", dataset_path=str(trace), trace_block_size=8)
    point = doc["points"][0]
    assert point["completed"] == 5 and point["clock_start"] == "first_arrival"
    assert doc["dataset"]["name"] == "trace" and len(doc["dataset"]["sha256"]) == 64
    by_index = sorted(lines, key=lambda x: x["index"])
    assert [x["max_tokens"] for x in by_index] == [3] * 5
    for line, stamp in zip(by_index, stamps, strict=True):
        assert line["arrived_s"] == pytest.approx(stamp / 1000.0, abs=1e-3)
        assert line["start_s"] >= stamp / 1000.0 - 1e-3
        assert line["dispatch_lag_ms"] >= 0
    assert set(point["by_prefix_group"]) == {"1"}


def test_closed_loop_warms_its_connections_and_queues_like_vllm(sim: SimulatorProcess) -> None:
    doc, _lines = sweep(sim, concurrency=(4,), requests=12, output_len=3)
    point = doc["points"][0]
    assert point["clock_start"] == "first_request"
    assert point["connections_warmed"] == 4
    assert point["client_check"]["connections_opened"] == 0  # none opened on the clock
    queued = sorted(point["queue_times"])
    assert queued[0] >= 0 and queued[-1] > 0.02  # later requests waited for a free slot
    assert point["max_client_queue_time_ms"] == pytest.approx(queued[-1] * 1000.0)
    assert doc["dataset"]["lengths"].startswith("approximate")


def test_rate_list_with_a_cap_and_shared_prefix_groups(sim: SimulatorProcess) -> None:
    doc, lines = sweep(
        sim, rates=(50.0, 100.0), max_concurrency=1, requests=6, output_len=3,
        dataset="shared-prefix", prefix_len=12, prefix_groups=2, percentiles=(50.0, 90.0),
    )  # fmt: skip
    assert [p["request_rate"] for p in doc["points"]] == [50.0, 100.0]
    for point in doc["points"]:
        assert point["max_concurrency"] == 1 and point["max_in_flight_requests"] == 1
        assert sorted(point["by_prefix_group"]) == ["0", "1"]
        assert point["by_prefix_group"]["0"]["completed"] == 3
        assert "p90_ttft_ms" in point and "p50_itl_ms" in point
    assert {x["prefix_group"] for x in lines} == {0, 1}


def test_a_timed_trace_sends_its_first_n_rows_and_never_more(
    sim: SimulatorProcess, tmp_path: Path
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(
            json.dumps({"timestamp": i * 0.01, "input_length": 4, "output_length": 2}) + "\n"
            for i in range(5)
        )
    )
    first, _ = sweep(sim, dataset="trace", dataset_path=str(trace), requests=3)
    assert first["points"][0]["completed"] == 3
    every, _ = sweep(sim, dataset="trace", dataset_path=str(trace), requests=50)
    assert every["points"][0]["completed"] == 5


def test_stopped_while_warming_connections_still_yields_the_point() -> None:
    """A stop (SIGTERM/Ctrl-C cancel the sweep) while the pool's connections are being warmed,
    before the clock: the point is still summarised, as interrupted, so the result has it."""
    import asyncio

    from tunelab.bench.sweep import Sweep

    async def scenario() -> list[dict[str, Any]]:
        accepted = asyncio.Event()
        held: list[asyncio.StreamWriter] = []

        async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            held.append(writer)
            if len(held) >= 3:
                accepted.set()

        server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        config = BenchConfig(
            url=f"http://127.0.0.1:{port}", model="m", concurrency=(3,), requests=3,
            input_len=4, output_len=2,
        ).with_preset()  # fmt: skip
        points: list[dict[str, Any]] = []
        task = asyncio.get_running_loop().create_task(Sweep(config, None, None).run(points))
        await asyncio.wait_for(accepted.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for w in held:
            w.close()
        server.close()
        return points

    points = asyncio.run(scenario())
    assert len(points) == 1 and points[0]["interrupted"] is True
    assert points[0]["completed"] == 0 and points[0]["connections_warmed"] == 0
