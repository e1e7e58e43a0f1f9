"""The one place that talks to MLflow: writes ``RunPlan``s through MLflow's own client
(``mlflow-skinny``, the optional extra ``tunelab[mlflow]``), finding each run again by its
``tunelab.key`` tag so that exporting twice updates instead of duplicating.

Several writers may share one MLflow experiment (two controllers on one database, or a
by-hand ``tunelab export mlflow`` beside the controller's automatic one): a run missing from
this sink's cache is looked up by its key in MLflow before it is created, so a run another
writer made since is updated, not made again. An update logs its metrics with the time of the
export, so MLflow's latest value (the highest step, then the newest timestamp) is the new one;
a metric whose values did not change is not logged again.

Errors form one small tree: ``MlflowUnavailable`` (not installed, or the server cannot be
reached: try again later) and ``MlflowRejected`` (the server refused what we sent). A tracking
URI is shown only through ``safe_uri``: credentials in it never reach a log or a message.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from tunelab.analysis.mlflow.plan import DIGEST_TAG, KEY_TAG, RunPlan

T = TypeVar("T")

INSTALL_HINT = "MLflow export needs its client: pip install 'tunelab[mlflow]'"
BATCH = 900  # MLflow takes at most 1,000 metrics (100 params, 100 tags) per log_batch
SERIES_TAG = "tunelab.series"  # a hash of the run's metrics with several steps, as last logged


class MlflowError(RuntimeError):
    """An export that did not complete; the message never holds credentials."""


class MlflowUnavailable(MlflowError):
    """Not installed, or the tracking server cannot be reached: retry later."""


class MlflowRejected(MlflowError):
    """The tracking server refused a request (e.g. a value it does not accept)."""


def safe_uri(uri: str) -> str:
    """``http://user:pw@host/x`` -> ``http://host/x``; a path or ``file:`` URI is unchanged."""
    parts = urlsplit(uri)
    if not parts.netloc or "@" not in parts.netloc:
        return uri
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


# what urllib3 and requests say when nothing answers, inside MLflow's "API request to ... failed
# with exception HTTPConnectionPool(...): Max retries exceeded ... (Caused by ...)"
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)")
_UNREACHABLE = (
    ("timed out", "no answer (timed out)"),
    ("Read timed out", "no answer (timed out)"),
    ("Max retries exceeded", "cannot connect"),
    ("NameResolutionError", "cannot resolve its host name"),
)
MAX_REASON = 160


def reason(text: str) -> str:
    """One short line for what MLflow's client said: the OS's reason when a connection failed
    (``cannot connect (Connection refused)``), else its first line, cut between words."""
    errno = _ERRNO.search(text)
    if errno:
        return f"cannot connect ({errno.group(1).strip()})"
    for needle, said in _UNREACHABLE:
        if needle in text:
            return said
    line = " ".join(text.split())
    if len(line) <= MAX_REASON:
        return line
    return line[:MAX_REASON].rsplit(" ", 1)[0] + " …"


@dataclass(frozen=True)
class Exported:
    """Where one plan's run is: its id and a link to it in MLflow's UI."""

    key: str
    run_id: str
    url: str
    written: bool  # False: it was already there, unchanged


class MlflowSink:
    """Writes plans into one MLflow experiment (created when missing)."""

    def __init__(
        self,
        tracking_uri: str,
        experiment: str,
        clock: Callable[[], float] = time.time,
        max_response_bytes: int = 32 << 20,
        call_seconds: float = 60.0,
    ) -> None:
        try:
            from mlflow.tracking import MlflowClient

            from tunelab.analysis.mlflow import bounds as mlflowbounds
        except ImportError:  # the optional extra is not installed
            raise MlflowUnavailable(INSTALL_HINT) from None
        mlflowbounds.install()
        # each call's answer is capped in size and time (mlflowbounds): a hostile or huge
        # answer is a failed call, retried with back-off, never the controller's memory
        self._limits = (max_response_bytes, call_seconds)
        # our own loop retries a failed export; MLflow's default (7 retries, doubling) would hold
        # the exporter for minutes on a server that is down
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
        # its "View run at" lines on stdout would break `--json`; our own output has the links
        os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
        for name in ("mlflow", "alembic", "urllib3"):
            logging.getLogger(name).setLevel(logging.WARNING)  # no "View run at" chatter
        self.uri = tracking_uri
        self.shown = safe_uri(tracking_uri).rstrip("/")
        self._client = MlflowClient(tracking_uri=tracking_uri)
        self._experiment_name = experiment
        self._clock = clock  # seconds; the metrics' timestamp is the time of the export
        self._experiment_id: str | None = None
        self._known: dict[str, tuple[str, str]] | None = None  # key -> (run id, digest)

    def _call(self, what: str, call: Callable[[], T]) -> T:
        """One client call, its failure mapped to our tree with a message free of secrets."""
        from mlflow.exceptions import MlflowException

        from tunelab.analysis.mlflow.bounds import bounded

        try:
            with bounded(*self._limits):
                return call()
        except MlflowException as exc:
            code = str(getattr(exc, "error_code", ""))
            text = str(exc.message if hasattr(exc, "message") else exc).replace(
                self.uri, self.shown
            )
            if code in ("", "INTERNAL_ERROR", "TEMPORARILY_UNAVAILABLE", "ENDPOINT_NOT_FOUND"):
                raise MlflowUnavailable(f"MLflow at {self.shown}: {what}: {reason(text)}") from None
            raise MlflowRejected(f"MLflow at {self.shown}: {what}: {reason(text)}") from None
        except OSError as exc:  # connection refused, reset, DNS
            raise MlflowUnavailable(
                f"MLflow at {self.shown}: {what}: {exc.strerror or exc}"
            ) from None

    def experiment_id(self) -> str:
        if self._experiment_id is None:
            found = self._call(
                "find experiment",
                partial(self._client.get_experiment_by_name, self._experiment_name),
            )
            self._experiment_id = (
                found.experiment_id
                if found is not None
                else self._call(
                    "create experiment",
                    partial(self._client.create_experiment, self._experiment_name),
                )
            )
        return str(self._experiment_id)

    def known_runs(self) -> dict[str, tuple[str, str]]:
        """Every tunelab run already in the experiment: key -> (run id, digest). Read once per
        sink, then kept up to date by ``write``; another writer's runs made since are found by
        ``find``."""
        if self._known is None:
            known: dict[str, tuple[str, str]] = {}
            token: str | None = None
            while True:
                page = self._runs("list runs", f"tags.`{KEY_TAG}` LIKE '%:%'", 1000, token)
                for run in page:
                    key = run.data.tags.get(KEY_TAG)
                    if key and key not in known:
                        known[key] = (run.info.run_id, run.data.tags.get(DIGEST_TAG, ""))
                token = page.token
                if not token:
                    break
            self._known = known
        return self._known

    def find(self, key: str) -> tuple[str, str] | None:
        """The run with this ``tunelab.key`` in MLflow now (run id, digest), or None; with
        several (two writers created it at the same moment), the first by start time and run
        id, the same one for every writer. A key is made of tunelab ids: no quote in it."""
        for run in self._runs("find run", f"tags.`{KEY_TAG}` = '{key}'", 10):
            if run.data.tags.get(KEY_TAG) == key:
                return run.info.run_id, run.data.tags.get(DIGEST_TAG, "")
        return None

    def _runs(self, what: str, where: str, most: int, token: str | None = None) -> Any:
        """One page of this experiment's runs matching ``where``, oldest first (then by run id),
        so every writer sees the same order."""
        return self._call(
            what,
            partial(
                self._client.search_runs,
                [self.experiment_id()],
                filter_string=where,
                max_results=most,
                order_by=["attributes.start_time ASC", "attributes.run_id ASC"],
                page_token=token,
            ),
        )

    def url(self, run_id: str) -> str:
        return f"{self.shown}/#/experiments/{self.experiment_id()}/runs/{run_id}"

    def write(self, plans: Sequence[RunPlan]) -> list[Exported]:
        """Each plan as a run, parents first; an unchanged run (same digest) is not touched."""
        known = self.known_runs()
        done: list[Exported] = []
        for plan in sorted(plans, key=partial(_depth, {p.key: p for p in plans})):
            digest = plan.digest()
            run_id, seen = known.get(plan.key) or self.find(plan.key) or ("", "")
            if run_id and seen == digest:
                done.append(Exported(plan.key, run_id, self.url(run_id), written=False))
                continue
            parent = known.get(plan.parent_key, ("", ""))[0] if plan.parent_key else ""
            created = not run_id
            run_id = run_id or self._create(plan, parent)
            self._fill(run_id, plan, created)
            self._call("set tag", partial(self._client.set_tag, run_id, DIGEST_TAG, digest))
            known[plan.key] = (run_id, digest)
            done.append(Exported(plan.key, run_id, self.url(run_id), written=True))
        return done

    def _create(self, plan: RunPlan, parent_run_id: str) -> str:
        tags = {KEY_TAG: plan.key, "mlflow.runName": plan.name}
        if parent_run_id:
            tags["mlflow.parentRunId"] = parent_run_id
        run = self._call(
            "create run",
            partial(
                self._client.create_run,
                self.experiment_id(),
                start_time=plan.start_ms or None,
                tags=tags,
                run_name=plan.name,
            ),
        )
        return str(run.info.run_id)

    def _fill(self, run_id: str, plan: RunPlan, created: bool) -> None:
        from mlflow.entities import Metric, Param, RunTag

        existing = self._call("read run", partial(self._client.get_run, run_id)).data
        params = [
            Param(k, v) for k, v in plan.params.items() if existing.params.get(k) in (None, v)
        ]  # a parameter is written once in MLflow; a changed one keeps its first value
        stamp = int(self._clock() * 1000)
        logged, series = new_metrics(
            plan.metrics, {} if created else existing.metrics, existing.tags.get(SERIES_TAG, "")
        )
        metrics = [Metric(k, v, stamp, step) for k, v, step in logged]
        tags = [RunTag(k, v) for k, v in plan.tags.items()]
        for chunk in _chunks(params, 100):
            self._call("log params", partial(self._client.log_batch, run_id, params=chunk))
        for chunk in _chunks(tags, 100):
            self._call("log tags", partial(self._client.log_batch, run_id, tags=chunk))
        for chunk in _chunks(metrics, BATCH):
            self._call("log metrics", partial(self._client.log_batch, run_id, metrics=chunk))
        # the series tag after the metrics: an export cut short between them logs them again
        if series and series != existing.tags.get(SERIES_TAG):
            self._call("set tag", partial(self._client.set_tag, run_id, SERIES_TAG, series))
        if plan.artifacts:
            with tempfile.TemporaryDirectory(prefix="tunelab-mlflow-") as folder:
                for name, content in plan.artifacts.items():
                    path = Path(folder) / name
                    path.write_bytes(content)
                    self._call(
                        "upload artifact", partial(self._client.log_artifact, run_id, str(path))
                    )
        if plan.end_ms is not None or plan.parent_key is None:
            self._call(
                "finish run",
                partial(self._client.set_terminated, run_id, plan.status, end_time=plan.end_ms),
            )


def new_metrics(
    planned: Sequence[tuple[str, float, int]], latest: dict[str, float], logged_series: str
) -> tuple[list[tuple[str, float, int]], str]:
    """What of ``planned`` (key, value, step) to log into a run whose latest values are
    ``latest`` and whose series tag is ``logged_series``, and the series tag to set: a metric
    with one value (step 0) when that is not its latest value; metrics with several steps (a
    run's load points), all of them, when any of them changed since they were logged."""
    steps: dict[str, list[tuple[str, float, int]]] = {}
    for item in planned:
        steps.setdefault(item[0], []).append(item)
    single = [s[0] for s in steps.values() if len(s) == 1 and s[0][2] == 0]
    several = sorted(
        item for s in steps.values() if not (len(s) == 1 and s[0][2] == 0) for item in s
    )
    series = hashlib.sha256(json.dumps(several).encode()).hexdigest()[:16] if several else ""
    out = [m for m in single if latest.get(m[0]) != m[1]]
    if series != logged_series:
        out += several
    return out, series


def _depth(plans: dict[str, RunPlan], plan: RunPlan) -> int:
    """How far below a top run ``plan`` sits (a search's attempt: 2), so parents come first."""
    depth, seen = 0, {plan.key}
    while plan.parent_key is not None:
        depth += 1
        parent = plans.get(plan.parent_key)
        if parent is None or parent.key in seen:
            break
        seen.add(parent.key)
        plan = parent
    return depth


def _chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
