"""Automatic MLflow export (controller setting ``mlflow_tracking_uri``): every finished attempt
becomes an MLflow run in the background, on a thread of its own, so the queue never waits for
MLflow. MLflow itself is the record of what was exported (runs carry their ``tunelab.key`` and
a digest, see ``tunelab.analysis.mlflow.plan``), so a crash between writing a run and noting it
cannot make a second copy; the store keeps one ``mlflow_export`` event per exported attempt with
the run's link, which ``tunelab show`` prints.

While MLflow is down the exporter retries, its pause doubling from the interval up to 5 min,
and says so once in the log; what finished meanwhile is exported when it is back.

Each judged watch occurrence becomes a run too (``export_watches``), found again by its key.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from tunelab.analysis.compare import compare
from tunelab.analysis.mlflow.plan import MLFLOW_EVENT, plans_for
from tunelab.analysis.mlflow.sink import Exported, MlflowError, MlflowSink, MlflowUnavailable
from tunelab.analysis.mlflow.watch_plan import occurrence_key, occurrence_plan
from tunelab.analysis.report import report_bytes
from tunelab.common.redaction import spec_redactor
from tunelab.controller.search.summary import search_document
from tunelab.controller.states import ExperimentState
from tunelab.controller.store import AttemptRow, ExperimentRow, Store
from tunelab.controller.wire import redacted_pairs

log = structlog.get_logger(__name__)
FINISHED = (ExperimentState.SUCCEEDED, ExperimentState.FAILED, ExperimentState.CANCELLED)
MAX_PAUSE = 300.0


def attempt_dict(row: AttemptRow) -> dict[str, Any]:
    """An attempt in the shape of ``tunelab show --json`` (what the CLI's export reads)."""
    return {
        "id": row.id,
        "number": row.number,
        "host": row.host,
        "state": row.state.value,
        "gpus": list(row.gpus),
        "message": row.message,
        "created_at": row.created_at or None,
        "finished_at": row.finished_at,
        "failure_reason": row.failure_reason or None,
        "failure_line": row.failure_line or None,
        "result": row.result,
        "gpu_summary": row.gpu_summary,
        "provenance": row.provenance,
    }


def group_export(
    pairs: Sequence[tuple[ExperimentRow, list[AttemptRow]]],
    report: Callable[[dict[str, Any]], bytes] | None = None,
) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]], dict[str, bytes]]:
    """The comparison document, attempts and report of one group, as the plans want them."""
    document = compare(redacted_pairs(pairs))  # as CompareRuns: no secret in the artifacts
    attempts = {}
    for experiment, rows in pairs:  # as `show` would print them: no secret leaves by value
        redact = spec_redactor(experiment.spec)
        for row in rows:
            redact.learn_document(row.provenance)
        attempts[experiment.id] = [redact.document(attempt_dict(a)) for a in rows]
    reports = {}
    if report is not None and pairs:
        reports[pairs[0][0].group] = report(document)
    return document, attempts, reports


class MlflowExporter:
    """The background thread; ``close`` stops it between two calls to MLflow."""

    def __init__(
        self,
        store: Store,
        sink: Callable[[], MlflowSink],
        interval: float = 30.0,
        report: Callable[[dict[str, Any]], bytes] | None = report_bytes,
    ) -> None:
        self._store = store
        self._make_sink = sink
        self._sink: MlflowSink | None = None
        self._interval = interval
        self._report = report
        self._stop = threading.Event()
        self._noted: set[str] = set()  # attempts whose event is in the store
        self._settled: set[str] = set()  # finished experiments whose attempts are all noted
        self._thread = threading.Thread(target=self._run, name="mlflow-export", daemon=True)
        self._down_since: str = ""
        self._watch_exported: set[str] = set()  # occurrences' keys in MLflow

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10.0)

    def _run(self) -> None:
        pause = self._interval
        while not self._stop.is_set():
            try:
                self.export_pending()
            except MlflowError as exc:
                if str(exc) != self._down_since:
                    log.warning("mlflow_export_failed", error=str(exc), retry_in_s=pause)
                    self._down_since = str(exc)
                self._sink = None if isinstance(exc, MlflowUnavailable) else self._sink
                self._stop.wait(pause)
                pause = min(pause * 2, MAX_PAUSE)
                continue
            if self._down_since:
                log.info("mlflow_export_resumed")
                self._down_since = ""
            pause = self._interval
            self._stop.wait(self._interval)

    def export_pending(self) -> int:
        """One pass: every group with a finished attempt not yet in MLflow; the number of runs
        written."""
        if self._sink is None:
            self._sink = self._make_sink()
        sink = self._sink
        known = sink.known_runs()
        finished = [
            e
            for e in self._store.list_experiments(FINISHED, limit=1_000_000)
            if e.id not in self._settled
        ]
        attempts = self._store.attempts_for_many([e.id for e in finished])
        missing: set[str] = set()
        for experiment in finished:
            for attempt in attempts.get(experiment.id, []):
                if attempt.id in self._noted or not attempt.state.is_terminal():
                    continue
                if f"attempt:{attempt.id}" in known:
                    self._note_one(attempt.id, sink.url(known[f"attempt:{attempt.id}"][0]))
                else:
                    missing.add(experiment.group)
        written = 0
        for group in sorted(missing):
            if self._stop.is_set():
                break
            written += self._export_group(sink, group)
        self._settled.update(
            e.id
            for e in finished
            if all(a.id in self._noted for a in attempts.get(e.id, []) if a.state.is_terminal())
        )
        return written + self.export_watches(sink)

    def export_watches(self, sink: MlflowSink) -> int:
        """Each judged watch occurrence not yet in MLflow as a run of its own
        (``tunelab.analysis.mlflow.watch_plan``); the number of runs written."""
        plans = []
        for watch in self._store.list_watches():
            for o in self._store.watch_occurrences(watch.name):
                key = occurrence_key(watch.name, o.number)
                if o.verdict is None or key in self._watch_exported:
                    continue
                plans.append(
                    occurrence_plan(
                        watch.name, o.number, o.group, o.started_at, o.judged_at, o.verdict
                    )
                )
        done = sink.write(plans) if plans else []
        self._watch_exported.update(d.key for d in done)  # a verdict is written once
        return sum(1 for d in done if d.written)

    def _export_group(self, sink: MlflowSink, group: str) -> int:
        members = self._store.list_experiments(limit=1_000_000, group=group)
        attempts = self._store.attempts_for_many([e.id for e in members])
        pairs = [(e, attempts.get(e.id, [])) for e in members]
        document, by_id, reports = group_export(pairs, self._report)
        for rows in by_id.values():  # the timelines as step metrics (timeline_metrics.py)
            for attempt in rows:
                attempt["timeline"] = self._store.timeline(str(attempt["id"]))
        search = self._store.get_search(group)
        searches = (
            {group: search_document(search, self._store.search_trials(group))}
            if search is not None
            else {}
        )
        benchmarks = {e.id: dict(e.spec.get("benchmark") or {}) for e in members}
        done = sink.write(plans_for(document, by_id, reports, searches, benchmarks))
        self._note(done)
        return sum(1 for d in done if d.written)

    def _note(self, done: Sequence[Exported]) -> None:
        for item in done:
            kind, _, ref = item.key.partition(":")
            if kind == "attempt":
                self._note_one(ref, item.url)

    def _note_one(self, attempt_id: str, url: str) -> None:
        """One ``mlflow_export`` event per attempt in the store, whatever restarts between."""
        if attempt_id in self._noted:
            return
        if not any(e["kind"] == MLFLOW_EVENT for e in self._store.events_for(attempt_id)):
            self._store.record_event(MLFLOW_EVENT, attempt_id, url)
        self._noted.add(attempt_id)
