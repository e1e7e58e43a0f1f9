"""The report's timeline section: aligned panels per attempt with the events marked, the
overlay for two attempts, MLflow's step metrics, and a bad document reported, not drawn."""

from __future__ import annotations

import re

from tests.unit.controller.test_timeline_events import N, between, timeline
from tunelab.analysis.mlflow.timeline_metrics import MAX_VALUES, timeline_metrics
from tunelab.analysis.timeline.panels import timeline_section


def test_one_attempt_has_four_aligned_panels_with_its_event_marked() -> None:
    doc = timeline({"engine.preemptions": between(12, 20, 5.0, 0.0)})
    html = timeline_section({"a-1": doc}, lambda a: f"exp ({a})")
    assert html.count("<svg") == 4  # client, client and engine, KV cache and GPUs, host
    assert len(set(re.findall(r'viewBox="0 0 (\d+) ', html))) == 1  # one x-axis width
    assert html.count('class="datum event"') == 4  # the one event, on every panel
    assert "kv_cache_full</b>: the engine preempted 40 requests" in html
    assert 'data-chart="timeline overlay"' not in html  # one attempt: nothing to overlay
    assert "exp (a-1)" in html


def test_two_attempts_are_overlaid_and_a_bad_document_is_named() -> None:
    html = timeline_section({"a-1": timeline(), "a-2": timeline(), "a-3": {"timeline": 9}})
    assert 'data-chart="timeline overlay"' in html
    assert "a-3: timeline not read (timeline: expected version 1)" in html


def test_step_metrics_for_mlflow_are_bounded() -> None:
    metrics = timeline_metrics(timeline())
    steps = {s for k, _, s in metrics if k == "timeline.t_s"}
    assert steps == set(range(N))
    assert ("timeline.gpu0.power_watts", 450.0, 3) in metrics
    big = timeline()
    big.update(windows=10_000, series={f"s{i}": [1.0] * 10_000 for i in range(30)})
    assert len(timeline_metrics(big)) <= MAX_VALUES
    assert timeline_metrics(None) == []
