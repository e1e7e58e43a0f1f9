"""The picture in docs/report.md: one real run on the simulator, its timeline drawn as the report
draws it, screenshotted by headless Chromium.

One agent (``tunelab-agent serve`` with the replayed H200 NVML snapshot) runs the simulator at
concurrency 8 for 40 s with scripted phases, timed from its first request (a queue that grows
from 8 s, a cache-full phase with preemptions from 18 s, requests twice as slow from 28 s); the
timeline section of the report is written to ``--html`` and, with ``--png``, screenshotted by
headless Chromium (tests/support/browser.py). Prints the events it found.

  python benchmarks/timeline_page.py --html /tmp/timeline.html --png docs/timeline.png
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

from tests.support.agent_proc import AgentProcess  # noqa: E402
from tests.support.browser import screenshot  # noqa: E402
from tunelab.analysis.report.page import STYLE  # noqa: E402
from tunelab.analysis.timeline.events import find_events  # noqa: E402
from tunelab.analysis.timeline.model import parse  # noqa: E402
from tunelab.analysis.timeline.panels import timeline_section  # noqa: E402
from tunelab.v1 import agent_pb2, run_pb2, server_pb2  # noqa: E402

NVML = HERE / "tests" / "fixtures" / "nvml" / "h200-busy-v2.json"
SIM = [sys.executable, "-m", "tunelab.bench.simulator", "--port", "{port}", "--model", "sim"]
PHASES = ["--phase", "queue@8-14", "--phase", "cache-full@18-24", "--phase", "slow@28x2"]


def record(seconds: float) -> dict[str, object]:
    spec = run_pb2.RunSpec(
        server=server_pb2.ServerSpec(
            argv=[*SIM, "--itl-ms", "8", *PHASES], port=0, ready_model="sim", stop_grace_seconds=5
        ),
        benchmark=run_pb2.BenchmarkSpec(
            builtin=run_pb2.BuiltinBenchmark(
                model="sim",
                concurrency=[8],
                duration_seconds=seconds,
                input_len=32,
                output_len=32,
                warmup=8,
                timeline_step_seconds=0.5,
            )
        ),
        max_duration_seconds=seconds + 120,
        experiment="timeline-demo",
    )
    with tempfile.TemporaryDirectory(prefix="tl-page-") as folder:
        agent = AgentProcess(Path(folder) / "agent", ["--nvml-snapshot", str(NVML)]).start()
        try:
            stub = agent.stub()
            stub.StartRun(agent_pb2.StartRunRequest(run_id="demo", spec=spec), timeout=10)
            for update in stub.WatchRun(agent_pb2.WatchRunRequest(run_id="demo"), timeout=600):
                if update.run.state >= run_pb2.RUN_STATE_SUCCEEDED:
                    break
        finally:
            agent.terminate()
    if update.run.state != run_pb2.RUN_STATE_SUCCEEDED:
        raise SystemExit(update.run.message)
    timeline: dict[str, object] = json.loads(update.run.result_json)["timeline"]
    return timeline


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--html", type=Path, required=True)
    parser.add_argument("--png", type=Path)
    parser.add_argument("--seconds", type=float, default=40.0)
    args = parser.parse_args()
    timeline = record(args.seconds)
    for event in find_events(parse(timeline)):
        print(f"t={event.at_s:5.1f} s  {event.kind}: {event.evidence}")
    section = timeline_section({"demo": timeline}, lambda _: "timeline-demo (attempt demo)")
    args.html.write_text(
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><style>{STYLE}</style></head>"
        f"<body><h2>Timelines</h2>{section}</body></html>",
        encoding="utf-8",
    )
    if args.png:
        with tempfile.TemporaryDirectory(prefix="tl-chromium-") as profile:
            screenshot(args.html, args.png.resolve(), Path(profile), width=1000, height=860)
        print(f"screenshot: {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
