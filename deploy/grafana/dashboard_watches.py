"""Watches: each watch's history against its baseline (docs/watch.md).

The controller exports, per watch and metric, the latest occurrence's change against the
baseline and its interval; over time those gauges step from one occurrence to the next, so the
panel's line is the watch's history. The baseline is zero change; the band around it is the
watch's margin (a change inside it is "no change"). The interval bounds are dashed: an
interval wholly outside the band is, roughly, what the judge calls a change.
"""

from __future__ import annotations

from grafana_model import JSON, Panel, Query, Row, dashboard, dashed, query_variable
from panels import stat, state_timeline, timeseries

SEL = 'watch=~"$watch", metric=~"$metric"'
LEGEND = "{{watch}} {{metric}}"
BAND_UPPER = "baseline +margin"
BAND_LOWER = "baseline \u2212margin"
GREY = {"mode": "fixed", "fixedColor": "text"}


def band() -> list[JSON]:
    """The margin drawn as a grey band around zero: fill from the upper edge to the lower."""
    edge: list[JSON] = [
        {"id": "color", "value": GREY},
        {"id": "custom.lineWidth", "value": 0},
    ]
    return [
        {
            "matcher": {"id": "byFrameRefID", "options": "D"},
            "properties": [
                *edge,
                {"id": "custom.fillBelowTo", "value": BAND_LOWER},
                {"id": "custom.fillOpacity", "value": 15},
            ],
        },
        {
            "matcher": {"id": "byFrameRefID", "options": "E"},
            "properties": [*edge, {"id": "custom.fillOpacity", "value": 0}],
        },
    ]


def build() -> JSON:
    variables = [
        query_variable("watch", "Watch", "tunelab_watch_period_seconds", "watch"),
        query_variable("metric", "Metric", 'tunelab_watch_verdict{watch=~"$watch"}', "metric"),
    ]
    history = timeseries(
        "Change against the baseline",
        "Each metric's change against the watch's baseline, occurrence after occurrence, "
        "with its interval (dashed); the grey band is the watch's margin around the baseline.",
        Query(f"tunelab_watch_change_ratio{{{SEL}}}", LEGEND),
        Query(f"tunelab_watch_change_lower_ratio{{{SEL}}}", f"{LEGEND} lower"),
        Query(f"tunelab_watch_change_upper_ratio{{{SEL}}}", f"{LEGEND} upper"),
        Query('tunelab_watch_margin_ratio{watch=~"$watch"}', BAND_UPPER),
        Query('-tunelab_watch_margin_ratio{watch=~"$watch"}', BAND_LOWER),
        unit="percentunit",
        overrides=[dashed("B"), dashed("C"), *band()],
        width=24,
        height=10,
    )
    history.defaults["custom"].pop("axisSoftMin")  # a change is negative as often as not
    history.defaults["custom"]["showPoints"] = "always"
    items: list[Panel | Row] = [
        Row("History"),
        history,
        Row("Now"),
        state_timeline(
            "Regressions",
            "While a metric's latest verdict is a regression (what TunelabWatchRegression "
            "alerts on).",
            Query(f'tunelab_watch_verdict{{{SEL}, verdict="regression"}}', LEGEND),
            width=12,
        ),
        stat(
            "Latest verdict",
            "Each metric's latest verdict against the baseline.",
            Query(
                f"tunelab_watch_verdict{{{SEL}}} == 1", f"{LEGEND}: {{{{verdict}}}}", instant=True
            ),
            width=6,
        ),
        stat(
            "Since the last occurrence",
            "Time since each watch's latest occurrence was queued; over two periods fires "
            "TunelabWatchStopped.",
            Query(
                'time() - tunelab_watch_last_occurrence_timestamp_seconds{watch=~"$watch"}',
                "{{watch}}",
                instant=True,
            ),
            unit="s",
            width=6,
        ),
    ]
    return dashboard(
        "tunelab-watches",
        "tunelab / Watches",
        "Regressions caught over time: each watch's change against its baseline with the "
        "margin's band, its latest verdicts, and when it last ran.",
        variables,
        items,
        time_from="now-7d",
        refresh="1m",
    )
