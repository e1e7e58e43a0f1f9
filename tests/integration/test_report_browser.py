"""The report of a 2x2 matrix with an interaction, a failed launch and a provenance warning,
opened in a real headless Chromium with the network cut: no console error, every chart drawn."""

from __future__ import annotations

import copy
import re
from pathlib import Path

from tests.support.browser import load_page, screenshot
from tests.unit.controller.test_compare_provenance import PROVENANCE
from tunelab.analysis.compare import compare
from tunelab.analysis.report import write_report
from tunelab.controller.states import AttemptState, ExperimentState
from tunelab.controller.store import AttemptRow, ExperimentRow

ITL = "server.flags.--itl-ms"
CHUNK = "server.flags.--tokens-per-chunk"


def matrix_pairs() -> list[tuple[ExperimentRow, list[AttemptRow]]]:
    # throughput per cell: chunking helps only with the fast decode step (an interaction)
    cells = {("10", "1"): 100.0, ("5", "1"): 190.0, ("10", "4"): 102.0, ("5", "4"): 380.0}
    pairs, seq = [], 0
    for (itl, chunk), tput in cells.items():
        for launch in range(1, 5 if seq == 0 else 4):  # the first cell has a 4th launch...
            seq += 1
            name = f"mx/--itl-ms={itl},--tokens-per-chunk={chunk}#{launch}"
            spec = {"benchmark": {"input_len": 128, "output_len": 16},
                    "roofline": {"weight_bytes": 13.5e9, "kv_bytes_per_token": 524288}}  # fmt: skip
            e = ExperimentRow(id=f"x-{seq}", group="g-m", name=name, seq=seq, spec=spec,
                              varied={ITL: itl, CHUNK: chunk},
                              state=ExperimentState.SUCCEEDED)  # fmt: skip
            points = [
                {"concurrency": c, "output_throughput": tput * c * (1 + 0.003 * launch),
                 "median_tpot_ms": 1000.0 / tput, "median_ttft_ms": 40.0 + launch}
                for c in (1, 8, 64)
            ]  # fmt: skip
            provenance = copy.deepcopy(PROVENANCE)
            if seq == 12:
                provenance["system"]["driver_version"] = "575.57.08"
            state = AttemptState.SUCCEEDED
            if launch == 4:  # ...that failed: listed with its reason, left out of the effects
                e.state, state, points = ExperimentState.FAILED, AttemptState.FAILED_STARTUP, []
            attempt = AttemptRow(
                id=f"a-{seq}", experiment_id=e.id, number=1, host="gpu-1", state=state,
                message="server FAILED: CUDA out of memory" if not points else "ok",
                result={"points": points} if points else None, provenance=provenance,
                gpu_summary={"mean_power_watts_total": 250.0 + seq, "tokens_per_joule": 0.5,
                             "gpus": {"0": {"power_limit_watts": 600.0,
                                            "sm_clock_hertz": {"mean": 1.7e9, "max": 1.98e9}}}},
            )  # fmt: skip
            pairs.append((e, [attempt]))
    return pairs


def test_matrix_report_loads_offline_without_errors_and_draws_every_chart(tmp_path: Path) -> None:
    doc = compare(matrix_pairs())
    assert doc["design"] == "matrix"
    [largest] = [i for i in doc["largest_interactions"] if i["metric"] == "output_throughput"]
    assert largest["verdict"] == "interaction" and largest["ratio"] > 1.5
    page = tmp_path / "report.html"
    write_report(doc, page, "g-m")

    dom, log = load_page(page, tmp_path / "profile")
    body = re.search(r"<body ([^>]*)>", dom)
    assert body is not None, dom[:300]
    attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', body.group(1)))
    assert attrs["data-errors"] == "[]", attrs
    assert int(attrs["data-charts"]) >= 8, attrs  # curves, pareto, 2 effects, 4 GPU bars
    assert attrs["data-charts-rendered"] == attrs["data-charts"], attrs
    assert 'data-rendered="no"' not in dom
    assert "CONSOLE" not in log and "Uncaught" not in log, log[-2000:]
    for text in ("Largest interaction per metric", "CUDA out of memory", "runs differ in driver",
                 "Pareto front", "580.159.04"):  # fmt: skip
        assert text in dom, text
    shot = tmp_path / "report.png"
    screenshot(page, shot, tmp_path / "profile")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_broken_page_is_caught(tmp_path: Path) -> None:
    """The sink works: a script error on the page shows up in data-errors."""
    doc = compare(matrix_pairs())
    page = tmp_path / "report.html"
    write_report(doc, page, "g-m")
    page.write_text(page.read_text().replace("</body>", "<script>undefinedCall();</script></body>"))
    dom, _ = load_page(page, tmp_path / "profile")
    assert "undefinedCall is not defined" in dom


def ablation_pairs() -> list[tuple[ExperimentRow, list[AttemptRow]]]:
    """Issue 24's report: a baseline with an identical no-op change on top of it, a real +60 %
    and a real -50 % change, and in the +60 % change's chart a first-token time whose launches
    scatter (an interval hundreds of percent wide)."""
    steady = [40.0, 40.4, 39.6]
    variants = {
        "baseline": ({}, [100.0, 101.0, 99.0], steady),
        "--tag=noop": ({"server.flags.--tag": "noop"}, [100.0, 101.0, 99.0], steady),
        # +60 % throughput, and a first-token time whose launches scatter (the wide interval)
        "--itl-ms=2": ({"server.flags.--itl-ms": "2"}, [160.0, 161.0, 159.0], [12.0, 60.0, 400.0]),
        "--itl-ms=20": ({"server.flags.--itl-ms": "20"}, [50.0, 50.5, 49.5], steady),
    }
    pairs, seq = [], 0
    for variant, (varied, launches, ttfts) in variants.items():
        for launch, (tput, ttft) in enumerate(zip(launches, ttfts, strict=True), 1):
            seq += 1
            e = ExperimentRow(id=f"x-{seq}", group="g-a", name=f"ab/{variant}#{launch}", seq=seq,
                              spec={}, varied=varied, state=ExperimentState.SUCCEEDED)  # fmt: skip
            points = [
                {"concurrency": c, "output_throughput": tput * c,
                 "median_tpot_ms": 1000.0 / tput, "median_ttft_ms": ttft}
                for c in (1, 8)
            ]  # fmt: skip
            attempt = AttemptRow(id=f"a-{seq}", experiment_id=e.id, number=1, host="gpu-1",
                                 state=AttemptState.SUCCEEDED, message="ok",
                                 result={"points": points})  # fmt: skip
            pairs.append((e, [attempt]))
    return pairs


def test_the_report_leads_with_the_answer_clips_a_wide_interval_and_parts_overlapping_lines(
    tmp_path: Path,
) -> None:
    doc = compare(ablation_pairs())
    assert doc["design"] == "ablation"
    wide = [e for e in doc["effects"] if e["change"] == "--itl-ms=2" and e["ci95"]]
    assert max(e["ci95"][1] for e in wide) > 5, wide  # the +500 % kind of interval
    page = tmp_path / "report.html"
    write_report(doc, page, "g-a")
    dom, log = load_page(page, tmp_path / "profile")
    assert 'data-errors="[]"' in dom and "Uncaught" not in log, log[-2000:]
    text = re.sub(r"<[^>]+>", "", dom)
    # the summary comes first, before any chart, and names the answer per metric
    assert dom.index("Summary") < dom.index('data-chart="throughput"')
    lines = dict(re.findall(r"data-metric=\"(\w+)\">(.*?)</p>", dom))
    tput = re.sub(r"<[^>]+>", "", lines["output_throughput"])
    assert tput.startswith("tok/s: helped most: --itl-ms=2: +60.0% at c="), tput
    # the interval at the family's confidence (18 rows tested, the 2 too noisy to judge among
    # them; 8 discoveries: 1 - 8 x 5 % / 18) and the launches it rests on
    assert "(97.78% interval +" in tput and "3+3 launches; better)" in tput
    assert "worst: --itl-ms=20: -50.0% at c=" in tput and "; worse)" in tput
    tpot = re.sub(r"<[^>]+>", "", lines["median_tpot_ms"])
    assert tpot.startswith("TPOT p50: helped most: --itl-ms=2: -37.5%"), tpot
    # the axis is set by the real effects: the wide interval is an arrow with its number
    assert 'class="clipped"' in dom
    clipped = re.findall(r'class="clipped-value"[^>]*>[^<]*?\.\.([+-]\d+)%<', dom)
    assert clipped and max(int(v) for v in clipped) > 500, clipped
    chart = dom.split('data-chart="effect --itl-ms=2"', 1)[1].split("</figure>", 1)[0]
    ticks = [int(t) for t in re.findall(r'text-anchor="middle">([+-]?\d+)%</text>', chart)]
    assert ticks and max(ticks) <= 100, ticks  # not +-500 %: +60 % and -37.5 % stand apart
    # the baseline is dashed and labelled; the identical no-op line is drawn apart and said
    assert "baseline" in text and "The baseline is dashed." in text
    assert "--tag=noop lies on baseline (within 1% at every point): drawn 3 px lower." in text
    shot = tmp_path / "report.png"
    screenshot(page, shot, tmp_path / "profile", height=1400)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
