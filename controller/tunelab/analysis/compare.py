"""Side-by-side comparison of experiments: what was varied, throughput per concurrency, latency,
GPU power and tokens per joule, the spread across ``repeat`` launches, the effect of each change
with its interval and verdict (effects.py), the roofline floor of each decode point
(roofline.py), and a warning when runs differ in something the spec did not vary.

The document this builds is the contract of ``tunelab compare --json`` (README, "Compare").
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from tunelab.analysis.effects import CORRECTIONS, EffectSettings, effects_document
from tunelab.analysis.metrics import COMPARED, lookup
from tunelab.analysis.roofline import annotate_points, power_share
from tunelab.analysis.rows import AttemptRecord, ExperimentRecord
from tunelab.bench.promptlengths import lengths_exact

# the figures of a point the document copies: throughputs, the compared latencies, request
# counts (fields of the metric catalogue), and the server's own prompt-token count
POINT_FIELDS = (
    *(
        lookup(n).field
        for n in ("output_throughput", "request_throughput", "total_token_throughput")
    ),
    *(m.field for m in COMPARED if m.unit == "ms"),
    *(lookup(n).field for n in ("completed", "failed")),
    "mean_input_tokens",  # the server's own count (usage.prompt_tokens), mean per request
)
REPEAT_SUFFIX = re.compile(r"#\d+$")


def _point_key(point: dict[str, Any]) -> str:
    if point.get("concurrency"):
        return f"c{point['concurrency']}"
    rate = point.get("request_rate")
    return f"r{rate}" if rate not in (None, "inf") else f"p{point.get('point_index', 0)}"


def _result_attempt(attempts: Sequence[AttemptRecord]) -> AttemptRecord | None:
    done = [a for a in attempts if a.state == "SUCCEEDED"]
    return done[-1] if done else (attempts[-1] if attempts else None)


def experiment_row(
    experiment: ExperimentRecord, attempts: Sequence[AttemptRecord]
) -> dict[str, Any]:
    attempt = _result_attempt(attempts)
    result = attempt.result if attempt and attempt.result else {}
    gpu = attempt.gpu_summary if attempt and attempt.gpu_summary else {}
    points = []
    for point in result.get("points", []):
        rate = point.get("request_rate")
        entry = {
            "key": _point_key(point),
            "concurrency": point.get("concurrency") or None,
            "request_rate": rate if isinstance(rate, int | float) else None,  # "inf" = closed loop
        }
        entry.update({name: point.get(name) for name in POINT_FIELDS})
        points.append(entry)
    provenance = attempt.provenance if attempt else None
    roofline = annotate_points(points, experiment.spec, provenance)
    return {
        "id": experiment.id,
        "name": experiment.name,
        "group": experiment.group,
        "state": experiment.state.value,
        "host": attempt.host if attempt else None,
        "attempt": attempt.id if attempt else None,
        "varied": experiment.varied,
        "repeat_index": experiment.repeat_index,
        "points": points,
        "lengths_exact": lengths_exact(result),  # False: no tokenizer, lengths in words
        "mean_power_watts": gpu.get("mean_power_watts_total"),
        "energy_joules": gpu.get(
            "benchmark_energy_used_joules", gpu.get("benchmark_energy_joules")
        ),
        "energy_source": gpu.get("benchmark_energy_source"),
        "tokens_per_joule": gpu.get("tokens_per_joule"),
        "clock_events_seen": sorted(
            {r for g in (gpu.get("gpus") or {}).values() for r in g.get("clock_events_seen", [])}
        ),
        "gpu_summary_samples": gpu.get("samples", 0),
        "message": attempt.message if attempt else experiment.message,
        "power_share_of_limit": power_share(gpu, provenance),
        "sm_clock_mean_hertz": _mean_over_gpus(gpu, "sm_clock_hertz"),
        "roofline": roofline,
        "provenance": provenance,
    }


def _mean_over_gpus(gpu: dict[str, Any], field: str) -> float | None:
    means = [g[field]["mean"] for g in (gpu.get("gpus") or {}).values() if g.get(field)]
    return statistics.fmean(means) if means else None


def _spread(values: list[float]) -> dict[str, float]:
    mean = statistics.fmean(values)
    stdev = statistics.stdev(values) if len(values) > 1 else 0.0
    return {
        "n": len(values),
        "mean": mean,
        "min": min(values),
        "max": max(values),
        "stdev": stdev,
        "cv_percent": 100.0 * stdev / mean if mean else 0.0,
    }


def repeat_groups(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Launches of the same variant (``name#1``, ``name#2``...) and their throughput spread."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if REPEAT_SUFFIX.search(row["name"]):
            groups[(row["group"], REPEAT_SUFFIX.sub("", row["name"]))].append(row)
    out = []
    for (_, name), members in sorted(groups.items(), key=lambda kv: kv[0][1]):
        per_point: dict[str, list[float]] = defaultdict(list)
        for member in members:
            for point in member["points"]:
                if point.get("output_throughput") is not None:
                    per_point[point["key"]].append(float(point["output_throughput"]))
        out.append(
            {
                "name": name,
                "experiments": [m["id"] for m in members],
                "output_throughput": {
                    key: _spread(vals) for key, vals in per_point.items() if vals
                },
            }
        )
    return out


# What provenance says that a spec cannot vary: runs that differ here compare unlike things.
UNVARIED: dict[str, Callable[[dict[str, Any]], Any]] = {
    "driver": lambda p: (p.get("system") or {}).get("driver_version"),
    "CUDA": lambda p: (p.get("system") or {}).get("cuda_driver_version"),
    # a host without GPUs is a value too: runs split between it and an H200 must be said
    "GPU model": lambda p: (
        ", ".join(sorted(str(g.get("name")) for g in p.get("gpus") or [])) or "no GPU"
    ),
    "power limit": lambda p: ", ".join(
        f"{g.get('power_limit_watts'):g} W"
        for g in p.get("gpus") or []
        if isinstance(g.get("power_limit_watts"), int | float)
    ),
    "engine version": lambda p: (p.get("engine") or {}).get("version"),
    "tunelab version": lambda p: p.get("tunelab_version"),
    "model config": lambda p: (p.get("model") or {}).get("config_sha256"),
    "dataset": lambda p: (p.get("benchmark") or {}).get("dataset_sha256"),
}
# ...unless the spec varied something that explains it
EXPLAINED_BY = {
    "GPU model": ("host",),
    "power limit": ("host",),
    "driver": ("host",),
    "CUDA": ("host",),
    "model config": ("server",),
    "engine version": ("server",),
    "dataset": ("benchmark",),
}


def provenance_warnings(rows: list[dict[str, Any]], varied: list[str]) -> list[str]:
    """One line per property that differs between compared runs although nothing varied it."""
    warnings = []
    for what, read in UNVARIED.items():
        seen: dict[str, list[str]] = defaultdict(list)
        for row in rows:
            value = read(row["provenance"]) if row.get("provenance") else None
            if value:
                seen[str(value)].append(row["name"])
        explained = any(v.split(".")[0] in EXPLAINED_BY.get(what, ()) for v in varied)
        if len(seen) > 1 and not explained:
            parts = "; ".join(f"{value} ({_names(names)})" for value, names in seen.items())
            warnings.append(f"runs differ in {what}, which the spec did not vary: {parts}")
    return warnings


def _names(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def spec_settings(experiments: Sequence[ExperimentRecord]) -> tuple[EffectSettings, list[str]]:
    """The effect settings a spec's ``compare:`` asks for (correction, primary metric), from the
    first experiment that has them; a warning when compared submissions ask for different ones."""
    asked = {
        _key(e.spec.get("compare")): e.name
        for e in experiments
        if isinstance(e.spec, dict) and e.spec.get("compare")
    }
    if not asked:
        return EffectSettings(), []
    first = next(e.spec["compare"] for e in experiments if e.spec.get("compare"))
    settings = EffectSettings(
        correction=CORRECTIONS[first.get("correction", "bh")], primary=first.get("primary")
    )
    plain = [e.name for e in experiments if not e.spec.get("compare")]
    if len(asked) > 1 or plain:
        warning = (
            "compared runs' specs ask for different compare: settings; "
            f"judged with {first} (from {next(iter(asked.values()))})"
        )
        return settings, [warning]
    return settings, []


def _key(value: Any) -> str:
    return repr(sorted(value.items())) if isinstance(value, dict) else repr(value)


def compare(
    pairs: Sequence[tuple[ExperimentRecord, Sequence[AttemptRecord]]],
    settings: EffectSettings | None = None,
) -> dict[str, Any]:
    """The comparison document; effects judged with ``settings``, else with what the
    experiments' spec asks for (``compare: {correction, primary}``), else the defaults."""
    pairs = sorted(pairs, key=lambda pair: pair[0].seq)  # submission order: baselines first
    asked, notes = spec_settings([e for e, _ in pairs])
    if settings is None:
        settings = asked
    rows = [experiment_row(e, a) for e, a in pairs]
    varied = sorted({key for row in rows for key in row["varied"]})
    keys: list[str] = []
    for row in rows:
        for point in row["points"]:
            if point["key"] not in keys:
                keys.append(point["key"])
    return {
        "varied_fields": varied,
        "point_keys": keys,
        "experiments": rows,
        "repeats": repeat_groups(rows),
        **effects_document(rows, settings),
        "warnings": provenance_warnings(rows, varied) + scrape_warnings(pairs) + notes,
    }


def scrape_warnings(pairs: Sequence[tuple[ExperimentRecord, Sequence[AttemptRecord]]]) -> list[str]:
    """GPU figures that are missing because the agent's /metrics could not be scraped: said once
    per URL, so a wrong ``--metrics-url`` is not a silent ``-`` in every row."""
    failed: dict[str, tuple[int, str, str]] = {}
    for _, attempts in pairs:
        for attempt in attempts:
            gpu = attempt.gpu_summary or {}
            errors = int(gpu.get("scrape_errors") or 0)
            if errors and not gpu.get("samples"):
                url = str(gpu.get("metrics_url") or attempt.host)
                count, _, host = failed.get(url, (0, "", attempt.host or "NAME"))
                reason = str(gpu.get("last_scrape_error") or "no reason")
                failed[url] = (count + errors, reason, host)
    return [
        f"no GPU figures from {url}: {count} scrape(s) failed ({reason}); "
        f"fix the host's metrics URL with `tunelab hosts set {host} --metrics-url URL`"
        for url, (count, reason, host) in failed.items()
    ]
