"""E2E: `profile:` in a spec through controller and agent, then `tunelab profile` fetches the
kept traces over the controller's stream, summarises them and diffs an ablation's two variants.
The servers are simulators started as vLLM (engine: vllm), so the agent adds vLLM's flag."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from tests.e2e.conftest import Lab, sim_experiment


def test_profile_fetch_summary_and_diff_of_an_ablation(lab: Lab, tmp_path: Path) -> None:
    controller = lab.start_controller()
    lab.add_agent("gpu-a")
    spec = sim_experiment(
        "prof",
        ablation=[{"server.flags.--itl-ms": 10}],
        profile={"point": 1},
    )
    spec["server"]["engine"] = "vllm"
    done = lab.submit(spec, wait=True)
    assert [e["state"] for e in done] == ["SUCCEEDED", "SUCCEEDED"]
    baseline, variant = done
    kept = baseline["attempts"][-1]["result"]["profile"]
    assert kept["window"]["ok"] is True and len(kept["traces"]) == 1

    out = tmp_path / "traces"
    summary = controller.cli_json("profile", baseline["id"], "--out", str(out))
    assert {"trace_files", "top", "categories", "gpu_idle_share"} <= set(summary)
    assert summary["top"][0]["name"] == "nvjet_sim_gemm"
    assert summary["output_tokens"] == kept["window"]["output_tokens"] == 128
    (saved,) = (out / baseline["attempts"][-1]["id"]).iterdir()
    assert saved.name == kept["traces"][0]["name"]
    assert saved.stat().st_size == kept["traces"][0]["size_bytes"]
    assert json.loads(gzip.decompress(saved.read_bytes()))["traceEvents"]  # as written

    diff = controller.cli_json("profile", baseline["id"], "--vs", variant["id"])
    assert diff["unit"] == "ms/token" and diff["repeats"] == [1, 1]
    assert {r["name"] for r in diff["categories"]} >= {"gemm", "attention"}

    report = tmp_path / "report.html"
    made = controller.cli("report", baseline["group"], "--out", str(report))
    assert made.returncode == 0, made.stderr
    page = report.read_text()
    assert "<h2>Profiles</h2>" in page and "--itl-ms=10 against baseline" in page
    assert "ms/token" in page and "nvjet_sim_gemm (gemm)" in page

    attempt_id = variant["attempts"][-1]["id"]  # an attempt id names that attempt
    by_attempt = controller.cli_json("profile", attempt_id)
    assert by_attempt["trace_files"] == [
        variant["attempts"][-1]["result"]["profile"]["traces"][0]["name"]
    ]

    missing = controller.cli("profile", "no-such-experiment")
    assert missing.returncode == 4, missing.stderr
