"""The report of a 2x2 matrix with an interaction, a failed launch and a provenance warning,
opened in a real headless Chromium with the network cut: no console error, every chart drawn."""

from __future__ import annotations

import copy
import re
from pathlib import Path

from tests.support.browser import load_page, screenshot
from tests.unit.controller.test_compare_provenance import PROVENANCE
from tunelab.controller.compare import compare
from tunelab.controller.report import write_report
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
