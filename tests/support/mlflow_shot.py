"""Take docs/mlflow-compare.png: a demo ablation exported to a real MLflow, its runs side by side
in MLflow's own run comparison, in headless Chromium.

    .venv/bin/python -m tests.support.mlflow_shot docs/mlflow-compare.png
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from tests.e2e.conftest import Lab
from tests.e2e.test_mlflow_export import ablation
from tests.support.browser import _argv
from tests.support.mlflow_server import MlflowServer


def main(out: Path) -> int:
    with tempfile.TemporaryDirectory(prefix="tunelab-shot-") as folder:
        root = Path(folder)
        server = MlflowServer(root / "mlflow").start()
        lab = Lab(root)
        try:
            lab.start_controller()
            lab.add_agent("h200-a")
            spec = ablation("sim-ablation", repeat=2, requests=8)
            spec["ablation"].append({"server.flags.--tag": "no-op"})
            path = root / "spec.yaml"
            path.write_text(yaml.safe_dump(spec, sort_keys=False))
            assert lab.controller is not None
            done = lab.controller.cli("submit", str(path), "--wait", "--json", timeout=600)
            group = json.loads(done.stdout)[0]["group"]
            lab.controller.cli("export", "mlflow", group, "--tracking-uri", server.uri)
            runs = [
                r["info"]["run_id"]
                for r in server.runs("tunelab")
                if r["tags"]["tunelab.key"].startswith("attempt:")
            ]
            experiment = server.experiment_id("tunelab")
            url = (
                f"{server.uri}/#/compare-runs?runs={json.dumps(runs)}"
                f"&experiments={json.dumps([experiment])}"
            )
            offline = [a for a in _argv(root / "profile") if "host-resolver" not in a]
            argv = [
                *offline,
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                "--window-size=1400,1000",
                "--virtual-time-budget=20000",
                f"--screenshot={out.resolve()}",
                url,
            ]
            shot = subprocess.run(argv, capture_output=True, text=True, timeout=180)
            if not out.exists():
                print(url, shot.stderr[-3000:], file=sys.stderr)
                return 1
            print(f"wrote {out} ({len(runs)} runs of {group})")
        finally:
            lab.close()
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/mlflow-compare.png")))
