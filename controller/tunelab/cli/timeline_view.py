"""The timeline's lines in ``tunelab show``: each attempt's named events with their time and
evidence, and with ``--timeline`` a summary of every series (the data is in ``--json``)."""

from __future__ import annotations

import json
import statistics
from typing import Any

from tunelab.cli.clients import ControllerClient
from tunelab.v1 import controller_pb2


def event_lines(attempt: dict[str, Any]) -> list[str]:
    events = attempt.get("timeline_events") or []
    if not events:
        return []
    out = ["    timeline events:"]
    for e in events:
        out.append(f"      t={float(e['at_s']):.1f} s  {e['kind']}: {e['evidence']}")
    return out


def series_lines(attempt: dict[str, Any]) -> list[str]:
    """Per series: windows with a value, min, mean, max (``show --timeline``)."""
    timeline = attempt.get("timeline")
    if not timeline:
        return []
    step = timeline["step_seconds"]
    head = f"    timeline: {timeline['windows']} windows of {step:g} s"
    if timeline.get("downsampled", 1) > 1:
        head += f" (downsampled x{timeline['downsampled']})"
    out = [head]
    width = max((len(n) for n in timeline["series"]), default=0)
    for name, values in sorted(timeline["series"].items()):
        present = [v for v in values if v is not None]
        if not present:
            out.append(f"      {name.ljust(width)}  -")
            continue
        out.append(
            f"      {name.ljust(width)}  {len(present):>5}  min {min(present):<10.4g} "
            f"mean {statistics.fmean(present):<10.4g} max {max(present):.4g}"
        )
    return out


MAX_REPORT_TIMELINES = 12


def fetch_timelines(client: ControllerClient, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Attempt id -> timeline document for compare's rows (their shown attempt), at most
    MAX_REPORT_TIMELINES: what ``tunelab report`` draws."""
    out: dict[str, Any] = {}
    for row in rows:
        if len(out) >= MAX_REPORT_TIMELINES:
            break
        if not row.get("attempt"):
            continue
        request = controller_pb2.GetExperimentRequest(id=row["id"], timeline=True)
        for attempt in client.get_experiment(request).experiment.attempts:
            if attempt.id == row["attempt"] and attempt.timeline_json:
                out[attempt.id] = json.loads(attempt.timeline_json)
    return out
