"""What an MLflow export writes for a search (issue 37.3): one parent run holding the search's
answer — the best configuration, its objective with its 95 % interval over launches, the SLOs,
its verdict against the runner-up — and a child run per trial, under which that trial's
attempts nest. No per-concurrency verdicts: a search's answer is the race's, not the matrix's.

The answer moves while a search runs, and MLflow keeps a parameter's first value: what can
change (the best configuration, the verdicts, the answer line) is in tags and metrics, which an
update replaces; what a search fixed when it was submitted (strategy, objective, SLOs, space)
and each trial's own parameters are params.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tunelab.analysis.mlflow.plan import KEY_TAG, RunPlan, _json_bytes, _param, metric_key
from tunelab.analysis.slos import slo_text
from tunelab.common import __version__

# a search's or a trial's state -> the MLflow run status (a running one is left RUNNING)
_STATUS = {"DONE": "FINISHED", "FAILED": "FAILED", "CANCELLED": "KILLED", "SKIPPED": "KILLED"}


def trial_key(group: str, number: int) -> str:
    return f"trial:{group}:{number}"


def _short(path: str) -> str:
    return path.split(".", 2)[2] if path.startswith("server.flags.") else path


def _objective(search: Mapping[str, Any]) -> tuple[str, str]:
    found = search["objective"]
    return (
        ("maximize", found["maximize"]) if "maximize" in found else ("minimize", found["minimize"])
    )


def search_plan(
    group: str,
    search: Mapping[str, Any],
    start_ms: int,
    comparison: Mapping[str, Any] | None = None,
    report_html: bytes | None = None,
) -> RunPlan:
    """The parent run of a search's group: the answer and its evidence."""
    sense, objective = _objective(search)
    params = {
        "design": "search",
        "strategy": str(search.get("strategy", "")),
        "objective": f"{sense} {objective}",
        "slo": slo_text(search.get("slo") or {}),
        "space": _param([p.get("path") for p in search.get("space") or []]),
    }
    tags = {
        KEY_TAG: f"group:{group}",
        "tunelab.group": group,
        "tunelab.version": __version__,
        "tunelab.search": str(search.get("name", "")),
        "tunelab.state": str(search.get("state", "")),
        "answer": _param(search.get("answer") or "no configuration met the SLOs yet"),
    }
    metrics: list[tuple[str, float, int]] = [("trials", float(len(search.get("trials") or [])), 0)]
    best = search.get("best")
    if best:
        tags["best.trial"] = str(best.get("trial", ""))
        tags["best.load"] = ", ".join(f"{k} {v}" for k, v in (best.get("load") or {}).items())
        tags["verdict"] = str(best.get("verdict") or "")
        for path, value in (best.get("params") or {}).items():
            tags[metric_key(f"best.{_short(path)}")] = _param(value)
        if isinstance(best.get("objective"), int | float):
            metrics.append((metric_key(f"best/{objective}"), float(best["objective"]), 0))
        for bound, value in zip(
            ("ci95_low", "ci95_high"), best.get("interval") or (), strict=False
        ):
            metrics.append((metric_key(f"best/{objective}/{bound}"), float(value), 0))
        metrics.append(("best/launches", float(best.get("launches") or 0), 0))
        runner = best.get("vs_runner_up")
        if runner:
            tags["vs_runner_up.verdict"] = str(runner.get("verdict") or "")
            tags["vs_runner_up.trial"] = str(runner.get("trial", ""))
            if isinstance(runner.get("change_pct"), int | float):
                metrics.append(("vs_runner_up/change_pct", float(runner["change_pct"]), 0))
            # the race judges at its own level (a Holm step: 97.5 % for two contenders), not
            # 95 %: the bounds are named for no level, and the level is a metric beside them
            for bound, value in zip(
                ("interval_low_pct", "interval_high_pct"), runner.get("interval") or (),
                strict=False,
            ):  # fmt: skip
                metrics.append((f"vs_runner_up/{bound}", float(value), 0))
            if isinstance(runner.get("confidence"), int | float):
                metrics.append(("vs_runner_up/confidence", float(runner["confidence"]), 0))
    artifacts = {"search.json": _json_bytes(search)}
    if comparison is not None:
        artifacts["comparison.json"] = _json_bytes(comparison)
    if report_html is not None:
        artifacts["report.html"] = report_html
    state = str(search.get("state", ""))
    finished = search.get("finished_at")
    return RunPlan(
        key=f"group:{group}",
        name=f"{search.get('name') or group} search ({group})",
        parent_key=None,
        status=_STATUS.get(state, "RUNNING"),
        start_ms=start_ms,
        end_ms=int(float(finished) * 1000) if isinstance(finished, int | float) else None,
        params=params,
        metrics=metrics,
        tags={k: v for k, v in tags.items() if v},
        artifacts=artifacts,
    )


def trial_plans(
    group: str, search: Mapping[str, Any], ends_ms: Mapping[str, int | None]
) -> list[RunPlan]:
    """A child run per trial: its parameters, the load found, its objective with its interval
    and launches; ``ends_ms``: per experiment id, when its last attempt ended."""
    _, objective = _objective(search)
    plans = []
    for trial in search.get("trials") or []:
        state = str(trial.get("state", ""))
        params = {metric_key(_short(p)): _param(v) for p, v in (trial.get("params") or {}).items()}
        metrics: list[tuple[str, float, int]] = []
        if isinstance(trial.get("objective"), int | float):
            metrics.append((metric_key(objective), float(trial["objective"]), 0))
        for bound, value in zip(
            ("ci95_low", "ci95_high"), trial.get("interval") or (), strict=False
        ):
            metrics.append((metric_key(f"{objective}/{bound}"), float(value), 0))
        for axis, value in (trial.get("load") or {}).items():
            if isinstance(value, int | float):
                metrics.append((metric_key(f"load/{axis}"), float(value), 0))
        tags = {
            KEY_TAG: trial_key(group, int(trial["number"])),
            "tunelab.group": group,
            "tunelab.trial": str(trial["number"]),
            "tunelab.experiment_id": str(trial.get("experiment") or ""),
            "tunelab.state": state,
            "race": str(trial.get("race") or ""),
            "rung": str(trial.get("rung") or ""),
            "failure_reason": str(trial.get("failure_reason") or ""),
            "message": _param(trial.get("message") or ""),
        }
        race = f", race {trial['race']}" if trial.get("race") else ""
        plans.append(
            RunPlan(
                key=trial_key(group, int(trial["number"])),
                name=f"{search.get('name') or group} trial {trial['number']}{race}",
                parent_key=f"group:{group}",
                status=_STATUS.get(state, "RUNNING"),
                start_ms=0,
                end_ms=None if state == "RUNNING" else ends_ms.get(str(trial.get("experiment"))),
                params=params,
                metrics=metrics,
                tags={k: v for k, v in tags.items() if v},
            )
        )
    return plans


def trial_of(search: Mapping[str, Any]) -> dict[str, int]:
    """Per experiment id, the number of the trial it ran."""
    return {
        str(t["experiment"]): int(t["number"])
        for t in search.get("trials") or []
        if t.get("experiment")
    }
