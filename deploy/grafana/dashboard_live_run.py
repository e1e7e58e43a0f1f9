"""Live run: the benchmark streaming now, client-side and engine-side, with GPU power on the
same time axis.

``run`` is the agent's label for a benchmark run: the controller's attempt id
(``<experiment id>-a<n>``), which is also the name of the server the run started. Throughput
queries keep only runs that are streaming (``> 0``), so finished runs drop out of the legend.
Engine panels read vLLM's series or, where a host serves SGLang, SGLang's (``or``).
"""

from __future__ import annotations

from grafana_model import JSON, Panel, Query, Row, dashboard, dashed, query_variable, right_axis
from panels import table, timeseries

H = 'host=~"$host"'
HR = 'host=~"$host", run=~"$run"'
RATE = "[$__rate_interval]"


def engine(vllm: str, sglang: str, inner: str = "{selector}") -> str:
    """``sum by (host, server)`` of a vLLM series, or of its SGLang counterpart."""
    parts = [inner.format(selector=f"{name}{{{H}}}") for name in (vllm, sglang)]
    return " or ".join(f"sum by (host, server) ({part})" for part in parts)


def engine_quantile(q: float, vllm: str, sglang: str) -> str:
    parts = [
        f"sum by (host, server, le) (rate({name}_bucket{{{H}}}{RATE}))" for name in (vllm, sglang)
    ]
    return f"histogram_quantile({q}, {' or '.join(parts)})"


def build() -> JSON:
    variables = [
        query_variable("host", "Host", "tunelab_agent_info", "host"),
        query_variable("run", "Run", f"tunelab_bench_output_tokens_total{{{H}}}", "run"),
    ]
    tokens = f"sum by (host, run) (rate(tunelab_bench_output_tokens_total{{{HR}}}{RATE})) > 0"
    items: list[Panel | Row] = [
        timeseries(
            "Output tokens/s and GPU power",
            "Output tokens per second the load generator receives (left axis) and the host's "
            "GPU power, summed over its GPUs, against the summed limit (right axis, dashed).",
            Query(tokens, "{{run}} tok/s"),
            Query(f"sum by (host) (tunelab_gpu_power_watts{{{H}}})", "{{host}} GPU power"),
            Query(f"sum by (host) (tunelab_gpu_power_limit_watts{{{H}}})", "{{host}} limit"),
            unit="suffix: tok/s",
            width=24,
            height=10,
            overrides=[right_axis("B", "watt"), right_axis("C", "watt"), dashed("C")],
        ),
        timeseries(
            "Requests/s by outcome",
            "Requests the load generator finished per second (ok, error, timeout, ...).",
            Query(
                f"sum by (host, run, outcome) "
                f"(rate(tunelab_bench_requests_total{{{HR}}}{RATE})) > 0",
                "{{run}} {{outcome}}",
            ),
            unit="reqps",
            width=8,
        ),
        timeseries(
            "Sweep point: measured tok/s and concurrency",
            "The load generator's own output tok/s for the current sweep point (left) and its "
            "concurrency (right, 0 = open loop): each step is the next point.",
            Query(f"tunelab_bench_output_tokens_per_second{{{HR}}}", "{{run}} tok/s"),
            Query(f"tunelab_bench_concurrency{{{HR}}}", "{{run}} concurrency"),
            unit="suffix: tok/s",
            width=8,
            overrides=[right_axis("B", "short"), dashed("B")],
        ),
        timeseries(
            "Output tokens per joule",
            "Output tokens/s over the host's mean GPU power in the same minute (recording rule "
            "host_run:tunelab_bench_output_tokens_per_joule:rate1m).",
            Query(
                f"host_run:tunelab_bench_output_tokens_per_joule:rate1m{{{HR}}} > 0",
                "{{run}}",
            ),
            unit="suffix: tok/J",
            width=8,
        ),
        Row("GPUs during the run"),
        timeseries(
            "GPU power, share of limit",
            "Each GPU's power over its enforced limit (recording rule).",
            Query(f"gpu:tunelab_gpu_power_watts:ratio_of_limit{{{H}}}", "{{host}} GPU {{gpu}}"),
            unit="percentunit",
            width=8,
            defaults={"max": 1},
        ),
        timeseries(
            "GPU utilisation",
            "Share of time a kernel ran, per GPU.",
            Query(f"tunelab_gpu_utilization_ratio{{{H}}}", "{{host}} GPU {{gpu}}"),
            unit="percentunit",
            width=8,
            defaults={"max": 1},
        ),
        timeseries(
            "SM clock",
            "Current SM clock per GPU; drops under load mean throttling (see the Host dashboard).",
            Query(f"tunelab_gpu_sm_clock_hertz{{{H}}}", "{{host}} GPU {{gpu}}"),
            unit="hertz",
            width=8,
        ),
        Row("Engine (server side)"),
        timeseries(
            "Engine requests running and waiting",
            "Requests the engine is generating for (solid) and queued (dashed).",
            Query(
                engine("vllm_num_requests_running", "sglang_num_running_reqs"),
                "{{server}} running",
            ),
            Query(
                engine("vllm_num_requests_waiting", "sglang_num_queue_reqs"),
                "{{server}} waiting",
            ),
            width=8,
            overrides=[dashed("B")],
        ),
        timeseries(
            "Engine generation tokens/s",
            "Tokens the engine generated per second, by its own counter: compare with the "
            "client-side tok/s above.",
            Query(
                engine(
                    "vllm_generation_tokens_total",
                    "sglang_generation_tokens_total",
                    f"rate({{selector}}{RATE})",
                ),
                "{{server}}",
            ),
            unit="suffix: tok/s",
            width=8,
        ),
        timeseries(
            "Engine TTFT and inter-token latency (median)",
            "Server-side medians from the engine's histograms over the rate window.",
            Query(
                engine_quantile(
                    0.5, "vllm_time_to_first_token_seconds", "sglang_time_to_first_token_seconds"
                ),
                "{{server}} TTFT",
            ),
            Query(
                engine_quantile(
                    0.5, "vllm_inter_token_latency_seconds", "sglang_inter_token_latency_seconds"
                ),
                "{{server}} ITL",
            ),
            unit="s",
            width=8,
        ),
        table(
            "Runs in progress",
            "Attempts the controller has handed to agents: run id, experiment name and host.",
            Query(f"tunelab_controller_attempt_info{{{H}}}", instant=True, table=True),
            hide=("Time", "Value", "__name__", "instance", "job"),
            width=24,
            height=6,
        ),
    ]
    return dashboard(
        "tunelab-live-run",
        "tunelab / Live run",
        "The running benchmark: output tokens/s and requests/s with GPU power on the same "
        "time axis, the sweep point, tokens per joule, and the engine's own view.",
        variables,
        items,
        time_from="now-15m",
        refresh="5s",
    )
