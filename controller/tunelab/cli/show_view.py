"""``tunelab show``: one experiment as text — its spec as a command line, attempts, per-point
results rounded for reading, and the GPU figures or why there are none."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tunelab.bench.promptlengths import lengths_exact, prompt_tokens_line
from tunelab.cli.timeline_view import event_lines, series_lines
from tunelab.common.durations import format_duration

ServerArgv = Callable[[dict[str, Any]], list[str]]


def _num(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{float(value):,.{digits}f}"


def _spec_lines(spec: dict[str, Any], server_argv: ServerArgv) -> list[str]:
    """The spec as README promises ``show`` prints it: the command line, readiness, benchmark."""
    server, bench = spec.get("server", {}), spec.get("benchmark", {})
    ready = server.get("ready", {})
    lines = [f"  server: {' '.join(server_argv(spec))}"]
    env = " ".join(f"{k}={v}" for k, v in server.get("env", {}).items())
    lines.append(
        f"    port {server.get('port')}, ready {ready.get('path')}"
        + (f" with model {ready['model']}" if ready.get("model") else "")
        + f" within {format_duration(float(ready.get('timeout') or 0))}"
        + (f", env {env}" if env else "")
    )
    if bench.get("kind") == "command":
        lines.append(f"  benchmark: {' '.join(bench.get('command', []))}")
    else:
        load = (
            f"c={','.join(str(c) for c in bench.get('concurrency') or [])}"
            if bench.get("concurrency")
            else f"rate {bench.get('rate')}/s"
        )
        size = (
            f"{bench['requests']} requests"
            if bench.get("requests")
            else f"{format_duration(float(bench.get('duration') or 0))}"
        )
        lines.append(
            f"  benchmark: {bench.get('api', 'completions')} {load}, {size} per point, "
            f"input {bench.get('input_len')}, output {bench.get('output_len')} tokens"
        )
        dataset = _dataset_line(bench.get("dataset"))
        if dataset:
            lines.append(f"    {dataset}")
    return lines


def _dataset_line(dataset: Any) -> str:
    """``dataset shared-prefix (prefix_len 2048, prefix_groups 8)``; "" for the default."""
    if isinstance(dataset, str):
        dataset = {"name": dataset}
    if not isinstance(dataset, dict) or (
        dataset.get("name", "random") == "random" and len(dataset) <= 1
    ):
        return ""
    rest = ", ".join(f"{k} {v}" for k, v in dataset.items() if k != "name" and v is not None)
    return f"dataset {dataset.get('name', 'random')}" + (f" ({rest})" if rest else "")


def _profile_line(data: dict[str, Any]) -> str:
    """A profiled experiment says what is profiled and how to read it (the summary is made on
    demand from the kept traces: ``tunelab profile``)."""
    profile = (data.get("spec") or {}).get("profile")
    if not isinstance(profile, dict):
        return ""
    window = profile.get("window")
    said = ", ".join(
        part
        for part in (
            f"point {profile.get('point', 0)}",
            f"window {format_duration(float(window))}" if isinstance(window, int | float) else "",
            f"{profile['requests']} requests" if profile.get("requests") else "",
        )
        if part
    )
    return f"  profiled ({said}): the summary of its traces: tunelab profile {data['id']}"


def _gpu_line(gpu: dict[str, Any], host: str = "") -> str:
    """The attempt's GPU figures, or why there are none (never a silent ``-``)."""
    failed = int(gpu.get("scrape_errors") or 0)
    url = gpu.get("metrics_url") or "the host's metrics URL"
    if failed and not gpu.get("samples"):
        return (
            f"    GPU: no figures: all {failed} scrape(s) of {url} failed "
            f"({gpu.get('last_scrape_error') or 'no reason'}); fix it with "
            f"tunelab hosts set {host or 'NAME'} --metrics-url URL"
        )
    if not gpu.get("samples"):
        return "    GPU: no figures (the controller scraped no /metrics during the attempt)"
    if not gpu.get("gpus"):
        return (
            f"    GPU: no figures: {url} has no tunelab_gpu_* series "
            f"({gpu['samples']} scrapes; an agent without an NVIDIA driver?)"
        )
    joules = gpu.get("benchmark_energy_used_joules")
    tpj = gpu.get("tokens_per_joule")
    line = (
        f"    GPU: {_num(gpu.get('mean_power_watts_total'))} W mean (sum), "
        f"{_num(joules, 0)} J while benchmarking "
        f"({gpu.get('benchmark_energy_source', 'no energy figure')}), "
        f"{_num(tpj, 3)} tok/J over {gpu['samples']} scrapes"
    )
    return line + (f"; {failed} scrape(s) failed" if failed else "")


def render_show(data: dict[str, Any], server_argv: ServerArgv) -> str:
    """The experiment JSON (``tunelab show --json``) as the lines ``tunelab show`` prints;
    ``server_argv`` renders a spec's server command line (the spec's own renderer)."""
    out: list[str] = []
    out.append(f"{data['id']}  {data['name']}  {data['state']}  (group {data['group']})")
    out.append(f"  varied: {data['varied'] or 'baseline'}   host: {data['host_selector']}")
    if data["spec"]:
        out.extend(_spec_lines(data["spec"], server_argv))
        profiled = _profile_line(data)
        if profiled:
            out.append(profiled)
    if data["message"]:
        out.append(f"  {data['message']}")
    for a in data["attempts"]:
        gpus = ",".join(str(g) for g in a["gpus"]) or "all"
        head = f"  attempt {a['number']} {a['id']} on {a['host']} (GPUs {gpus})"
        out.append(f"{head}: {a['state']}" + (f": {a['message']}" if a["message"] else ""))
        for point in (a["result"] or {}).get("points", []):
            where = (
                f"c={point['concurrency']}"
                if point.get("concurrency")
                else f"rate={point.get('request_rate')}"
            )
            out.append(
                f"    {where}: {_num(point.get('output_throughput'))} tok/s, "
                f"TTFT p50 {_num(point.get('median_ttft_ms'))} ms, "
                f"TPOT p50 {_num(point.get('median_tpot_ms'), 2)} ms, "
                f"{point.get('completed', 0)} ok, {point.get('failed', 0)} failed"
            )
        result = a["result"] or {}
        lengths = prompt_tokens_line(result.get("points", []), lengths_exact(result))
        if lengths:
            out.append(f"    {lengths}")
        if a["state"] not in ("QUEUED", "DISPATCHING", "CANCELLED"):
            out.append(_gpu_line(a["gpu_summary"] or {}, a.get("host") or ""))
        out.extend(event_lines(a) + series_lines(a))
        if a.get("provenance"):
            from tunelab.analysis.report.provenance import provenance_lines  # only when shown

            out.extend(f"    {line}" for line in provenance_lines(a["provenance"]))
        if a.get("mlflow_run_url"):
            out.append(f"    MLflow: {a['mlflow_run_url']}")
    return "\n".join(out) + "\n"
