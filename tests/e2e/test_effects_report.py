"""E2E: an ablation with repeat 5 over the simulator, compared and reported.

One change has a real effect (ITL 10 -> 5 ms) and one has none (--tag, which the simulator
ignores): the first must come out "better" with an interval that excludes 0, the second "no
meaningful difference" on the decode step it would change. Throughput at c=1 also counts the
client's own time between requests, which on a loaded 2-core CI machine varies by a few % from
launch to launch: there the honest answer for the null change may be "not enough repeats", but
never better or worse. The report of the same runs is then opened in a real headless Chromium.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Lab, sim_experiment
from tests.support.browser import load_page

POINT = "c1"


def effect(doc: dict[str, Any], change: str, metric: str) -> dict[str, Any]:
    found: dict[str, Any]
    [found] = [
        e
        for e in doc["effects"]
        if e["change"] == change and e["metric"] == metric and e["point"] == POINT
    ]
    return found


def test_ablation_repeat_5_real_effect_and_null_effect_then_the_report(
    lab: Lab, tmp_path: Path
) -> None:
    controller = lab.start_controller()
    lab.add_agent("gpu-a")
    lab.add_agent("gpu-b")
    spec = sim_experiment(
        "abl",
        itl_ms=10,
        repeat=5,
        ablation=[{"server.flags.--itl-ms": 5}, {"server.flags.--tag": "noop"}],
        benchmark={"concurrency": [1], "requests": 6, "input_len": 16, "output_len": 32},
    )
    done = lab.submit(spec, wait=True)
    assert [e["state"] for e in done] == ["SUCCEEDED"] * 15
    group = done[0]["group"]

    doc = controller.cli_json("compare", group)
    assert doc["design"] == "ablation" and doc["warnings"] == []
    figures = {
        (change, metric): effect(doc, change, metric)
        for change in ("--itl-ms=5", "--tag=noop")
        for metric in ("output_throughput", "median_tpot_ms")
    }
    print(json.dumps({f"{c} {m}": e for (c, m), e in figures.items()}, indent=1))
    for metric in ("output_throughput", "median_tpot_ms"):
        real = figures[("--itl-ms=5", metric)]
        assert real["verdict"] == "better", real
        assert (real["n_baseline"], real["n_variant"]) == (5, 5)
        lo, hi = real["ci95"]
        assert (lo > 0) if metric == "output_throughput" else (hi < 0), real  # excludes 0
    tpot = figures[("--tag=noop", "median_tpot_ms")]
    assert tpot["verdict"] == "no meaningful difference", tpot
    # inside ±2 %: a tiny but consistent difference (launch order, drift) is no effect worth
    # reporting, even when its interval excludes 0 on a very stable server
    assert -0.02 <= tpot["ci95"][0] <= tpot["ci95"][1] <= 0.02, tpot
    tput = figures[("--tag=noop", "output_throughput")]
    assert tput["verdict"] in ("no meaningful difference", "not enough repeats"), tput
    assert tput["ci95"][0] <= 0.02 and tput["ci95"][1] >= -0.02, tput  # never a clear effect
    # TPOT halves with the ITL (32 tokens: 31 gaps of 10 ms vs 5 ms)
    assert 0.45 < figures[("--itl-ms=5", "median_tpot_ms")]["ratio"] < 0.55

    # every attempt carries its provenance; show prints it
    attempt = done[0]["attempts"][-1]
    provenance = attempt["provenance"]
    assert provenance["engine"]["name"] == "tunelab-simulator"
    assert provenance["gpus"][0]["name"] == "NVIDIA H200"
    assert provenance["system"]["driver_version"] == "580.159.04"
    assert "--itl-ms" in provenance["argv"] and provenance["benchmark"]["dataset_sha256"]
    shown = controller.cli("show", done[0]["id"])
    assert "driver / CUDA  580.159.04 / 13.0" in shown.stdout, shown.stdout

    # the rows are one family (issue 35): the method, its size, what survived, the confidence
    # of the intervals beside the verdicts; each row its launches and adjusted p and interval
    correction = doc["correction"]
    assert correction["method"] == "benjamini-hochberg" and correction["primary"] is None
    tested = [e for e in doc["effects"] if e["p_adjusted"] is not None]
    assert correction["family_size"] == len(tested) > 0
    # a discovery is judged (a row too noisy to judge is tested, but has no adjusted interval)
    found = [e for e in tested if e["p_adjusted"] <= 0.05 and e["interval_adjusted"]]
    assert correction["discoveries"] == len(found) > 0
    assert correction["confidence"] == pytest.approx(1 - len(found) * 0.05 / len(tested))
    for e in doc["effects"]:
        assert e["launches"] == [5, 5] and e["family"] == "all", e
        if e["verdict"] in ("better", "worse"):
            assert e["p_adjusted"] <= 0.05, e
            lo, hi = e["interval_adjusted"]
            assert lo <= e["ci95"][0] and e["ci95"][1] <= hi, e  # wider than its own 95 %
    holm = controller.cli_json(
        "compare", group, "--correction", "holm", "--primary", "output_throughput"
    )
    assert holm["settings"]["correction"] == "holm"
    assert holm["correction"]["method"] == "holm"
    assert holm["correction"]["primary"] == "output_throughput"
    assert [f["name"] for f in holm["correction"]["families"]] == ["primary", "secondary"]
    first = holm["correction"]["families"][0]
    assert first["confidence"] == pytest.approx(1 - 0.05 / first["family_size"])
    assert effect(holm, "--itl-ms=5", "output_throughput")["verdict"] == "better"

    strict = controller.cli_json("compare", group, "--min-effect", "50%")  # recomputed by the CLI
    assert strict["settings"]["min_effect"] == 0.5
    assert (
        effect(strict, "--tag=noop", "output_throughput")["verdict"] == "no meaningful difference"
    )
    table = controller.cli("compare", group)
    assert table.returncode == 0, table.stderr
    assert max(len(line) for line in table.stdout.splitlines()) <= 100
    assert (
        "effect of --itl-ms=5 against the baseline (5 baseline, 5 variant launches)" in table.stdout
    )
    answer = table.stdout.split("answer (only what survives the correction):", 1)[1]
    assert answer.lstrip().startswith("--itl-ms=5: better on "), answer[:300]
    assert "5+5 launches" in answer.split("\n\n", 1)[0]

    out = tmp_path / "report.html"
    made = controller.cli("report", group, "--out", str(out))
    assert made.returncode == 0, made.stderr
    assert f"report: {out}" in made.stdout
    html = out.read_text()
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", html)  # nothing to fetch
    dom, log = load_page(out, tmp_path / "chromium")
    body = re.search(r"<body ([^>]*)>", dom)
    assert body is not None, dom[:500]
    attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', body.group(1)))
    assert attrs["data-errors"] == "[]", attrs
    assert int(attrs["data-charts"]) >= 6 and attrs["data-charts-rendered"] == attrs["data-charts"]
    assert "CONSOLE" not in log and "Uncaught" not in log, log[-2000:]
    assert "--tag=noop" in dom and "no meaningful difference" in dom
