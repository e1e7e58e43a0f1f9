"""What a scrape costs: tunelab's /metrics beside nvidia_gpu_exporter's method and nvitop-exporter.

Run on a GPU host, all three in one run, one after the other on an otherwise idle machine:

    python benchmarks/scrape_cost.py --out-dir benchmarks/results

- **tunelab**: a real ``tunelab-agent serve --metrics-listen`` process; N sequential scrapes of
  /metrics, each on a new connection (as Prometheus does after an idle keep-alive), timed on the
  client; the agent's CPU time (user+system) across the burst; its idle CPU, and the sampler
  thread's own CPU (``tunelab_agent_sampler_cpu_seconds_total``) over an idle window at the
  default 1 s cadence.
- **nvidia-smi**: nvidia_gpu_exporter's default collection, one
  ``nvidia-smi --query-gpu=<every field --help-query-gpu lists> --format=csv`` per scrape (its
  AUTO field set); wall time and the child's CPU time (getrusage) per run.
- **nvitop-exporter** (PyPI): its own process and 1 s loop; same measurement as tunelab.
- **floor**: a static-file HTTP server (nginx, one worker, when installed; else Python's
  ``http.server``) serving tunelab's last body as a file: what a cached reply costs over
  loopback at best. ``tunelab / floor`` is reported for median and CPU.

tunelab and nvitop are each measured twice: a plain GET, and with the headers Prometheus sends
(``Accept`` preferring OpenMetrics, ``Accept-Encoding: gzip``); "bytes" is then on the wire.

"CPU s / 1,000 scrapes" is the exporter's whole CPU time during the burst (background work
included, which favours nobody) divided by the scrape count, times 1,000.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import http.client
import json
import os
import platform
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
# Fields nvidia-smi has answered on every recent driver, used only if the AUTO list is refused.
FALLBACK_SMI_FIELDS = [
    *("timestamp", "driver_version", "count", "name", "serial", "uuid", "pci.bus_id"),
    *("pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current"),
    *("pcie.link.width.max", "index", "persistence_mode", "vbios_version", "pstate"),
    *("clocks_throttle_reasons.active", "memory.total", "memory.used", "memory.free"),
    *("compute_mode", "compute_cap", "utilization.gpu", "utilization.memory"),
    *("ecc.mode.current", "ecc.errors.corrected.volatile.total"),
    *("ecc.errors.uncorrected.volatile.total", "temperature.gpu", "temperature.memory"),
    *("power.draw", "power.limit", "enforced.power.limit", "power.default_limit"),
    *("clocks.current.graphics", "clocks.current.sm", "clocks.current.memory"),
    *("clocks.max.sm", "clocks.max.memory"),
]


@dataclass
class Result:
    method: str
    scrapes: int = 0
    median_ms: float = 0.0
    p99_ms: float = 0.0
    mean_ms: float = 0.0
    cpu_s_per_1000: float = 0.0
    idle_cpu_percent: float | None = None  # the exporter's own process while nobody scrapes
    sampler_cpu_percent: float | None = None  # tunelab's sampler thread alone
    samples_per_scrape: int = 0
    bytes_per_scrape: int = 0
    notes: list[str] = field(default_factory=list)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


PROMETHEUS_HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0;q=0.5,"
    "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}


def get(
    port: int, path: str, timeout: float = 10.0, headers: dict[str, str] | None = None
) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"GET {path}: HTTP {response.status}")
        return body
    finally:
        conn.close()


def cpu_seconds(proc: psutil.Process) -> float:
    """The process's CPU time, its reaped children's, and its live children's (nginx's worker)."""
    times = proc.cpu_times()
    total = times.user + times.system + times.children_user + times.children_system
    for child in proc.children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            child_times = child.cpu_times()
            total += child_times.user + child_times.system
    return float(total)


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def sample_value(text: str, name: str) -> float | None:
    match = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else None


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (OSError, RuntimeError, http.client.HTTPException):
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{what} not ready after {timeout}s")


def measure_http(
    result: Result,
    proc: psutil.Process,
    port: int,
    path: str,
    scrapes: int,
    idle: float,
    headers: dict[str, str] | None = None,
) -> str:
    """Idle CPU over ``idle`` seconds, then ``scrapes`` timed GETs; returns the last body."""
    if idle > 0:
        before = cpu_seconds(proc)
        time.sleep(idle)
        result.idle_cpu_percent = 100 * (cpu_seconds(proc) - before) / idle
    latencies: list[float] = []
    body = b""
    cpu_before = cpu_seconds(proc)
    for _ in range(scrapes):
        start = time.perf_counter()
        body = get(port, path, headers=headers)
        latencies.append(time.perf_counter() - start)
    cpu = cpu_seconds(proc) - cpu_before
    wire = len(body)
    if body[:2] == b"\x1f\x8b":
        body = gzip.decompress(body)
    text = body.decode()
    result.scrapes = scrapes
    result.median_ms = 1000 * statistics.median(latencies)
    result.p99_ms = 1000 * percentile(latencies, 99)
    result.mean_ms = 1000 * statistics.fmean(latencies)
    result.cpu_s_per_1000 = 1000 * cpu / scrapes
    result.bytes_per_scrape = wire
    result.samples_per_scrape = sum(
        1 for line in text.splitlines() if line and not line.startswith("#")
    )
    return text


def run_tunelab(args: argparse.Namespace, workdir: Path) -> tuple[list[Result], str]:
    """Plain GETs, then Prometheus' headers; also returns the last plain body (for the floor)."""
    result = Result("tunelab /metrics")
    negotiated = Result("tunelab /metrics, Prometheus headers (OpenMetrics, gzip)")
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "tunelab.agent",
        "serve",
        "--listen",
        f"127.0.0.1:{free_port()}",
        "--state-dir",
        str(workdir / "agent"),
        "--metrics-listen",
        f"127.0.0.1:{port}",
    ]
    if args.nvml_snapshot:
        argv += ["--nvml-snapshot", str(args.nvml_snapshot)]
        result.notes.append(f"NVML answered from {args.nvml_snapshot.name} (not a live GPU)")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), str(REPO / "proto"), *filter(None, [env.get("PYTHONPATH")])]
    )
    log = (workdir / "agent.log").open("wb")
    child = subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(
            lambda: b'_sample_age_seconds{source="host",cadence="slow"}' in get(port, "/metrics"),
            60,
            "tunelab agent",
        )
        time.sleep(2.0)
        proc = psutil.Process(child.pid)
        first = get(port, "/metrics").decode()
        sampler_before = sample_value(first, "tunelab_agent_sampler_cpu_seconds_total") or 0.0
        text = measure_http(result, proc, port, "/metrics", args.scrapes, args.idle_seconds)
        # the sampler's CPU over the idle window and the burst together, at the 1 s cadence
        sampler_after = sample_value(text, "tunelab_agent_sampler_cpu_seconds_total") or 0.0
        window = args.idle_seconds + result.mean_ms * args.scrapes / 1000
        result.sampler_cpu_percent = 100 * (sampler_after - sampler_before) / window
        durations = re.findall(
            r'^tunelab_agent_sampler_duration_seconds\{source="(\w+)",cadence="(\w+)"\} (\S+)$',
            text,
            re.MULTILINE,
        )
        result.notes.append(
            "last sampler cycle (wall): "
            + ", ".join(f"{src}/{cad} {1000 * float(v):.2f} ms" for src, cad, v in durations)
        )
        measure_http(negotiated, proc, port, "/metrics", args.scrapes, 0, PROMETHEUS_HEADERS)
    except TimeoutError:
        log.flush()
        print((workdir / "agent.log").read_text()[-3000:], file=sys.stderr)
        raise
    finally:
        child.terminate()
        child.wait(20)
        log.close()
    return [result, negotiated], text


def run_floor(args: argparse.Namespace, workdir: Path, body: str) -> Result:
    """A static file of tunelab's body served by nginx (one worker) or Python's http.server."""
    site = workdir / "floor"
    site.mkdir()
    (site / "metrics").write_text(body)
    port = free_port()
    nginx = shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx",) if Path(p).exists()), None
    )
    if nginx and not args.floor_python:
        result = Result("floor: nginx static file")
        conf = site / "nginx.conf"
        user = "user root; " if os.geteuid() == 0 else ""  # the worker reads the private tmp
        conf.write_text(
            f"{user}daemon off; worker_processes 1; error_log stderr; pid "
            f"{site}/nginx.pid;\nevents {{ worker_connections 256; }}\n"
            "http { access_log off; default_type text/plain; "
            f"client_body_temp_path {site}; proxy_temp_path {site}; "
            f"fastcgi_temp_path {site}; uwsgi_temp_path {site}; scgi_temp_path {site}; "
            f"server {{ listen 127.0.0.1:{port}; root {site}; }} }}\n"
        )
        argv = [nginx, "-c", str(conf), "-p", str(site)]
    else:
        result = Result("floor: python http.server static file")
        argv = [sys.executable, "-m", "http.server", "-b", "127.0.0.1", "-d", str(site), str(port)]
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: bool(get(port, "/metrics")), 30, result.method)
        proc = psutil.Process(child.pid)
        measure_http(result, proc, port, "/metrics", args.scrapes, 0)
    finally:
        child.terminate()
        child.wait(20)
    return result


def smi_fields(smi: str) -> list[str]:
    """nvidia_gpu_exporter's AUTO set: every field that ``--help-query-gpu`` documents."""
    text = subprocess.run(
        [smi, "--help-query-gpu"], capture_output=True, text=True, check=True
    ).stdout
    return re.findall(r'\n\s*\n^"([^"]+)"', text, re.MULTILINE)


def run_smi(args: argparse.Namespace) -> Result:
    result = Result("nvidia-smi --query-gpu (nvidia_gpu_exporter)")
    smi = shutil.which("nvidia-smi")
    if smi is None:
        result.notes.append("nvidia-smi not found: not measured")
        return result
    fields = smi_fields(smi)
    query = [smi, f"--query-gpu={','.join(fields)}", "--format=csv"]
    if subprocess.run(query, capture_output=True).returncode != 0:
        fields = FALLBACK_SMI_FIELDS
        query = [smi, f"--query-gpu={','.join(fields)}", "--format=csv"]
        result.notes.append("AUTO field list refused; used the fallback set")
    result.notes.append(f"{len(fields)} fields per query")
    latencies: list[float] = []
    cpu = 0.0
    out = b""
    for _ in range(args.smi_runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(query, capture_output=True, check=True)
        latencies.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu += (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        out = done.stdout
    result.scrapes = args.smi_runs
    result.median_ms = 1000 * statistics.median(latencies)
    result.p99_ms = 1000 * percentile(latencies, 99)
    result.mean_ms = 1000 * statistics.fmean(latencies)
    result.cpu_s_per_1000 = 1000 * cpu / args.smi_runs
    result.bytes_per_scrape = len(out)
    result.samples_per_scrape = len(fields) * max(0, len(out.splitlines()) - 1)
    return result


def run_nvitop(args: argparse.Namespace) -> list[Result]:
    result = Result("nvitop-exporter")
    negotiated = Result("nvitop-exporter, Prometheus headers (OpenMetrics, gzip)")
    try:
        result.notes.append(f"nvitop-exporter {metadata.version('nvitop-exporter')}")
    except metadata.PackageNotFoundError:
        result.notes.append("nvitop-exporter not installed: not measured")
        return [result, negotiated]
    port = free_port()
    argv = [sys.executable, "-m", "nvitop_exporter", "--bind-address", "127.0.0.1"]
    argv += ["--port", str(port), "--interval", "1.0"]
    child = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: b"gpu" in get(port, "/metrics"), 60, "nvitop-exporter")
        time.sleep(2.0)
        proc = psutil.Process(child.pid)
        measure_http(result, proc, port, "/metrics", args.scrapes, args.idle_seconds)
        measure_http(negotiated, proc, port, "/metrics", args.scrapes, 0, PROMETHEUS_HEADERS)
    except TimeoutError as exc:
        result.notes.append(str(exc))
    finally:
        child.terminate()
        child.wait(20)
    return [result, negotiated]


def environment() -> dict[str, str]:
    env = {
        "python": platform.python_version(),
        "cpus": str(os.cpu_count()),
        "kernel": platform.release(),
    }
    for package in ("nvidia-ml-py", "prometheus-client", "nvitop-exporter"):
        try:
            env[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            env[package] = "absent"
    smi = shutil.which("nvidia-smi")
    if smi:
        query = [smi, "--query-gpu=name,driver_version,persistence_mode", "--format=csv,noheader"]
        env["gpus"] = subprocess.run(query, capture_output=True, text=True).stdout.strip()
    return env


def table(results: list[Result], env: dict[str, str]) -> str:
    lines = [
        "# Scrape cost",
        "",
        "Environment: " + ", ".join(f"{k} {v}" for k, v in env.items()),
        "",
        (
            "| method | scrapes | median ms | p99 ms | CPU s / 1,000 scrapes "
            "| idle CPU % of a core | sampler CPU % of a core | samples | bytes |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        if not r.scrapes:
            lines.append(f"| {r.method} | not measured |  |  |  |  |  |  |  |")
            continue
        idle = "" if r.idle_cpu_percent is None else f"{r.idle_cpu_percent:.2f}"
        sampler = "" if r.sampler_cpu_percent is None else f"{r.sampler_cpu_percent:.3f}"
        lines.append(
            f"| {r.method} | {r.scrapes} | {r.median_ms:.2f} | {r.p99_ms:.2f} "
            f"| {r.cpu_s_per_1000:.3f} | {idle} | {sampler} "
            f"| {r.samples_per_scrape} | {r.bytes_per_scrape} |"
        )
    by = {r.method: r for r in results if r.scrapes}
    tunelab = by.get("tunelab /metrics")
    lines.append("")
    for name, other in sorted(by.items()):
        if tunelab is None or other is tunelab or tunelab.cpu_s_per_1000 <= 0:
            continue
        lines.append(
            f"- {name} / tunelab: median {other.median_ms / tunelab.median_ms:.2f}x, "
            f"CPU per scrape {other.cpu_s_per_1000 / tunelab.cpu_s_per_1000:.2f}x"
        )
    lines += ["", "Notes:"]
    lines += [f"- {r.method}: {note}" for r in results for note in r.notes]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--scrapes", type=int, default=1000)
    parser.add_argument("--smi-runs", type=int, default=200)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--nvml-snapshot", type=Path, help="dry run without a GPU")
    parser.add_argument("--skip-smi", action="store_true")
    parser.add_argument("--skip-nvitop", action="store_true")
    parser.add_argument("--skip-floor", action="store_true")
    parser.add_argument("--floor-python", action="store_true", help="http.server even if nginx")
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    env = environment()
    with tempfile.TemporaryDirectory(prefix="scrape-cost-") as tmp:
        results, body = run_tunelab(args, Path(tmp))
        if not args.skip_floor:
            results.append(run_floor(args, Path(tmp), body))
        results.append(run_smi(args) if not args.skip_smi else Result("nvidia-smi (skipped)"))
        if not args.skip_nvitop:
            results += run_nvitop(args)
    text = table(results, env)
    (args.out_dir / "scrape_cost.md").write_text(text)
    (args.out_dir / "scrape_cost.json").write_text(
        json.dumps({"environment": env, "results": [asdict(r) for r in results]}, indent=1) + "\n"
    )
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
