"""What an MLflow export writes, as plain data: one run per attempt, nested under one parent run
per submission group, built from the comparison document (``compare.py``) and each experiment's
attempts. Nothing here talks to MLflow (``sink.py`` does), so the mapping is tested on its
own and the CLI's export and the controller's automatic one write exactly the same runs.

A run is found again by its ``tunelab.key`` tag (``attempt:<id>`` or ``group:<id>``): exporting
twice updates the same run. Its ``tunelab.digest`` tag is a hash of what the plan holds, so an
unchanged attempt is not written again at all.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tunelab.analysis.metrics import Metric, lookup
from tunelab.analysis.mlflow.timeline_metrics import timeline_metrics
from tunelab.common import __version__

KEY_TAG = "tunelab.key"
MLFLOW_EVENT = "mlflow_export"  # the store's event per exported attempt; its message: the link
DIGEST_TAG = "tunelab.digest"


def mlflow_name(metric: Metric) -> str:
    """A metric's MLflow name: the search's spelling for a latency, ``p50`` for a median
    (``ttft_p50_ms``), else its catalogue name (``goodput``)."""
    if metric.unit == "ms":
        return metric.aliases[0].replace("_median_", "_p50_")
    return metric.name


# per load point, the figures of the point (steps: the point's index in the sweep), named from
# the metric catalogue (tunelab.analysis.metrics); the load itself beside them
EXPORTED = ("output_throughput", "request_throughput", "median_ttft_ms", "p99_ttft_ms",
            "median_tpot_ms", "p99_tpot_ms", "median_itl_ms", "p99_itl_ms", "goodput")  # fmt: skip
POINT_METRICS = {
    **{m.field: mlflow_name(m) for m in map(lookup, EXPORTED)},
    "concurrency": "concurrency",
    "request_rate": "request_rate",
}
# per run; mean power keeps the name it was exported under (gpu_power_watts, its alias)
RUN_METRICS = {
    "tokens_per_joule": mlflow_name(lookup("tokens_per_joule")),
    "mean_power_watts": lookup("mean_power_watts").aliases[0],
    "energy_joules": mlflow_name(lookup("energy_joules")),
}
MAX_PARAM_VALUE = 6000  # MLflow's limit on a parameter's value
MAX_KEY = 250
_BAD_KEY_CHARS = re.compile(r"[^\w./\- :]")
# an attempt's state -> the MLflow run status; any other finished state is FAILED
_STATUS = {"SUCCEEDED": "FINISHED", "CANCELLED": "KILLED"}
TERMINAL = {"SUCCEEDED", "FAILED_STARTUP", "FAILED_BENCHMARK", "CANCELLED", "LOST", "TIMED_OUT"}


@dataclass(frozen=True)
class RunPlan:
    """One MLflow run: found by ``key`` (a tag), nested under ``parent_key`` when set."""

    key: str
    name: str
    parent_key: str | None
    status: str  # MLflow's FINISHED, FAILED or KILLED
    start_ms: int
    end_ms: int | None
    params: dict[str, str] = field(default_factory=dict)
    metrics: list[tuple[str, float, int]] = field(default_factory=list)  # (key, value, step)
    tags: dict[str, str] = field(default_factory=dict)
    artifacts: dict[str, bytes] = field(default_factory=dict)  # file name -> content

    def digest(self) -> str:
        body = json.dumps(
            [self.key, self.name, self.parent_key, self.status, self.params, self.metrics,
             self.tags, {k: hashlib.sha256(v).hexdigest() for k, v in self.artifacts.items()}],
            sort_keys=True,
        )  # fmt: skip
        return hashlib.sha256(body.encode()).hexdigest()[:16]


def metric_key(text: str) -> str:
    """A name MLflow accepts (word characters, ``/ . - : space``), at most 250 long."""
    return _BAD_KEY_CHARS.sub("_", text)[:MAX_KEY]


def _param(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text[:MAX_PARAM_VALUE]


def argv_params(argv: Sequence[str]) -> dict[str, str]:
    """``--flag value`` and ``--flag=value`` of a (redacted) server argv as ``flag.--flag``; a
    flag with no value is ``true``. Positional words (the program, ``serve MODEL``) are one
    ``argv.program`` parameter."""
    params: dict[str, str] = {}
    positional: list[str] = []
    index = 0
    while index < len(argv):
        arg = argv[index]
        if arg.startswith("--") and len(arg) > 2:
            name, eq, value = arg.partition("=")
            if not eq:
                following = argv[index + 1] if index + 1 < len(argv) else None
                if following is not None and not following.startswith("--"):
                    value, index = following, index + 1
                else:
                    value = "true"
            params[metric_key(f"flag.{name}")] = _param(value)
        elif not params:
            positional.append(arg)
        index += 1
    if positional:
        params["argv.program"] = _param(" ".join(positional))
    return params


def _ms(seconds: object) -> int | None:
    return int(float(seconds) * 1000) if isinstance(seconds, int | float) and seconds else None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def benchmark_params(benchmark: Mapping[str, Any] | None) -> dict[str, str]:
    """The experiment's ``benchmark:`` settings as ``bench.<key>`` parameters (requests,
    lengths, dataset, concurrency...), so runs can be filtered and compared by them."""
    return {metric_key(f"bench.{k}"): _param(v) for k, v in sorted((benchmark or {}).items())}


def attempt_plan(
    row: Mapping[str, Any],
    attempt: Mapping[str, Any],
    group_key: str,
    verdicts: Mapping[str, str] | None = None,
    benchmark: Mapping[str, Any] | None = None,
) -> RunPlan:
    """The run of one attempt of the experiment ``row`` (a compare-document row);
    ``benchmark``: the experiment's ``benchmark:`` settings."""
    result = attempt.get("result") or {}
    gpu = attempt.get("gpu_summary") or {}
    provenance = attempt.get("provenance") or {}
    state = str(attempt.get("state", ""))
    params = {metric_key(f"varied.{k}"): _param(v) for k, v in (row.get("varied") or {}).items()}
    params.update(benchmark_params(benchmark))
    flags = argv_params(provenance.get("argv") or [])
    if not any(k.endswith(".--port") for k in row.get("varied") or {}):
        flags.pop("flag.--port", None)  # a port the agent picked (port: auto) varies every run
    params.update(flags)
    metrics: list[tuple[str, float, int]] = []
    for step, point in enumerate(result.get("points") or []):
        for source, name in POINT_METRICS.items():
            value = _number(point.get(source))
            if value is not None:
                metrics.append((name, value, step))
    summary = {
        "tokens_per_joule": gpu.get("tokens_per_joule"),
        "mean_power_watts": gpu.get("mean_power_watts_total"),
        "energy_joules": gpu.get(
            "benchmark_energy_used_joules", gpu.get("benchmark_energy_joules")
        ),
    }
    for source, name in RUN_METRICS.items():
        value = _number(summary.get(source))
        if value is not None:
            metrics.append((name, value, 0))
    metrics += [(metric_key(k), v, s) for k, v, s in timeline_metrics(attempt.get("timeline"))]
    engine = provenance.get("engine") or {}
    system = provenance.get("system") or {}
    gpus = provenance.get("gpus") or []
    tags = {
        KEY_TAG: f"attempt:{attempt['id']}",
        "tunelab.experiment_id": str(row["id"]),
        "tunelab.experiment": str(row["name"]),
        "tunelab.attempt_id": str(attempt["id"]),
        "tunelab.attempt_number": str(attempt.get("number", "")),
        "tunelab.group": str(row.get("group", "")),
        "tunelab.state": state,
        "tunelab.version": __version__,
        "host": str(attempt.get("host") or ""),
        "gpu_model": ", ".join(sorted({str(g.get("name")) for g in gpus if g.get("name")})),
        "driver": str(system.get("driver_version") or ""),
        "engine": str(engine.get("name") or ""),
        "engine_version": str(engine.get("version") or ""),
        "tunelab.agent_version": str(provenance.get("tunelab_version") or ""),
    }
    if attempt.get("failure_reason"):
        tags["failure_reason"] = str(attempt["failure_reason"])
    if state != "SUCCEEDED" and attempt.get("message"):
        tags["failure_message"] = _param(attempt["message"])
    tags.update({metric_key(f"verdict.{k}"): v for k, v in (verdicts or {}).items()})
    artifacts = {"result.json": _json_bytes(attempt_document(row, attempt))}
    return RunPlan(
        key=f"attempt:{attempt['id']}",
        name=f"{row['name']} (attempt {attempt.get('number', '?')})",
        parent_key=group_key,
        status=_STATUS.get(state, "FAILED"),
        start_ms=_ms(attempt.get("created_at")) or 0,
        end_ms=_ms(attempt.get("finished_at")),
        params=params,
        metrics=metrics,
        tags={k: v for k, v in tags.items() if v},
        artifacts=artifacts,
    )


def attempt_document(row: Mapping[str, Any], attempt: Mapping[str, Any]) -> dict[str, Any]:
    """The result JSON kept as the run's artifact: the attempt as ``tunelab show --json`` has
    it, with the experiment it belongs to."""
    return {
        "experiment": {k: row.get(k) for k in ("id", "name", "group", "varied", "state")},
        "attempt": dict(attempt),
    }


def _json_bytes(document: object) -> bytes:
    return json.dumps(document, indent=2, sort_keys=True, default=str).encode()


def group_plan(
    group: str,
    document: Mapping[str, Any],
    start_ms: int = 0,
    report_html: bytes | None = None,
) -> RunPlan:
    """The parent run of a submission group: what was varied, and each change's effect (ratio
    and 95 % interval per metric and load point) with its verdict."""
    rows = [r for r in document.get("experiments") or [] if r.get("group") == group]
    names = sorted({str(r["name"]).split("/")[0] for r in rows})
    metrics: list[tuple[str, float, int]] = []
    tags = {KEY_TAG: f"group:{group}", "tunelab.group": group, "tunelab.version": __version__}
    for effect in document.get("effects") or []:
        base = metric_key(f"effect/{effect['change']}/{effect['metric']}/{effect['point']}")
        ratio = _number(effect.get("ratio"))
        if ratio is not None:
            metrics.append((f"{base}/ratio"[:MAX_KEY], ratio, 0))
        for bound, value in zip(("ci95_low", "ci95_high"), effect.get("ci95") or (), strict=False):
            number = _number(value)
            if number is not None:
                metrics.append((f"{base}/{bound}"[:MAX_KEY], number, 0))
        tags[metric_key(f"verdict/{effect['change']}/{effect['metric']}/{effect['point']}")] = str(
            effect.get("verdict", "")
        )
    params = {
        "design": str(document.get("design", "none")),
        "varied_fields": _param(document.get("varied_fields") or []),
        "experiments": str(len(rows)),
    }
    artifacts = {"comparison.json": _json_bytes(_group_document(group, document))}
    if report_html is not None:
        artifacts["report.html"] = report_html
    return RunPlan(
        key=f"group:{group}",
        name=f"{', '.join(names) or group} ({group})",
        parent_key=None,
        status="FINISHED",
        start_ms=start_ms,
        end_ms=None,
        params=params,
        metrics=metrics,
        tags={k: v for k, v in tags.items() if v},
        artifacts=artifacts,
    )


def _group_document(group: str, document: Mapping[str, Any]) -> dict[str, Any]:
    rows = [r for r in document.get("experiments") or [] if r.get("group") == group]
    return {**document, "experiments": rows}


def plans_for(
    document: Mapping[str, Any],
    attempts: Mapping[str, Sequence[Mapping[str, Any]]],
    reports: Mapping[str, bytes] | None = None,
    searches: Mapping[str, Mapping[str, Any]] | None = None,
    benchmarks: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[RunPlan]:
    """Every run of the experiments in ``document``: a parent per group, then one per finished
    attempt (an attempt still running is left for a later export). A group in ``searches``
    (its search document, ``tunelab search show --json``) is a search: its parent holds the
    answer, a child per trial sits under it and each attempt under its trial
    (``search_plan.py``). ``benchmarks``: per experiment id, its ``benchmark:`` settings."""
    from tunelab.analysis.mlflow.search_plan import search_plan, trial_of, trial_plans

    reports, searches, benchmarks = reports or {}, searches or {}, benchmarks or {}
    plans: list[RunPlan] = []
    groups: list[str] = []
    for row in document.get("experiments") or []:
        if row.get("group") and row["group"] not in groups:
            groups.append(row["group"])
    parents: dict[str, str] = {}  # experiment id -> its trial's run key (a search's)
    for group in groups:
        members = [r for r in document.get("experiments") or [] if r.get("group") == group]
        starts = [_ms(a.get("created_at")) for r in members for a in attempts.get(str(r["id"]), ())]
        start = min((s for s in starts if s), default=0)
        search = searches.get(group)
        if search is None:
            plans.append(group_plan(group, document, start, reports.get(group)))
            continue
        comparison = _group_document(group, document)
        plans.append(search_plan(group, search, start, comparison, reports.get(group)))
        ends = {
            str(r["id"]): max(
                (e for a in attempts.get(str(r["id"]), ()) if (e := _ms(a.get("finished_at")))),
                default=None,
            )
            for r in members
        }
        plans.extend(trial_plans(group, search, ends))
        parents.update({x: f"trial:{group}:{n}" for x, n in trial_of(search).items()})
    verdicts = change_verdicts(document)
    for row in document.get("experiments") or []:
        label = variant_label(str(row["name"]))
        in_search = row.get("group") in searches
        for attempt in attempts.get(str(row["id"]), ()):
            if attempt.get("state") in TERMINAL:
                parent = parents.get(str(row["id"]), f"group:{row['group']}")
                said = None if in_search else verdicts.get(label)
                plans.append(
                    attempt_plan(row, attempt, parent, said, benchmarks.get(str(row["id"])))
                )
    return plans


def variant_label(name: str) -> str:
    """``sim-ablation/--itl-ms=5#2`` -> ``--itl-ms=5``, the change an effect is named by."""
    label = name.split("/", 1)[1] if "/" in name else name
    return re.sub(r"#\d+$", "", label)


def change_verdicts(document: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """Per change label, ``{"<metric>.<point>": verdict}`` from the document's effects."""
    out: dict[str, dict[str, str]] = {}
    for effect in document.get("effects") or []:
        key = f"{effect['metric']}.{effect['point']}"
        out.setdefault(str(effect["change"]), {})[key] = str(effect.get("verdict", ""))
    return out
