"""A watch's series on the controller's /metrics, read from the store at scrape time (as the
controller's other collectors, two rows a watch whatever its history): per watch and metric,
the *state* (``tunelab.analysis.watch.state``: a regression holds until an occurrence shows it
gone, an undecided one never clears it) and the latest verdict (enum-like gauges: 1 on the one
it has, 0 on the others), the change ratio and its interval bounds, the newest change point's
step and the smallest change the watch sees at its noise; per watch, when its last occurrence
started, when the next is due, its period, its margin (the band around the baseline that
deploy/grafana's watch panel draws) and whether it is active. Labels are the watch's name, the
metric and the verdict or state: a lab's watches x metrics x 5, low cardinality (at most
``MAX_WATCHES`` watches of 16 metrics each, names the spec's checks bound).
deploy/prometheus/alerts/watches.yml alerts on the regression state and on a watch whose next
occurrence is overdue."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tunelab.analysis.watch.state import STATES as STATES_SPOKEN
from tunelab.controller.store.base import Store
from tunelab.controller.store.watch_models import WATCH_ACTIVE

VERDICTS = ("regression", "improvement", "no_change", "undecided", "baseline")
STATES = tuple(verdict.replace(" ", "_") for verdict in STATES_SPOKEN)


def verdict_label(verdict: str) -> str:
    return verdict.replace(" ", "_")


class WatchCollector(Collector):
    def __init__(self, store: Store) -> None:
        self._store = store

    def describe(self) -> list[GaugeMetricFamily]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        by_metric = ["watch", "metric"]
        verdict = GaugeMetricFamily(
            "tunelab_watch_verdict",
            "A watch's latest verdict per metric: 1 on the verdict it has, 0 on the others.",
            labels=[*by_metric, "verdict"],
        )
        ratio = GaugeMetricFamily(
            "tunelab_watch_change_ratio",
            "A metric's latest change against the watch's baseline (-0.18: 18 % lower).",
            labels=by_metric,
        )
        lower = GaugeMetricFamily(
            "tunelab_watch_change_lower_ratio",
            "The lower bound of that change's interval.",
            labels=by_metric,
        )
        upper = GaugeMetricFamily(
            "tunelab_watch_change_upper_ratio",
            "The upper bound of that change's interval.",
            labels=by_metric,
        )
        state = GaugeMetricFamily(
            "tunelab_watch_state",
            "A watch metric's state: 1 on the state it is in, 0 on the others (a regression "
            "holds until an occurrence shows no change or an improvement).",
            labels=[*by_metric, "state"],
        )
        point = GaugeMetricFamily(
            "tunelab_watch_change_point_ratio",
            "The newest change point's step in the watch's recent history (-0.24: 24 % lower).",
            labels=by_metric,
        )
        seen = GaugeMetricFamily(
            "tunelab_watch_detectable_ratio",
            "The smallest change the latest occurrence could see at its noise (its interval's "
            "half-width).",
            labels=by_metric,
        )
        due = GaugeMetricFamily(
            "tunelab_watch_next_due_timestamp_seconds",
            "When the watch's next occurrence is due (a cron line's next slot).",
            labels=["watch"],
        )
        last = GaugeMetricFamily(
            "tunelab_watch_last_occurrence_timestamp_seconds",
            "When the watch's latest occurrence was queued.",
            labels=["watch"],
        )
        period = GaugeMetricFamily(
            "tunelab_watch_period_seconds",
            "Time between a watch's occurrences (a cron line's smallest gap).",
            labels=["watch"],
        )
        active = GaugeMetricFamily(
            "tunelab_watch_active", "1 while the watch runs, 0 while paused.", labels=["watch"]
        )
        margin = GaugeMetricFamily(
            "tunelab_watch_margin_ratio",
            "A change smaller than this is no change (0.02: 2 %): the baseline's band.",
            labels=["watch"],
        )
        for watch in self._store.list_watches():
            period.add_metric([watch.name], float(watch.spec["period"]))
            margin.add_metric([watch.name], float(watch.spec["margin"]))
            active.add_metric([watch.name], 1.0 if watch.state == WATCH_ACTIVE else 0.0)
            due.add_metric([watch.name], watch.next_due)
            latest = self._store.latest_occurrences(watch.name, 2)
            if latest:
                last.add_metric([watch.name], latest[0].started_at)
            judged = next((o for o in latest if o.verdict), None)
            if judged is None or judged.verdict is None:
                continue
            rows = {str(r.get("metric")): r for r in judged.verdict.get("metrics") or []}
            states = judged.verdict.get("state") or {}
            points = judged.verdict.get("change_points") or []
            for metric in watch.spec["metrics"]:
                now = verdict_label(str((states.get(metric) or {}).get("state", "undecided")))
                for v in STATES:
                    state.add_metric([watch.name, metric, v], 1.0 if v == now else 0.0)
                newest = [p for p in points if p.get("metric") == metric]
                if newest:
                    step = max(newest, key=lambda p: int(p["occurrence"]))["change_pct"]
                    point.add_metric([watch.name, metric], float(step) / 100.0)
                detectable = (rows.get(metric) or {}).get("detectable_pct")
                if isinstance(detectable, int | float):
                    seen.add_metric([watch.name, metric], detectable / 100.0)
                row = rows.get(metric)
                shown = verdict_label(str(row["verdict"] if row else judged.verdict["verdict"]))
                for v in VERDICTS:
                    verdict.add_metric([watch.name, metric, v], 1.0 if v == shown else 0.0)
                change = row.get("change_pct") if row else None
                if isinstance(change, int | float):
                    ratio.add_metric([watch.name, metric], change / 100.0)
                bounds = row.get("interval") if row else None
                if isinstance(bounds, list | tuple) and len(bounds) == 2:
                    lower.add_metric([watch.name, metric], float(bounds[0]) / 100.0)
                    upper.add_metric([watch.name, metric], float(bounds[1]) / 100.0)
        yield from (state, verdict, ratio, lower, upper, point, seen, last, due, period, active)
        yield margin
