"""A comparison's rows are one family (issue 35): Benjamini-Hochberg or Holm across every change,
metric and point, a primary metric judged first, and the summary led only by what survives."""

from __future__ import annotations

import math
import random
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from scipy import stats

from tunelab.analysis.compare import compare
from tunelab.analysis.effects import (
    BETTER,
    NOT_ENOUGH,
    EffectSettings,
    Row,
    effects_document,
    judge_family,
    judge_rows,
    next_launches,
)
from tunelab.analysis.intervals import Cell, Estimate, Method
from tunelab.analysis.metrics import CATALOGUE
from tunelab.analysis.report import render_report
from tunelab.cli.compare_view import render_compare_table
from tunelab.controller.spec import SpecError, expand_text
from tunelab.controller.states import AttemptState, ExperimentState
from tunelab.controller.store import AttemptRow, ExperimentRow

STEADY = (Cell((100.0, 100.5, 99.5)),)  # 3 launches, CV 0.5 %: every row is testable
P = [0.01, 0.04, 0.03, 0.005]


def row(p: float, metric: str = "output_throughput", effect: float = 0.10) -> Row:
    """A row whose two-sided p is exactly ``p``: a +10 % log ratio, a normal (df = inf) test."""
    z = float(stats.norm.isf(p / 2))
    out: dict[str, Any] = {"change": f"--p={p}", "metric": metric, "point": "c1"}
    return Row(
        out,
        Estimate(math.log1p(effect), math.log1p(effect) / z, math.inf),
        STEADY,
        CATALOGUE["output_throughput"],
    )


def test_benjamini_hochberg_across_the_family_matches_the_hand_computation() -> None:
    rows = [row(p) for p in P]
    family = judge_family(rows, EffectSettings(), "all")
    # sorted 0.005, 0.01, 0.03, 0.04 -> p * 4 / rank 0.02, 0.02, 0.04, 0.04 (running min)
    assert [r.out["p_adjusted"] for r in rows] == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert family["family_size"] == 4 and family["discoveries"] == 4
    # Benjamini-Yekutieli intervals: 1 - R alpha / m = 1 - 4 x 0.05 / 4
    assert family["confidence"] == pytest.approx(0.95)
    assert [r.out["verdict"] for r in rows] == [BETTER] * 4
    lo, hi = rows[1].out["interval_adjusted"]  # p = 0.04 at 95 %: just off 0
    assert lo == pytest.approx(math.expm1(math.log1p(0.1) * (1 - 1.96 / 2.0537)), abs=1e-3)
    assert lo > 0 and hi > 0.1


def test_holm_across_the_family_matches_the_hand_computation() -> None:
    rows = [row(p) for p in P]
    family = judge_family(rows, EffectSettings(correction=Method.HOLM), "all")
    # sorted 0.005 x 4, 0.01 x 3, 0.03 x 2, 0.04 x 1 = 0.02, 0.03, 0.06, 0.04 -> running max
    assert [r.out["p_adjusted"] for r in rows] == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert family["discoveries"] == 2
    assert family["confidence"] == pytest.approx(1 - 0.05 / 4)  # Bonferroni's intervals
    assert [r.out["verdict"] for r in rows] == [BETTER, NOT_ENOUGH, NOT_ENOUGH, BETTER]
    # undecided: each says how many more launches of each variant would decide it
    assert all(r.out["more_launches"] >= 1 for r in rows if r.out["verdict"] == NOT_ENOUGH)


def test_the_primary_metric_is_judged_first_and_passes_on_its_share_of_alpha() -> None:
    primary = [row(0.01), row(0.5)]
    secondary = [row(0.02, "median_ttft_ms"), row(0.001, "median_ttft_ms")]
    settings = EffectSettings(primary="output_throughput")
    correction = judge_rows(primary + secondary, settings)
    first, rest = correction["families"]
    # primary: BH of (0.01, 0.5) = (0.02, 0.5): 1 discovery of 2 -> the rest at 0.05 x 1/2
    assert [r.out["p_adjusted"] for r in primary] == pytest.approx([0.02, 0.5])
    assert (first["name"], first["discoveries"], first["alpha"]) == ("primary", 1, 0.05)
    assert rest["alpha"] == pytest.approx(0.025)
    # secondary: BH of (0.02, 0.001) = (0.02, 0.002), both <= 0.025; on the full alpha's scale
    # (a discovery is p_adjusted <= 0.05) that is x 0.05 / 0.025
    assert [r.out["p_adjusted"] for r in secondary] == pytest.approx([0.04, 0.004])
    assert rest["discoveries"] == 2 and correction["discoveries"] == 3
    assert correction["primary"] == "output_throughput" and correction["family_size"] == 4
    assert [r.out["family"] for r in primary + secondary] == ["primary"] * 2 + ["secondary"] * 2


def test_nothing_found_on_the_primary_metric_nothing_else_is_called() -> None:
    primary = [row(0.3), row(0.5)]
    secondary = [row(1e-9, "median_ttft_ms")]  # would be a discovery on its own
    correction = judge_rows(primary + secondary, EffectSettings(primary="output_throughput"))
    assert correction["families"][1]["alpha"] == 0.0
    assert secondary[0].out["p_adjusted"] == 1.0 and secondary[0].out["verdict"] == NOT_ENOUGH


def launches(label: str, varied: dict[str, str], values: list[list[float]]) -> list[dict[str, Any]]:
    """One row per launch; ``values`` per launch: output tok/s at c=1 and c=4."""
    return [
        {
            "id": f"x-{label}-{i}",
            "name": f"sim/{label}#{i + 1}",
            "group": "g-1",
            "state": "SUCCEEDED",
            "host": "h",
            "mean_power_watts": None,
            "tokens_per_joule": None,
            "varied": varied,
            "points": [
                {
                    "key": f"c{c}",
                    "output_throughput": v * c,
                    "median_ttft_ms": 4000.0 / v,
                    "median_tpot_ms": 1000.0 / v,
                    "p99_tpot_ms": 1100.0 / v,
                }
                for c, v in zip((1, 4), tput, strict=True)
            ],
        }
        for i, tput in enumerate(values)
    ]


def aa_report(rng: random.Random, cv: float, effect: float = 1.0) -> list[dict[str, Any]]:
    """The demo's ablation with no true effect (3 launches of each variant, 2 points): each
    launch's level drawn with ``cv``; a third change multiplies throughput by ``effect``."""

    def draw(scale: float = 1.0) -> list[list[float]]:
        return [[100.0 * scale * rng.gauss(1.0, cv) for _ in (1, 4)] for _ in range(3)]

    rows = launches("baseline", {}, draw())
    rows += launches("--tag=no-op", {"server.flags.--tag": "no-op"}, draw())
    rows += launches("--other=1", {"server.flags.--other": "1"}, draw())
    if effect != 1.0:
        rows += launches("--fast=1", {"server.flags.--fast": "1"}, draw(effect))
    return rows


def calls(doc: dict[str, Any], change: str | None = None) -> int:
    return sum(
        e["verdict"] in ("better", "worse")
        for e in doc["effects"]
        if change is None or e["change"] == change
    )


def test_an_aa_report_calls_nothing_where_each_row_alone_did() -> None:
    rng = random.Random(35)
    alone = corrected = 0
    for _ in range(200):
        rows = aa_report(rng, cv=0.05)
        alone += calls(effects_document(rows, EffectSettings(correction=Method.NONE))) > 0
        corrected += calls(effects_document(rows)) > 0
    # 2 null changes x 8 rows judged alone at 95 % (the rows of one launch move together): one
    # report in eight calls something
    assert alone >= 20, alone
    assert corrected <= 10, corrected  # <= 5 % of the reports (benchmarks/false_discoveries.py)


def test_a_real_2x_effect_survives_with_either_correction() -> None:
    rng = random.Random(7)
    rows = aa_report(rng, cv=0.05, effect=2.0)
    for method in (Method.BH, Method.HOLM):
        doc = effects_document(rows, EffectSettings(correction=method))
        fast = [e for e in doc["effects"] if e["change"] == "--fast=1"]
        assert all(e["verdict"] == BETTER for e in fast if e["metric"] == "output_throughput")
        assert calls(doc, "--fast=1") == len(fast) == 8  # 4 metrics x 2 points, every one
        assert doc["correction"]["method"] == method.value
        assert all(e["launches"] == [3, 3] for e in fast)
    # Holm bounds the chance of any false call; this draw's unlucky no-op (its 4 metrics move
    # together, p ~ 0.01 each) is one of the false discoveries BH's rate allows beside 8 real
    holm = effects_document(rows, EffectSettings(correction=Method.HOLM))
    assert calls(holm, "--tag=no-op") == 0 and calls(holm, "--other=1") == 0


def borderline_doc(method: Method) -> dict[str, Any]:
    """A real +60 % change, and a no-op whose first-token time came out 2.4 % lower in 3
    launches: p ~ 0.04 alone (95 % interval -4.6 %..-0.1 %, 'better'), but not a discovery among
    the family's rows."""
    steady = [[100.0, 100.0], [101.0, 101.0], [99.0, 99.0]]
    rows = launches("baseline", {}, steady)
    rows += launches(
        "--itl-ms=2", {"server.flags.--itl-ms": "2"}, [[160, 160], [161, 161], [159, 159]]
    )
    rows += launches("--tag=no-op", {"server.flags.--tag": "no-op"}, steady)
    for launch, ttft in zip(rows[6:], (39.05, 39.45, 38.65), strict=True):
        for point in launch["points"]:
            point["median_ttft_ms"] = ttft
    for launch, ttft in zip(rows[:6], (40.0, 40.4, 39.6) * 2, strict=True):
        for point in launch["points"]:
            point["median_ttft_ms"] = ttft  # the ITL leaves the first token alone
    doc: dict[str, Any] = {"experiments": rows, "varied_fields": [], "warnings": []}
    doc.update(effects_document(rows, EffectSettings(correction=method)))
    return doc


def summary(html: str) -> str:
    block = html.split("<h2>Summary</h2>", 1)[1].split("<h2>", 1)[0]
    return re.sub(r"<[^>]+>", "", block.replace("</p>", "\n"))


def test_the_summary_leads_only_with_what_survives() -> None:
    alone = summary(render_report(borderline_doc(Method.NONE), "g-1"))
    assert "TTFT p50: helped most: --tag=no-op" in alone  # the bug of issue 35
    text = summary(render_report(borderline_doc(Method.BH), "g-1"))
    assert "--tag=no-op" not in text, text
    assert "tok/s: helped most: --itl-ms=2: +60.0%" in text
    assert "3+3 launches; better)" in text
    assert "No change survives the correction on TTFT p50" in text
    assert "Benjamini-Hochberg (false discovery rate)" in text


def test_undecided_rows_say_what_more_launches_would_decide_and_how() -> None:
    doc = borderline_doc(Method.BH)
    more = next_launches(doc)
    assert more is not None and more.more >= 1 and more.decides >= 1
    needs = sorted(e["more_launches"] for e in doc["effects"] if e["more_launches"])
    assert more.more == needs[0] and more.decides == needs.count(needs[0])
    submit, compare = more.commands
    assert f"echo 'repeat: {more.more}') | tunelab submit - --wait" in submit
    assert compare == "tunelab compare sim g-1"  # the spec's latest submission with this one
    html = render_report(doc, "g-1")
    assert f"{more.more} more launches of each variant would decide" in summary(html)


DEMO = Path(__file__).resolve().parents[3] / "examples" / "demo-ablation.yaml"


def pairs_of(text: str, group: str, seq: int) -> list[tuple[ExperimentRow, list[AttemptRow]]]:
    """The experiments a spec expands to, as the controller stores them, each with a result."""
    out = []
    for i, e in enumerate(expand_text(text, "demo-ablation.yaml")):
        row = ExperimentRow(
            id=f"x-{group}-{i}",
            group=group,
            name=e.name,
            seq=seq + i,
            spec=e.spec,
            varied=e.varied,
            state=ExperimentState.SUCCEEDED,
        )
        tput = 100.0 * (1 + 0.01 * (i % 3))
        points = [{"concurrency": c, "output_throughput": tput * c} for c in (1, 4)]
        attempt = AttemptRow(id=f"a-{group}-{i}", experiment_id=row.id, number=1, host="h",
                             state=AttemptState.SUCCEEDED, message="ok",
                             result={"points": points})  # fmt: skip
        out.append((row, [attempt]))
    return out


def test_a_specs_compare_key_chooses_the_correction_and_the_primary_metric() -> None:
    text = DEMO.read_text() + "compare: {correction: holm, primary: output_throughput}\n"
    doc = compare(pairs_of(text, "g-1", 0))
    assert doc["settings"]["correction"] == "holm"
    assert doc["correction"]["method"] == "holm"
    assert doc["correction"]["primary"] == "output_throughput"
    assert [f["name"] for f in doc["correction"]["families"]] == ["primary", "secondary"]
    assert compare(pairs_of(DEMO.read_text(), "g-1", 0))["correction"]["method"] == (
        "benjamini-hochberg"
    )
    for bad, message in (
        ("compare: {correction: fdr}", "compare.correction: expected one of bh, holm"),
        ("compare: {primary: speed}", "compare.primary: expected one of output_throughput"),
        ("compare: {primry: output_throughput}", "compare.primry: unknown key"),
    ):
        with pytest.raises(SpecError, match=re.escape(message)):
            expand_text(DEMO.read_text() + bad + "\n")


def test_the_printed_resubmission_adds_launches_that_compare_counts_with_the_old() -> None:
    """The hint's pipeline, run on the demo's spec: the same names with the new repeat, so
    comparing the spec's latest submission with the old group pools the launches."""
    old = pairs_of(DEMO.read_text(), "g-old", 0)
    hint = next_launches({**compare(old), "effects": [{"verdict": NOT_ENOUGH, "more_launches": 2}]})
    assert hint is not None
    submit, again = hint.commands
    assert again == "tunelab compare sim-ablation g-old"
    pipeline = submit.split(" | ")[0].replace("SPEC.yaml", str(DEMO))
    resubmitted = subprocess.run(
        ["bash", "-c", pipeline], capture_output=True, text=True, check=True
    )
    new = pairs_of(resubmitted.stdout, "g-new", 100)
    assert {r.name for r, _ in new} == {
        f"{v}#{i}" for v in {r.name[:-2] for r, _ in old} for i in (1, 2)
    }
    pooled = compare(old + new)
    assert {tuple(e["launches"]) for e in pooled["effects"]} == {(5, 5)}  # 3 old + 2 new each


def test_compare_text_leads_with_survivors_and_says_the_launches() -> None:
    text = render_compare_table({**borderline_doc(Method.BH), "repeats": []})
    answer = text.split("answer (only what survives the correction):\n", 1)[1].split("\n\n")[0]
    lines = answer.splitlines()
    assert lines[0].startswith("  --itl-ms=2: better on "), answer
    assert "3+3 launches" in lines[0] and "worse" not in lines[0]
    assert lines[-1] == "  --tag=no-op: nothing survives the correction"
    assert "not enough repeats (+" in text  # the no-op's first-token row, undecided
    assert "more launches of each variant would decide" in text
    alone = render_compare_table({**borderline_doc(Method.NONE), "repeats": []})
    assert "--tag=no-op: better on 2 of" in alone  # what each row alone said


def test_the_fewest_launches_that_decide_a_row_and_those_that_decide_half() -> None:
    needs = [9, 2, None, 5, None]  # five undecided rows, two of which launches will not settle
    doc = {
        "experiments": [{"name": "abl/baseline#1", "group": "g-2"}],
        "effects": [{"verdict": NOT_ENOUGH, "more_launches": k} for k in needs]
        + [{"verdict": BETTER, "more_launches": None}],
    }
    more = next_launches(doc)
    assert more is not None
    assert (more.more, more.decides, more.undecided, more.half) == (2, 1, 5, 9)
    assert more.sentence() == (
        "2 more launches of each variant would decide 1 of the 5 undecided rows at this "
        "spread (9 more: half of them or more)"
    )
    assert more.commands[1] == "tunelab compare abl g-2"
