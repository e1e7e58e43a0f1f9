"""Experiments: finished results from the controller, compared across experiments.

The controller exports each finished experiment's sweep as gauges labelled ``experiment`` (its
name), ``id``, ``host`` and ``concurrency`` (the request rate for open-loop points); they stay
until the controller's result retention drops them. Panels read them at the dashboard's end
time, so the time range only needs to reach back to when Prometheus last saw them.
"""

from __future__ import annotations

from grafana_model import JSON, Panel, Query, Row, color_by_name, dashboard, query_variable
from panels import bargauge, matrix, stat, table

SEL = 'experiment=~"$experiment", host=~"$host"'
POINT_LEGEND = "{{experiment}} c={{concurrency}}"
STATE_COLORS = {"SUCCEEDED": "green", "RUNNING": "blue", "QUEUED": "text", "FAILED": "red"}


def per_point(metric: str) -> Query:
    """One instant row per (experiment run, concurrency), the row named "<name> · <id>"."""
    labelled = f'label_join({metric}{{{SEL}}}, "experiment_id", " · ", "experiment", "id")'
    return Query(labelled, instant=True, table=True)


def point_table(title: str, description: str, metric: str, unit: str) -> Panel:
    return table(
        title,
        description,
        per_point(metric),
        transformations=matrix("experiment_id", "concurrency"),
        unit=unit,
        width=12,
    )


def build() -> JSON:
    variables = [
        query_variable("host", "Host", "tunelab_experiment_output_tokens_per_second", "host"),
        query_variable(
            "experiment",
            "Experiment",
            'tunelab_experiment_output_tokens_per_second{host=~"$host"}',
            "experiment",
        ),
    ]
    items: list[Panel | Row] = [
        Row("Throughput"),
        bargauge(
            "Output tokens/s by concurrency",
            "Output throughput of each sweep point of each experiment.",
            Query(
                f"tunelab_experiment_output_tokens_per_second{{{SEL}}}",
                POINT_LEGEND,
                instant=True,
            ),
            unit="suffix: tok/s",
            height=10,
        ),
        point_table(
            "Output tokens/s: experiments x concurrency",
            "The same figures side by side: a row per experiment (name · id), a column per "
            "concurrency.",
            "tunelab_experiment_output_tokens_per_second",
            "suffix: tok/s",
        ),
        bargauge(
            "Best output tokens/s",
            "Each experiment's highest throughput over its sweep points (recording rule).",
            Query(
                f"experiment:tunelab_experiment_output_tokens_per_second:max{{{SEL}}}",
                "{{experiment}} on {{host}}",
                instant=True,
            ),
            unit="suffix: tok/s",
        ),
        bargauge(
            "Requests/s by concurrency",
            "Request throughput of each sweep point.",
            Query(f"tunelab_experiment_requests_per_second{{{SEL}}}", POINT_LEGEND, instant=True),
            unit="reqps",
        ),
        Row("Latency"),
        point_table(
            "TTFT (median) by concurrency",
            "Median time to first token, per experiment and concurrency.",
            "tunelab_experiment_ttft_median_seconds",
            "s",
        ),
        point_table(
            "TPOT (median) by concurrency",
            "Median time per output token after the first, per experiment and concurrency.",
            "tunelab_experiment_tpot_median_seconds",
            "s",
        ),
        Row("Energy"),
        bargauge(
            "Output tokens per joule",
            "Output tokens of the whole sweep over the GPU energy used while benchmarking "
            "(energy counter deltas the controller scraped from the agent).",
            Query(
                f"tunelab_experiment_output_tokens_per_joule{{{SEL}}}",
                "{{experiment}} on {{host}}",
                instant=True,
            ),
            unit="suffix: tok/J",
        ),
        bargauge(
            "Mean GPU power",
            "Mean power of the host's GPUs together while the experiment ran.",
            Query(
                f"tunelab_experiment_gpu_power_watts{{{SEL}}}",
                "{{experiment}} on {{host}}",
                instant=True,
            ),
            unit="watt",
        ),
        Row("Queue"),
        stat(
            "Experiments by state",
            "The controller's queue now.",
            Query("tunelab_controller_experiments", "{{state}}", instant=True),
            width=8,
            overrides=color_by_name(STATE_COLORS),
        ),
        stat(
            "Hosts by state",
            "Registered GPU hosts by state (READY, BUSY, UNREACHABLE, QUARANTINED, ...).",
            Query("tunelab_controller_hosts", "{{state}}", instant=True),
            width=8,
        ),
        stat(
            "Attempts finished, by outcome",
            "Attempts since the controller's database was created (LOST ones were retried).",
            Query("tunelab_controller_attempts_total", "{{outcome}}", instant=True),
            width=8,
        ),
        table(
            "Finished experiments",
            "When each experiment's result was recorded, newest first.",
            Query(
                f"tunelab_experiment_finished_timestamp_seconds{{{SEL}}} * 1000",
                instant=True,
                table=True,
            ),
            hide=("Time", "__name__", "instance", "job"),
            rename={"Value": "finished"},
            transformations=[
                {"id": "sortBy", "options": {"sort": [{"field": "Value", "desc": True}]}}
            ],
            unit="dateTimeAsIso",
            width=24,
        ),
    ]
    return dashboard(
        "tunelab-experiments",
        "tunelab / Experiments",
        "Finished experiments side by side: output tok/s by concurrency, TTFT and TPOT, tokens "
        "per joule, and the controller's queue.",
        variables,
        items,
        time_from="now-24h",
        refresh="1m",
    )
