"""Write the tunelab dashboards as Grafana JSON: ``python deploy/grafana/build_dashboards.py``.

The JSON in ``dashboards/`` is what Grafana provisions, and it is committed; a test checks it
equals what this script writes, so edit the ``dashboard_*.py`` modules and run this again.
``--out DIR`` writes elsewhere (the test uses it).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import dashboard_experiments
import dashboard_host
import dashboard_live_run
import dashboard_watches
from grafana_model import JSON

HERE = Path(__file__).resolve().parent
DASHBOARDS: dict[str, Callable[[], JSON]] = {
    "tunelab-host.json": dashboard_host.build,
    "tunelab-live-run.json": dashboard_live_run.build,
    "tunelab-experiments.json": dashboard_experiments.build,
    "tunelab-watches.json": dashboard_watches.build,
}


def render(build: Callable[[], JSON]) -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "dashboards", help="output folder")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, build in DASHBOARDS.items():
        (args.out / name).write_text(render(build))
        print(args.out / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
