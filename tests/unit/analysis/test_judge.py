"""The one pairwise rule (analysis/judge.py) and the metric catalogue it reads directions from."""

from __future__ import annotations

import pytest

from tunelab.analysis.intervals import Estimate, contrast
from tunelab.analysis.judge import Verdict, judge_pair, wording
from tunelab.analysis.metrics import (
    CATALOGUE,
    Direction,
    UnknownMetric,
    lookup,
    parse_metric,
)

THROUGHPUT = CATALOGUE["output_throughput"]
TTFT = CATALOGUE["p99_ttft_ms"]


def test_catalogue_aliases_are_the_same_entries() -> None:
    assert lookup("ttft_p99_ms") is TTFT
    assert lookup("goodput") is lookup("request_goodput")
    assert lookup("goodput").field == "request_goodput"
    assert lookup("failed").direction is Direction.LOWER
    assert lookup("completed").higher_is_better
    assert lookup("energy_joules").direction is Direction.LOWER
    assert lookup("tokens_per_joule").scope == "run"


def test_parse_metric_at_a_point() -> None:
    ref = parse_metric("p99_ttft_ms@c8")
    assert ref.metric is TTFT and ref.point == "c8" and ref.text == "p99_ttft_ms@c8"
    assert parse_metric("output_throughput").point is None
    assert parse_metric("goodput@r4.0").point == "r4.0"


def test_unknown_metric_names_the_catalogue_and_a_near_one() -> None:
    with pytest.raises(UnknownMetric) as info:
        parse_metric("p99_tfft_ms@c8")
    text = str(info.value)
    assert "did you mean p99_ttft_ms" in text and "output_throughput" in text
    with pytest.raises(UnknownMetric):
        parse_metric("p99 ttft")


def test_band_first_then_separation_then_undecided() -> None:
    # a real +1 % difference, very precisely measured: inside +-2 % is a tie, not "better"
    tight = Estimate(0.01, 0.001, 50.0)
    j = judge_pair(tight, THROUGHPUT, margin=0.02, confidence=0.95, launches=(5, 5))
    assert j.verdict is Verdict.TIE
    j = judge_pair(tight, THROUGHPUT, margin=0.005, confidence=0.95, launches=(5, 5))
    assert j.verdict is Verdict.BETTER
    # the same interval on a lower-is-better metric is worse
    j = judge_pair(tight, TTFT, margin=0.005, confidence=0.95, launches=(5, 5))
    assert j.verdict is Verdict.WORSE
    # a family's correction that did not pass: never better, may still tie
    j = judge_pair(
        tight, THROUGHPUT, margin=0.005, confidence=0.95, launches=(5, 5), discovered=False
    )
    assert j.verdict is Verdict.UNDECIDED
    wide = contrast([100.0, 110.0, 95.0], [100.0, 90.0, 108.0])
    j = judge_pair(wide, THROUGHPUT, margin=0.02, confidence=0.95, launches=(3, 3))
    assert j.verdict is Verdict.UNDECIDED and j.needed is not None and j.needed > 3
    assert j.interval is not None and j.interval[0] < 0 < j.interval[1]


def test_no_estimate_is_undecided_with_two_a_side() -> None:
    j = judge_pair(None, THROUGHPUT, margin=0.02, confidence=0.95, launches=(1, 3))
    assert j.verdict is Verdict.UNDECIDED and j.needed == 2 and j.interval is None


def test_a_margin_in_percent_units_is_refused() -> None:
    with pytest.raises(ValueError, match=r"0\.05 is 5 %"):
        judge_pair(None, THROUGHPUT, margin=5.0, confidence=0.95, launches=(2, 2))


def test_wording_per_context() -> None:
    assert wording(Verdict.TIE, "compare") == "no meaningful difference"
    assert wording(Verdict.WORSE, "watch") == "regression"
    assert wording(Verdict.BETTER, "watch") == "improvement"
    assert wording(Verdict.TIE, "watch") == "no change"
    assert wording(Verdict.TIE, "race") == "tie"
