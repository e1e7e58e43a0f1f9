"""How a watch judges: verdicts, change points, provenance changes, the history page."""

from __future__ import annotations

import random
from html.parser import HTMLParser
from typing import Any

from tunelab.analysis.intervals import ALPHA, Method, adjust, contrast
from tunelab.analysis.watch import (
    MASK,
    Occurrence,
    change_points,
    history_page,
    judge_occurrence,
    provenance_changes,
    verdict_line,
)
from tunelab.analysis.watch.provenance import arrow


def occ(index: int, **values: tuple[float, ...]) -> Occurrence:
    return Occurrence(index, 1000.0 + index, dict(values), {})


def test_a_p99_ttft_at_c8_that_slows_30_percent_is_a_regression() -> None:
    """Issue 43: the direction was looked up by the full name "p99_ttft_ms@c8", missed, and
    defaulted to "higher is better": a 30 % slower p99 TTFT was an "improvement"."""
    base = occ(0, **{"p99_ttft_ms@c8": (100.0, 102.0, 98.0)})
    slower = occ(1, **{"p99_ttft_ms@c8": (130.0, 132.6, 127.4)})
    doc = judge_occurrence(slower, base, ["p99_ttft_ms@c8"], 0.05)
    assert doc["verdict"] == "regression" and doc["metrics"][0]["change_pct"] == 30.0
    assert judge_occurrence(base, slower, ["p99_ttft_ms@c8"], 0.05)["verdict"] == "improvement"


def test_more_failed_requests_is_a_regression_and_zero_failures_no_change() -> None:
    base = occ(0, failed=(0.0, 0.0, 0.0))
    assert (
        judge_occurrence(occ(1, failed=(0.0, 0.0, 0.0)), base, ["failed"], 0.05)["verdict"]
        == "no change"
    )
    worse = occ(2, failed=(20.0, 21.0, 19.0))
    assert judge_occurrence(worse, base, ["failed"], 0.05)["verdict"] == "regression"
    assert judge_occurrence(base, worse, ["failed"], 0.05)["verdict"] == "improvement"


def test_an_undecided_metric_says_what_the_watch_can_see() -> None:
    base = occ(0, output_throughput=(1000.0, 1060.0, 940.0))
    cur = occ(1, output_throughput=(1010.0, 1070.0, 950.0))
    row = judge_occurrence(cur, base, ["output_throughput"], 0.02)["metrics"][0]
    assert row["verdict"] == "undecided"
    assert row["missing"].startswith("no change detected; at this noise it sees changes of ±")
    assert row["detectable_pct"] is not None and row["detectable_pct"] > 2.0
    assert f"±{row['detectable_pct']:.3g} % or more" in row["missing"]


def test_a_clear_20_percent_step_down_in_throughput_is_a_regression() -> None:
    base = occ(0, output_throughput=(1000.0, 1010.0, 990.0))
    cur = occ(1, output_throughput=(800.0, 808.0, 792.0))
    doc = judge_occurrence(cur, base, ["output_throughput"], 0.05)
    row = doc["metrics"][0]
    assert doc["verdict"] == "regression" and row["verdict"] == "regression"
    assert row["change_pct"] == -20.0  # means 800 vs 1000
    assert row["interval"][0] < -20.0 < row["interval"][1] < -5.0
    assert row["launches"] == [3, 3]
    assert doc["method"] == "benjamini-hochberg"


def test_higher_latency_is_the_bad_side() -> None:
    base = occ(0, median_ttft_ms=(100.0, 101.0, 99.0))
    cur = occ(1, median_ttft_ms=(120.0, 121.0, 119.0))
    assert judge_occurrence(cur, base, ["median_ttft_ms"], 0.05)["verdict"] == "regression"
    assert judge_occurrence(base, cur, ["median_ttft_ms"], 0.05)["verdict"] == "improvement"


def test_equal_values_are_no_change() -> None:
    base = occ(0, output_throughput=(1000.0, 1010.0, 990.0))
    doc = judge_occurrence(
        occ(1, output_throughput=(1000.0, 1010.0, 990.0)), base, ["output_throughput"], 0.05
    )
    assert doc["verdict"] == "no change"
    assert doc["metrics"][0]["interval"][0] >= -5.0
    assert doc["metrics"][0]["missing"] == ""


def test_two_noisy_launches_are_undecided_and_say_what_is_missing() -> None:
    base = occ(0, output_throughput=(1000.0, 1150.0))
    cur = occ(1, output_throughput=(900.0, 1100.0))
    doc = judge_occurrence(cur, base, ["output_throughput"], 0.05)
    row = doc["metrics"][0]
    assert doc["verdict"] == row["verdict"] == "undecided"
    assert row["missing"].endswith("more launches would decide")
    assert int(row["missing"].split("; ")[-1].split()[0]) > 1


def test_one_launch_cannot_be_judged() -> None:
    base = occ(0, output_throughput=(1000.0, 1010.0, 990.0))
    row = judge_occurrence(occ(1, output_throughput=(900.0,)), base, ["output_throughput"], 0.05)[
        "metrics"
    ][0]
    assert row["verdict"] == "undecided" and row["missing"].startswith("1 more launch ")


def test_the_metrics_are_one_benjamini_hochberg_family() -> None:
    rng = random.Random(3)
    names = ("output_throughput", "request_throughput", "total_token_throughput")
    base_vals = {m: tuple(100 + rng.gauss(0, 3) for _ in range(3)) for m in names}
    cur_vals: dict[str, tuple[float, ...]] = dict(
        zip(names, [(90.0, 91.0, 89.5), (97.0, 101.0, 96.0), (99.0, 103.0, 100.0)], strict=True)
    )
    doc = judge_occurrence(
        Occurrence(1, 0, cur_vals, {}), Occurrence(0, 0, base_vals, {}), list(names), 0.02
    )
    raw = []
    for m in names:
        est = contrast(cur_vals[m], base_vals[m])
        assert est is not None
        raw.append(est.p_value())
    expected = adjust(raw, Method.BH)
    assert [r["p_adjusted"] for r in doc["metrics"]] == expected
    assert expected != raw  # the correction moved something
    discoveries = sum(p <= ALPHA for p in expected)
    assert doc["confidence"] == 1 - max(discoveries, 1) * ALPHA / 3


def test_a_regression_wins_over_an_improvement() -> None:
    base = occ(0, output_throughput=(1000.0, 1010.0, 990.0), median_ttft_ms=(100.0, 101.0, 99.0))
    cur = occ(1, output_throughput=(1200.0, 1210.0, 1190.0), median_ttft_ms=(130.0, 131.0, 129.0))
    doc = judge_occurrence(cur, base, ["output_throughput", "median_ttft_ms"], 0.05)
    assert [r["verdict"] for r in doc["metrics"]] == ["improvement", "regression"]
    assert doc["verdict"] == "regression"


def _noise(n: int, seed: int, level: float = 100.0, cv: float = 0.02) -> list[float]:
    rng = random.Random(seed)
    return [level * (1 + rng.gauss(0, cv)) for _ in range(n)]


def test_change_point_on_a_step() -> None:
    values = _noise(12, 1) + _noise(12, 2, level=90.0)
    found = change_points([(float(i), v) for i, v in enumerate(values)])
    assert [c["index"] for c in found] == [12]
    assert found[0]["at"] == 12.0
    assert -12 < found[0]["change_pct"] < -8 and found[0]["p_value"] <= 0.01


def test_change_point_on_a_slow_drift() -> None:
    values = [v * (1 - 0.01 * i) for i, v in enumerate(_noise(30, 4, cv=0.01))]
    found = change_points([(float(i), v) for i, v in enumerate(values)])
    assert found and all(c["change_pct"] < 0 for c in found)


def test_no_change_point_on_flat_noise() -> None:
    for seed in range(5):
        values = _noise(30, 10 + seed, cv=0.05)
        assert change_points([(float(i), v) for i, v in enumerate(values)]) == []


def test_provenance_diff_names_the_version_and_hides_secrets() -> None:
    base = {
        "engine": {"name": "sglang", "version": "0.5.2"},
        "argv": ["sglang", "--api-key", "s3cret-a", "--port", "30000"],
        "env": {"HF_TOKEN": "hf_aaaa", "CUDA_VISIBLE_DEVICES": "0"},
    }
    cur = {
        "engine": {"name": "sglang", "version": "0.5.3"},
        "argv": ["sglang", "--api-key=s3cret-b", "--port", "30000"],
        "env": {"HF_TOKEN": "hf_bbbb", "CUDA_VISIBLE_DEVICES": "0"},
    }
    changes = provenance_changes(cur, base)
    assert changes[0] == {"field": "engine", "before": "sglang 0.5.2", "after": "sglang 0.5.3"}
    text = repr(changes)
    assert "s3cret" not in text and "hf_" not in text and MASK in text
    assert [c["field"] for c in changes] == ["engine", "argv"]  # env differs only in secrets


def test_a_launchs_own_port_is_no_change() -> None:
    base = {"argv": ["sim", "--port", "31863", "--master-port=29500", "--tp", "2"]}
    cur = {"argv": ["sim", "--port", "31990", "--master-port=29611", "--tp", "2"]}
    assert provenance_changes(cur, base) == []
    wider = {"argv": ["sim", "--port", "31990", "--master-port=29611", "--tp", "4"]}
    [change] = provenance_changes(wider, base)
    assert arrow(change) == ("sim --port PORT --master-port=PORT --tp 2 → 4")


def test_provenance_without_differences_is_empty() -> None:
    prov = {"engine": {"name": "vllm", "version": "0.11"}}
    assert provenance_changes(prov, dict(prov)) == []


def test_verdict_line() -> None:
    row = {
        "metric": "output_throughput",
        "change_pct": -18.2,
        "interval": [-21.3, -15.1],
        "launches": [3, 3],
        "verdict": "regression",
        "missing": "",
    }
    line = verdict_line(
        row, [{"field": "engine", "before": "sglang 0.5.2", "after": "sglang 0.5.3"}]
    )
    assert line == (
        "output_throughput \u221218 % [\u221221, \u221215] (regression, 3 vs 3 launches) — "
        "changed since the baseline: sglang 0.5.2 → 0.5.3"
    )


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.classes: list[str] = []
        self.figures = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        cls = dict(attrs).get("class") or ""
        self.classes += cls.split()
        self.figures += tag == "figure"


def history(n: int = 16) -> tuple[list[Occurrence], list[dict[str, Any]]]:
    occs = []
    for i in range(n):
        level = 1000.0 if i < 8 else 800.0
        version = "0.5.2" if i < 8 else "0.5.3"
        occs.append(
            Occurrence(
                i,
                1000.0 + 3600 * i,
                {
                    "output_throughput": tuple(_noise(3, i, level=level)),
                    "median_ttft_ms": tuple(_noise(3, 100 + i)),
                },
                {"engine": {"name": "sglang", "version": version}},
            )
        )
    metrics = ["output_throughput", "median_ttft_ms"]
    return occs, [judge_occurrence(o, occs[0], metrics, 0.05) for o in occs]


def test_history_page_renders() -> None:
    occs, judgements = history()
    page = history_page(
        "nightly <llama>", occs, judgements, 0, ["output_throughput", "median_ttft_ms"]
    )
    parser = _Parser()
    parser.feed(page)
    assert parser.figures == 2
    assert parser.classes.count("datum") == 32
    assert parser.classes.count("change-point") == 1  # the step, in throughput only
    assert "baseline" in parser.classes and "annotation" in parser.classes
    assert "nightly &lt;llama&gt;" in page and "sglang 0.5.2 → 0.5.3" in page
    assert judgements[12]["verdict"] == "regression"
