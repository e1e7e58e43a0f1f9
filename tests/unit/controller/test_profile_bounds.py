"""Unit: ``tunelab profile`` reads a trace within a budget of events, time and expansion
(issue 36.5): a 692 KB gzip bomb of 3 M events held it 78 s."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.unit.controller.test_profile_summary import _x
from tunelab.analysis.profiles import TraceTooLarge, traceread
from tunelab.analysis.profiles.summary import summarize
from tunelab.cli.main import main


def trace(path: Path, count: int, gz: bool = False, same: bool = False) -> Path:
    events = [_x("aten::mm", "cpu_op", 0 if same else i, 1) for i in range(count)]
    body = json.dumps({"traceEvents": events})
    if gz:
        with gzip.open(path, "wt", compresslevel=9) as out:
            out.write(body)
    else:
        path.write_text(body)
    return path


def test_the_cli_stops_past_max_events_with_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = trace(tmp_path / "t.json", 5000)
    assert main(["profile", "--trace", str(path), "--max-events", "1000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "t.json: more than 1000 events: stopped" in err[0]
    assert "raise --max-events or --max-seconds" in err[0]
    assert main(["profile", "--trace", str(path), "--max-events", "5000", "--json"]) == 0


def test_a_read_past_its_time_budget_stops_with_the_reason(tmp_path: Path) -> None:
    path = trace(tmp_path / "t.json", 10)
    with pytest.raises(TraceTooLarge, match="ran out of its time budget"):
        summarize([path], max_seconds=-1.0)


def test_the_event_budget_spans_every_file_of_a_run(tmp_path: Path) -> None:
    files = [trace(tmp_path / f"r{i}.json", 600) for i in range(2)]
    summarize(files[:1], max_events=1000)
    with pytest.raises(TraceTooLarge, match="more than 1000 events"):
        summarize(files, max_events=1000)


def test_a_gzip_bomb_is_refused_by_its_expansion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one event over and over, as the bomb was: ~14 MB of text, ~40 KB gzipped
    bomb = trace(tmp_path / "bomb.json.gz", 200_000, gz=True, same=True)
    monkeypatch.setattr(traceread, "MIN_EXPANDED", 1 << 20)
    assert bomb.stat().st_size * traceread.MAX_EXPANSION < 14_000_000
    with pytest.raises(TraceTooLarge, match="a gzip bomb"):
        summarize([bomb])
    real = trace(tmp_path / "real.json.gz", 20_000, gz=True)  # 25x: a real trace's ratio
    assert summarize([real]).events == 20_000
