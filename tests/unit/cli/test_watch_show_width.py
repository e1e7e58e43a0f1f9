"""``tunelab watch show``: a verdict line longer than the terminal wraps under itself (the docs'
own sample was 130 columns)."""

from __future__ import annotations

import pytest

from tunelab.cli.watches_cmd import _summary_rows, render_watch


def _doc() -> dict[str, object]:
    row = {"metric": "output_throughput", "change_pct": -23.0, "interval": [-25.0, -21.0],
           "verdict": "regression", "launches": [3, 3]}  # fmt: skip
    changes = [{"field": "engine version", "before": "tunelab-simulator 0.5.2",
                "after": "tunelab-simulator 0.5.3"}]  # fmt: skip
    return {
        "name": "a-nightly-watch-of-the-production-inference-configuration", "state": "active",
        "every": "1d", "launches": 3, "baseline": "first", "margin_pct": 5.0,
        "metrics": ["output_throughput", "p99_ttft_ms"], "next_due": 1796675412.0,
        "occurrences_count": 2, "last_verdict": "regression", "running_occurrence": 3,
        "occurrences": [
            {"index": 5, "group": "g-0123456789abcdef", "started_at": 1796675412.0,
             "verdict": "regression", "baseline": 1, "launches": 3, "launches_total": 3,
             "metrics": [row], "changes": changes},
        ],
    }  # fmt: skip


def test_verdict_lines_and_the_watch_list_fit_100_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    shown = render_watch(_doc()).splitlines() + _summary_rows([_doc()])
    assert max(map(len, shown)) <= 100, shown
    text = " ".join(" ".join(shown).split())
    assert "changed since the baseline: tunelab-simulator 0.5.2 → 0.5.3" in text
    assert "regression (#3 running)" in text  # the last verdict, and what runs now
