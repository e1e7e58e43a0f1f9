"""Host: one GPU host as the agent sees it (GPUs, CPU, inference servers, last audit)."""

from __future__ import annotations

from grafana_model import (
    JSON,
    Panel,
    Query,
    Row,
    color_by_name,
    dashboard,
    dashed,
    query_variable,
    thresholds,
)
from panels import bargauge, stat, state_timeline, table, timeseries

H = 'host=~"$host"'
HG = 'host=~"$host", gpu=~"$gpu"'
GPU_LEGEND = "{{host}} GPU {{gpu}}"
STATUS_COLORS = {
    "PASS": "green",
    "WARN": "orange",
    "FAIL": "red",
    "ERROR": "purple",
    "SKIP": "text",
}


def build() -> JSON:
    variables = [
        query_variable("host", "Host", "tunelab_agent_info", "host"),
        query_variable("gpu", "GPU", f"tunelab_gpu_info{{{H}}}", "gpu"),
    ]
    items: list[Panel | Row] = [
        Row("GPUs"),
        timeseries(
            "GPU power against its limit",
            "Board power per GPU (solid) and the enforced power limit (dashed).",
            Query(f"tunelab_gpu_power_watts{{{HG}}}", GPU_LEGEND),
            Query(f"tunelab_gpu_power_limit_watts{{{HG}}}", f"{GPU_LEGEND} limit"),
            unit="watt",
            overrides=[dashed("B")],
        ),
        timeseries(
            "GPU power, share of limit",
            "Power over the enforced limit (recording rule); near 100 % the GPU is power-capped.",
            Query(f"gpu:tunelab_gpu_power_watts:ratio_of_limit{{{HG}}}", GPU_LEGEND),
            unit="percentunit",
            defaults={"max": 1},
            threshold_lines=thresholds(("green", None), ("orange", 0.9), ("red", 0.98)),
        ),
        timeseries(
            "GPU utilisation",
            "Share of time a kernel ran on the GPU (NVML utilization).",
            Query(f"tunelab_gpu_utilization_ratio{{{HG}}}", GPU_LEGEND),
            unit="percentunit",
            width=8,
            defaults={"max": 1},
        ),
        timeseries(
            "GPU memory",
            "Framebuffer in use per GPU (solid) and its size (dashed).",
            Query(f"tunelab_gpu_memory_used_bytes{{{HG}}}", GPU_LEGEND),
            Query(f"tunelab_gpu_memory_total_bytes{{{HG}}}", f"{GPU_LEGEND} total"),
            unit="bytes",
            width=8,
            overrides=[dashed("B")],
        ),
        timeseries(
            "SM clock",
            "Current SM clock per GPU (solid) and its maximum (dashed): a gap is throttling.",
            Query(f"tunelab_gpu_sm_clock_hertz{{{HG}}}", GPU_LEGEND),
            Query(f"tunelab_gpu_sm_clock_max_hertz{{{HG}}}", f"{GPU_LEGEND} max"),
            unit="hertz",
            width=8,
            overrides=[dashed("B")],
        ),
        state_timeline(
            "Clock events now (throttle reasons)",
            "A row per GPU and reason while NVML reports clocks held down for it, sampled every "
            "second (gpu_idle left out). No rows: nothing held the clocks down.",
            Query(
                f'tunelab_gpu_clock_event_active{{{HG}, reason!="gpu_idle"}} == 1',
                "{{host}} GPU {{gpu}} {{reason}}",
            ),
            width=8,
        ),
        timeseries(
            "Time held down, by reason",
            "Share of time clocks were held down per reason, from NVML's cumulative counters "
            "(read every 15 s, hence the 30 s minimum step).",
            Query(
                f"sum by (host, gpu, reason) "
                f"(rate(tunelab_gpu_clock_event_seconds_total{{{HG}}}[$__rate_interval]))",
                "{{host}} GPU {{gpu}} {{reason}}",
            ),
            unit="percentunit",
            width=8,
            interval="30s",
        ),
        timeseries(
            "GPU temperature",
            "GPU core temperature.",
            Query(f"tunelab_gpu_temperature_celsius{{{HG}}}", GPU_LEGEND),
            unit="celsius",
            width=8,
        ),
        Row("CPU and memory"),
        timeseries(
            "CPU",
            "CPU busy share over the agent's last 1 s sample (all CPUs), and the 1-minute load "
            "average per online CPU.",
            Query(f"tunelab_host_cpu_utilization_ratio{{{H}}}", "{{host}} busy"),
            Query(
                f"tunelab_host_load1{{{H}}} / tunelab_host_cpus_online{{{H}}}",
                "{{host}} load per CPU",
            ),
            unit="percentunit",
        ),
        timeseries(
            "Host memory in use",
            "1 - MemAvailable / MemTotal.",
            Query(
                f"1 - tunelab_host_memory_available_bytes{{{H}}} "
                f"/ tunelab_host_memory_total_bytes{{{H}}}",
                "{{host}}",
            ),
            unit="percentunit",
            defaults={"max": 1},
        ),
        Row("Inference servers"),
        table(
            "Servers now",
            "Every server the agent knows, with its current state (finished ones stay 5 min).",
            Query(f"tunelab_server_state{{{H}}} == 1", instant=True, table=True),
            hide=("Time", "Value", "__name__", "instance", "job"),
            width=8,
        ),
        timeseries(
            "Servers by state",
            "How many servers are in each lifecycle state (PENDING ... READY ... STOPPED).",
            Query(f"count by (state) (tunelab_server_state{{{H}}} == 1)", "{{state}}"),
            stacked_bars=True,
            width=8,
        ),
        timeseries(
            "Checkpoint load progress",
            "Shards loaded out of total, parsed from each server's log while it loads.",
            Query(f"tunelab_server_load_progress_ratio{{{H}}}", "{{host}} {{server}}"),
            unit="percentunit",
            width=8,
            defaults={"max": 1},
        ),
        bargauge(
            "Time to READY",
            "Launch to READY per server (model load, warm-up, first 2xx on the probe).",
            Query(f"tunelab_server_time_to_ready_seconds{{{H}}}", "{{host}} {{server}}"),
            unit="s",
        ),
        table(
            "GPU identity",
            "Name, PCI bus id, driver and CUDA versions, VBIOS of each GPU (tunelab_gpu_info).",
            Query(f"tunelab_gpu_info{{{H}}}", instant=True, table=True),
            hide=("Time", "Value", "__name__", "instance", "job"),
        ),
        Row("Audit"),
        stat(
            "Checks by status",
            "Checks in the last audit (at agent start or `tunelab audit HOST`), per status.",
            Query(f"sum by (status) (tunelab_audit_checks{{{H}}})", "{{status}}"),
            width=12,
            overrides=color_by_name(STATUS_COLORS),
        ),
        stat(
            "Since the last audit",
            "Time since the last audit report was made.",
            Query(f"time() - tunelab_audit_last_run_timestamp_seconds{{{H}}}", "{{host}}"),
            unit="s",
            width=12,
        ),
        table(
            "Audit checks",
            "Each check's status in the last audit, FAIL and ERROR first; "
            "`tunelab audit HOST` shows evidence and the fix.",
            Query(f"tunelab_audit_check_status{{{H}}} == 1", instant=True, table=True),
            hide=("Time", "Value", "__name__", "instance", "job"),
            transformations=[{"id": "sortBy", "options": {"sort": [{"field": "status"}]}}],
            width=24,
            height=10,
        ),
    ]
    return dashboard(
        "tunelab-host",
        "tunelab / Host",
        "One GPU host: power against limit, utilisation, memory, clocks, throttling, "
        "temperature; CPU; inference servers; last audit.",
        variables,
        items,
    )
