"""Effects over repeated launches: intervals, verdicts, matrix main effects and interactions."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tunelab.analysis.effects import (
    NO_DIFFERENCE,
    NOT_ENOUGH,
    EffectSettings,
    effects_document,
)
from tunelab.analysis.intervals import Cell, log_contrast, t_quantile


@pytest.mark.parametrize(
    ("df", "expected"), [(1, 12.7062), (4, 2.7764), (10, 2.2281), (30, 2.0423), (math.inf, 1.96)]
)
def test_t_quantile_matches_the_table(df: float, expected: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=1e-3)
    assert t_quantile(0.025, df) == pytest.approx(-expected, abs=1e-3)


def test_welch_interval_of_a_ratio_against_a_hand_computation() -> None:
    base, variant = Cell((98.0, 100.0, 102.0)), Cell((196.0, 200.0, 204.0))
    estimate = log_contrast([(-1.0, base), (1.0, variant)])
    assert estimate is not None
    assert estimate.ratio == pytest.approx(2.0)
    # both cells: s/m = 0.02, n = 3 -> var(log) = 2 * 0.02^2 / 3; equal parts -> df = 4
    se = math.sqrt(2 * 0.02**2 / 3)
    assert estimate.se == pytest.approx(se)
    assert estimate.df == pytest.approx(4.0)
    lo, hi = estimate.relative_interval()
    assert lo == pytest.approx(2.0 * math.exp(-2.7764 * se) - 1, abs=1e-4)
    assert hi == pytest.approx(2.0 * math.exp(2.7764 * se) - 1, abs=1e-4)


def launches(
    label: str, varied: dict[str, str], tput: list[float], **extra: Any
) -> list[dict[str, Any]]:
    return [
        {
            "name": f"sim/{label}#{i + 1}",
            "state": "SUCCEEDED",
            "varied": varied,
            "points": [{"key": "c1", "output_throughput": v, "median_tpot_ms": 1000.0 / v}],
            "tokens_per_joule": extra.get("tpj"),
        }
        for i, v in enumerate(tput)
    ]


def by(effects: list[dict[str, Any]], change: str, metric: str) -> dict[str, Any]:
    [found] = [e for e in effects if e["change"] == change and e["metric"] == metric]
    return found


def test_ablation_verdicts() -> None:
    rows = (
        launches("baseline", {}, [99.0, 100.0, 101.0, 100.5, 99.5])
        + launches("--itl-ms=5", {"server.flags.--itl-ms": "5"}, [198, 200, 202, 199, 201])
        + launches("--tag=x", {"server.flags.--tag": "x"}, [99.8, 100.2, 100.1, 99.9, 100.0])
        + launches("--two=1", {"server.flags.--two": "1"}, [150.0, 151.0])
        + launches("--noisy=1", {"server.flags.--noisy": "1"}, [60.0, 100.0, 140.0, 90.0])
        + launches("--tiny=1", {"server.flags.--tiny": "1"}, [100.9, 101.0, 101.1, 101.0, 101.0])
    )
    doc = effects_document(rows)
    assert doc["design"] == "ablation"
    fast = by(doc["effects"], "--itl-ms=5", "output_throughput")
    assert set(fast) == {
        "change",
        "point",
        "metric",
        "baseline_mean",
        "mean",
        "ratio",
        "ci95",
        "n_baseline",
        "n_variant",
        "verdict",
        # the family's correction (issue 35): keys only ever added
        "launches",
        "p_value",
        "p_adjusted",
        "interval_adjusted",
        "interval_confidence",
        "family",
        "more_launches",
    }
    assert fast["verdict"] == "better" and fast["ci95"][0] > 0
    assert fast["ratio"] == pytest.approx(2.0, rel=1e-3)
    assert (fast["n_baseline"], fast["n_variant"], fast["point"]) == (5, 5, "c1")
    assert by(doc["effects"], "--itl-ms=5", "median_tpot_ms")["verdict"] == "better"  # lower
    assert by(doc["effects"], "--tag=x", "output_throughput")["verdict"] == NO_DIFFERENCE
    assert by(doc["effects"], "--two=1", "output_throughput")["verdict"] == NOT_ENOUGH
    assert by(doc["effects"], "--noisy=1", "output_throughput")["verdict"] == NOT_ENOUGH
    # a consistent +1 %: alone, its 95 % interval lies inside the +-2 % worth reporting; judged
    # with the family (8 rows tested, the noisy change's two among them; 2 discoveries:
    # intervals at 1 - 2 x 5 % / 8) it reaches past +2 %, so the row is undecided and says how
    # many more launches would decide it
    tiny = by(doc["effects"], "--tiny=1", "output_throughput")
    assert 0 < tiny["ci95"][0] < tiny["ci95"][1] < 0.02
    assert tiny["interval_confidence"] == pytest.approx(1 - 2 * 0.05 / 8)
    assert tiny["interval_adjusted"][1] > 0.02 and tiny["verdict"] == NOT_ENOUGH
    assert tiny["more_launches"] is not None and tiny["more_launches"] > 0
    assert by(doc["effects"], "--two=1", "output_throughput")["more_launches"] == 1  # 3 - 2
    noisy = by(doc["effects"], "--noisy=1", "output_throughput")
    assert noisy["more_launches"] is None
    # tested (it counts in the family: dropping it would keep only the lucky, quiet rows) but
    # not judged: no adjusted interval, whatever its p
    assert noisy["p_adjusted"] is not None and noisy["interval_adjusted"] is None
    # ...and a win once the user says 0.5 % matters and adds 5 launches of each (names #6-#10)
    more = (
        rows
        + launches("baseline", {}, [100.0, 99.6, 100.4, 100.2, 99.8] * 2)[5:]
        + launches("--tiny=1", {"server.flags.--tiny": "1"}, [101.0, 100.9, 101.1] * 4)[5:10]
    )
    strict = effects_document(more, EffectSettings(min_effect=0.005))
    tiny = by(strict["effects"], "--tiny=1", "output_throughput")
    assert tiny["launches"] == [10, 10] and tiny["verdict"] == "better", tiny


def test_worse_and_a_wide_interval_across_zero_needs_more_repeats() -> None:
    rows = (
        launches("baseline", {}, [100.0, 101.0, 99.0])
        + launches("--slow=1", {"server.flags.--slow": "1"}, [80.0, 81.0, 79.0])
        + launches("--wide=1", {"server.flags.--wide": "1"}, [92.0, 100.0, 109.0])
    )
    effects = effects_document(rows)["effects"]
    assert by(effects, "--slow=1", "output_throughput")["verdict"] == "worse"
    assert by(effects, "--slow=1", "median_tpot_ms")["verdict"] == "worse"
    wide = by(effects, "--wide=1", "output_throughput")
    assert wide["ci95"][0] < 0 < wide["ci95"][1] and wide["verdict"] == NOT_ENOUGH


def test_failed_launches_are_left_out_of_the_cells() -> None:
    rows = launches("baseline", {}, [100.0, 100.5, 99.5]) + launches(
        "--x=1", {"server.flags.--x": "1"}, [100.0, 100.5, 99.5, 5.0]
    )
    rows[-1]["state"] = "FAILED"
    effect = by(effects_document(rows)["effects"], "--x=1", "output_throughput")
    assert effect["n_variant"] == 3 and effect["verdict"] == NO_DIFFERENCE


def matrix_rows(a1b1: float) -> list[dict[str, Any]]:
    cells = {("4", "1"): 100.0, ("2", "1"): 200.0, ("4", "2"): 110.0, ("2", "2"): a1b1}
    rows = []
    for (itl, chunk), mean in cells.items():
        varied = {"server.flags.--itl-ms": itl, "server.flags.--tokens-per-chunk": chunk}
        label = f"--itl-ms={itl},--tokens-per-chunk={chunk}"
        rows += launches(label, varied, [mean * f for f in (0.997, 1.0, 1.003)])
    return rows


def test_matrix_main_effects_and_the_largest_interaction() -> None:
    doc = effects_document(matrix_rows(a1b1=440.0))  # 2x from itl alone, 4x with chunking
    assert doc["design"] == "matrix"
    main = by(doc["effects"], "--itl-ms=2", "output_throughput")
    # averaged over chunk sizes: geometric mean of 200/100 and 440/110
    assert main["ratio"] == pytest.approx(math.sqrt(2.0 * 4.0), rel=1e-6)
    assert main["verdict"] == "better" and main["n_baseline"] == 6
    chunk = by(doc["effects"], "--tokens-per-chunk=2", "output_throughput")
    assert chunk["ratio"] == pytest.approx(math.sqrt(1.1 * 2.2), rel=1e-6)
    [largest] = [i for i in doc["largest_interactions"] if i["metric"] == "output_throughput"]
    assert largest["change"] == "--itl-ms=2 x --tokens-per-chunk=2"
    assert largest["ratio"] == pytest.approx((440 / 110) / (200 / 100), rel=1e-6)
    assert largest["verdict"] == "interaction" and largest["ci95"][0] > 0


def test_matrix_without_interaction() -> None:
    doc = effects_document(matrix_rows(a1b1=220.0))  # the two effects simply multiply
    [largest] = [i for i in doc["largest_interactions"] if i["metric"] == "output_throughput"]
    assert largest["ratio"] == pytest.approx(1.0)
    assert largest["verdict"] == "no meaningful interaction"


def test_nothing_to_compare_without_a_baseline_or_factors() -> None:
    assert effects_document(launches("only", {}, [1.0, 2.0, 3.0]))["design"] == "none"


def test_garbage_in_a_result_is_not_counted() -> None:
    rows = launches("baseline", {}, [100.0, 100.5, 99.5]) + launches(
        "--x=1", {"server.flags.--x": "1"}, [100.0, 100.5, 99.5]
    )
    rows[0]["points"][0]["output_throughput"] = float("nan")
    rows[1]["points"][0]["output_throughput"] = "fast"
    rows[2]["points"][0]["median_tpot_ms"] = True
    doc = effects_document(rows)
    tput = by(doc["effects"], "--x=1", "output_throughput")
    assert tput["n_baseline"] == 1 and tput["verdict"] == NOT_ENOUGH
    assert by(doc["effects"], "--x=1", "median_tpot_ms")["n_baseline"] == 2


def test_an_interaction_with_a_combination_missing_is_not_shrunk() -> None:
    """Three factors, a true interaction of 1.5 between a and b whatever c is; one of the eight
    combinations never ran. The interaction is averaged over the complete combinations of c:
    before, it was divided by all of them and read 1.224 (1.5 ** (1/2)) instead of 1.5."""
    rows: list[dict[str, Any]] = []
    for a in ("0", "1"):
        for b in ("0", "1"):
            for c in ("0", "1"):
                if (a, b, c) == ("1", "1", "1"):
                    continue  # the missing combination
                value = 100.0 * (2.0 if a == "1" else 1.0) * (3.0 if b == "1" else 1.0)
                value *= 1.5 if a == b == "1" else 1.0
                varied = {"server.flags.--a": a, "server.flags.--b": b, "server.flags.--c": c}
                rows += launches(f"a{a}b{b}c{c}", varied, [value * f for f in (0.99, 1.0, 1.01)])
    doc = effects_document(rows)
    assert doc["design"] == "matrix"
    found = by(doc["interactions"], "--a=1 x --b=1", "output_throughput")
    assert found["ratio"] == pytest.approx(1.5, rel=1e-3)
