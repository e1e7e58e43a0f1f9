"""Simulator pieces without sockets: the deadline scheduler, lateness bins, fault flags, the
loading line, request parsing."""

from __future__ import annotations

import argparse
import asyncio
import functools

import pytest

from tunelab.agent.engines.progress import parse_progress_line
from tunelab.bench.simulator.app import progress_line
from tunelab.bench.simulator.engine import BadRequest, parse_generation
from tunelab.bench.simulator.options import Fault, SimSettings, parse_fault
from tunelab.bench.simulator.timing import DeadlineScheduler, LatenessStats, new_event_loop


def test_scheduler_runs_callbacks_at_their_deadlines_in_order() -> None:
    async def scenario() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        sched = DeadlineScheduler(loop)
        start = loop.time()
        seen: list[tuple[str, float]] = []

        def note(name: str) -> None:
            seen.append((name, loop.time() - start))

        for name, delay in (("c", 0.030), ("a", 0.010), ("b", 0.020)):
            sched.at(start + delay, functools.partial(note, name))
        for _ in range(500):  # until all three ran: a loaded machine may run them late
            if len(seen) == 3:
                break
            await asyncio.sleep(0.01)
        return seen

    loop = new_event_loop()
    try:
        seen = loop.run_until_complete(scenario())
    finally:
        loop.close()
    assert [name for name, _ in seen] == ["a", "b", "c"]
    # never early; how late is a benchmark figure (benchmarks/client_accuracy_overhead.py), so
    # the bound here only catches a scheduler that waits for something else entirely
    for (_, at), due in zip(seen, (0.010, 0.020, 0.030), strict=True):
        assert due - DeadlineScheduler.WINDOW <= at < due + 1.0


def test_scheduler_keeps_going_after_a_callback_raises() -> None:
    async def scenario() -> list[str]:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, _ctx: None)
        sched = DeadlineScheduler(loop)
        seen: list[str] = []

        def boom() -> None:
            raise RuntimeError("bug in one stream")

        sched.at(loop.time() + 0.005, boom)
        sched.at(loop.time() + 0.015, lambda: seen.append("later"))
        await asyncio.sleep(0.04)
        return seen

    assert asyncio.run(scenario()) == ["later"]


def test_lateness_stats_bins_and_quantiles() -> None:
    stats = LatenessStats()
    for value in [0.00001] * 98 + [0.002, 0.5]:
        stats.record(value)
    stats.record(-0.00005)  # a batch may write up to 0.1 ms early
    summary = stats.summary()
    assert summary["writes"] == 101
    assert summary["p50_ms"] == pytest.approx(0.02)
    assert summary["max_ms"] == pytest.approx(500.0)
    assert stats.quantile(0.995) == pytest.approx(0.1, abs=1e-6)  # the overflow bin: >= 100 ms


def test_fault_flags() -> None:
    assert parse_fault("429") == Fault("429", 1)
    assert parse_fault("drop:5") == Fault("drop", 5)
    assert Fault("500", 3).status == 500 and Fault("hang").status is None
    for bad in ("200", "explode", "drop:0", "drop:x"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_fault(bad)
    settings = SimSettings(faults=(Fault("429", 4), Fault("drop", 2)))
    assert [settings.fault_for(n) for n in (1, 2, 4)] == [None, Fault("drop", 2), Fault("429", 4)]


def test_loading_line_is_what_the_agent_parses() -> None:
    line = progress_line(45, 83, 14.4, 0.32)
    assert line.startswith("Loading safetensors checkpoint shards:  54% Completed | 45/83 [00:14<")
    parsed = parse_progress_line(line)
    assert parsed is not None and (parsed.done, parsed.total) == (45, 83)


def test_request_parsing() -> None:
    settings = SimSettings(default_max_tokens=7, eos_after=3)
    req = parse_generation(b'{"prompt": "a b c", "stream": true}', chat=False, settings=settings)
    assert (req.prompt_tokens, req.max_tokens, req.stream) == (3, 7, True)
    assert req.output_tokens(settings.eos_after) == 3  # EOS first
    chat = parse_generation(
        b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "x y"}]}],'
        b' "max_completion_tokens": 9, "ignore_eos": true}',
        chat=True,
        settings=settings,
    )
    assert chat.prompt_tokens == 2 + 4 and chat.output_tokens(settings.eos_after) == 9
    for body in (b"not json", b'{"prompt": 3}', b'{"prompt": "a", "max_tokens": 0}'):
        with pytest.raises(BadRequest):
            parse_generation(body, chat=False, settings=settings)
