"""Can one watch stop the queue? (issue 45.1) Real processes on loopback: a controller, one agent
with simulator servers. Per trigger, a watch is added (every 2s, 2 launches), given time for its
second occurrence to end and be judged, then an ordinary experiment is submitted; the table says
how long that experiment stayed QUEUED (">N" = never within N s), how many ticks failed (the
controller's ``control_tick_failed`` lines), the bytes they logged, how many failed steps the
guard marked (``control_step_failed``), and what ``watch show`` tells the user.

Triggers: ``usage`` (a server reporting completion_tokens = 10**200), ``header`` (a checkpoint
whose safetensors header declares a 10**400-byte tensor), ``margin`` (watch.margin 1.0e-300).

  python benchmarks/watch_isolation.py [--triggers usage,header,margin] [--wait 45]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.e2e.conftest import Lab, sim_experiment
from tests.e2e.test_watch_isolation_e2e import FAKES, checkpoint, watch_spec


def trigger_doc(trigger: str, root: Path) -> dict[str, Any]:
    if trigger == "usage":
        server = {"command": [sys.executable, str(FAKES / "usage_server.py")],
                  "flags": {"--port": "{port}", "--model": "hostile"},
                  "ready": {"model": "hostile", "path": "/health", "timeout": "1m"}}  # fmt: skip
        return watch_spec("w", server)
    if trigger == "header":
        model = str(checkpoint(root / "model"))
        flags = {**sim_experiment("x")["server"]["flags"], "--model": model}
        return watch_spec("w", {"flags": flags, "ready": {"model": model, "timeout": "1m"}})
    doc = watch_spec("w", {}, margin=1.0e-300)
    doc["server"]["flags"]["--itl-ms"] = 5  # the same speed: undecided, launches_needed runs
    return doc


def queued_for(lab: Lab, limit: float) -> float:
    """Seconds the ordinary experiment stayed QUEUED (limit + 1 when it never left)."""
    assert lab.controller is not None
    (row,) = lab.submit(sim_experiment("ordinary"))
    began = time.monotonic()
    while time.monotonic() - began < limit:
        shown = lab.controller.cli_json("show", row["id"])
        if shown["state"] != "QUEUED":
            return time.monotonic() - began
        time.sleep(0.25)
    return limit + 1


def one(trigger: str, wait: float) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix=f"isolation-{trigger}-"))
    lab = Lab(root)
    try:
        controller = lab.start_controller()
        lab.add_agent("sim-a")
        path = root / "w.yaml"
        path.write_text(yaml.safe_dump(trigger_doc(trigger, root)))
        added = controller.cli("watch", "add", str(path))
        if added.returncode != 0:
            said = added.stderr.strip().splitlines()[-1][:90]
            return {"trigger": trigger, "queued": "-", "ticks": 0, "bytes": 0, "steps": 0,
                    "user": f"add refused: {said}"}  # fmt: skip
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            doc = json.loads(controller.cli("watch", "show", "w", "--json").stdout or "{}")
            ended = [o for o in doc.get("occurrences", []) if o["verdict"] is not None]
            running = [o for o in doc.get("occurrences", []) if o["verdict"] is None]
            if len(ended) >= 2 or (ended and running and not running[0]["experiments"].get("QUEUED")
                                   and not running[0]["experiments"].get("RUNNING")):  # fmt: skip
                break
            time.sleep(0.5)
        mark = len(controller.log())
        seconds = queued_for(lab, wait)
        log = controller.log()[mark:]
        ticks = [line for line in log.splitlines() if "control_tick_failed" in line]
        steps = [line for line in log.splitlines() if "control_step_failed" in line]
        shown = controller.cli("watch", "show", "w")
        user = (shown.stdout + shown.stderr).strip().splitlines()
        judged = [line for line in user if line.startswith("#") and "running" not in line]
        failing = [line for line in user if "step failing" in line or "rror" in line]
        said = (failing or judged or user or [""])[-1]
        return {
            "trigger": trigger,
            "queued": f"{seconds:.1f}" if seconds <= wait else f">{wait:g}",
            "ticks": len(ticks),
            "bytes": sum(len(line) for line in ticks),
            "steps": len(steps),
            "user": said[:90],
        }
    finally:
        lab.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--triggers", default="usage,header,margin")
    p.add_argument("--wait", type=float, default=45.0)
    args = p.parse_args()
    rows = [one(t, args.wait) for t in args.triggers.split(",")]
    print(f"{'trigger':<8} {'queued s':>9} {'ticks failed':>12} {'log bytes':>10} "
          f"{'steps marked':>12}  what watch show says")  # fmt: skip
    for r in rows:
        print(f"{r['trigger']:<8} {r['queued']:>9} {r['ticks']:>12} {r['bytes']:>10} "
              f"{r['steps']:>12}  {r['user']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
