"""Unit: tqdm-style load progress parsing."""

from __future__ import annotations

import pytest

from tunelab.agent.engines.profiles import GENERIC
from tunelab.agent.engines.progress import parse_progress_line
from tunelab.agent.engines.watch import EngineWatch


def test_sglang_shard_line() -> None:
    line = "Loading safetensors checkpoint shards:  54% Completed | 45/83 [00:14<00:13,  3.13it/s]"
    p = parse_progress_line(line)
    assert p is not None
    assert (p.label, p.done, p.total) == ("Loading safetensors checkpoint shards", 45, 83)
    assert p.rate_per_second == pytest.approx(3.13)
    assert p.eta_seconds == 13


def test_hf_bar_line_with_seconds_per_item() -> None:
    line = "Loading checkpoint shards:  50%|█████     | 2/4 [01:02<01:01, 31.50s/it]"
    p = parse_progress_line(line)
    assert p is not None
    assert (p.done, p.total) == (2, 4)
    assert p.rate_per_second == pytest.approx(1 / 31.5)
    assert p.eta_seconds == 61


def test_unknown_rate_and_eta() -> None:
    p = parse_progress_line("Capturing batches:   0%|          | 0/35 [00:00<?, ?it/s]")
    assert p is not None
    assert (p.done, p.total, p.rate_per_second, p.eta_seconds) == (0, 35, 0.0, -1.0)


@pytest.mark.parametrize(
    "line",
    [
        "INFO 05-01 12:00:00 server.py:12] Started server process",
        "progress 50% done",
        "Loading: 100% | 90/83 [00:01<00:00, 1.0it/s]",  # done > total is not progress
    ],
)
def test_non_progress_lines(line: str) -> None:
    assert parse_progress_line(line) is None


def test_tracker_splits_carriage_returns_and_keeps_partial_lines() -> None:
    tracker = EngineWatch(GENERIC, 0.0)
    first = (
        b"Loading safetensors checkpoint shards:  1% Completed | 1/83 [00:01<01:22, 1.00it/s]\rLoad"
    )
    assert tracker.feed(first, now=1.0).changed
    assert tracker.progress is not None and tracker.progress.done == 1
    rest = b"ing safetensors checkpoint shards:  2% Completed | 2/83 [00:02<01:21, 1.00it/s]\r"
    assert tracker.feed(rest, now=2.0).changed
    assert tracker.progress.done == 2
    assert not tracker.feed(b"some other line\n", now=3.0).changed
