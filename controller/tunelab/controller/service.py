"""The gRPC adapter for ``tunelab.v1.Controller``: requests in, store/loop calls, messages out."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import grpc
import structlog

from tunelab.analysis.compare import compare
from tunelab.analysis.mlflow.plan import MLFLOW_EVENT
from tunelab.common.auth import is_loopback, split_host_port
from tunelab.common.rpcerrors import StatusMapper, StatusTable, shown
from tunelab.controller.agent_client import AgentClient
from tunelab.controller.hoststate import change_host, drain
from tunelab.controller.search.summary import search_document
from tunelab.controller.slurm.commands import SlurmError, is_slurm
from tunelab.controller.slurm.driver import BadReportToken, ReportRefused, SlurmDriver
from tunelab.controller.slurm.logs import STREAMS, job_log_chunks
from tunelab.controller.spec import SpecError
from tunelab.controller.spec.errors import SpecIssue
from tunelab.controller.spec.limits import DEFAULT_LIMITS, SpecLimits
from tunelab.controller.states import ExperimentState, HostState
from tunelab.controller.store import (
    ExperimentRow,
    HostRow,
    Store,
    StoreConflict,
    StoreFull,
    StoreNotFound,
    StoreUnavailable,
)
from tunelab.controller.store.changes import HostFields
from tunelab.controller.store.search_models import SearchRow
from tunelab.controller.store.watch_models import WATCH_ACTIVE, WATCH_PAUSED, WatchRow
from tunelab.controller.submission import Submissions
from tunelab.controller.timelines import timeline_differences, with_timelines
from tunelab.controller.watchcache import WatchCache
from tunelab.controller.watches.document import watch_document, watch_summary
from tunelab.controller.watches.spec import watch_from_text
from tunelab.controller.wire import (
    PB_TO_EXPERIMENT,
    experiment_to_pb,
    host_to_pb,
    redacted_pairs,
)
from tunelab.v1 import agent_pb2, controller_pb2, controller_pb2_grpc

log = structlog.get_logger(__name__)
SERVICE_NAME = "tunelab.v1.Controller"
HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
WATCH_POLL = 0.5
REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
T = TypeVar("T")
WATCH_STATE_OF = {
    controller_pb2.WATCH_STATE_ACTIVE: WATCH_ACTIVE,
    controller_pb2.WATCH_STATE_PAUSED: WATCH_PAUSED,
}


LABEL_VALUE = re.compile(r"^[^\x00-\x1f\x7f]{0,253}$")


class NotFoundError(LookupError):
    pass


class InvalidRequest(ValueError):
    pass


STATUS_BY_ERROR: StatusTable = (
    (SpecError, grpc.StatusCode.INVALID_ARGUMENT),
    (InvalidRequest, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFoundError, grpc.StatusCode.NOT_FOUND),
    (StoreNotFound, grpc.StatusCode.NOT_FOUND),
    (StoreConflict, grpc.StatusCode.FAILED_PRECONDITION),
    (StoreUnavailable, grpc.StatusCode.FAILED_PRECONDITION),  # a person must restore the file
    (StoreFull, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (BadReportToken, grpc.StatusCode.UNAUTHENTICATED),
    (ReportRefused, grpc.StatusCode.FAILED_PRECONDITION),
    (SlurmError, grpc.StatusCode.FAILED_PRECONDITION),
)
_errors = StatusMapper(STATUS_BY_ERROR, proxy="agent", daemon="controller")
_unary, _stream = _errors.unary, _errors.stream


class ControllerService(controller_pb2_grpc.ControllerServicer):
    def __init__(
        self,
        store: Store,
        agents: AgentClient,
        wake: Callable[[bool], None],
        default_agent_token: str | None = None,
        default_metrics_port: int = 9473,
        clock: Callable[[], float] = time.time,
        spec_limits: SpecLimits = DEFAULT_LIMITS,
        slurm: SlurmDriver | None = None,
    ) -> None:
        self._slurm = slurm
        self._store = store
        self._agents = agents
        self._wake = wake
        self._default_token = default_agent_token
        self._metrics_port = default_metrics_port
        self._clock = clock
        self._limits = spec_limits
        self._watched = WatchCache(self._read_watched, WATCH_POLL / 2)
        self._submissions = Submissions(store, clock, spec_limits)

    # --- experiments -------------------------------------------------------------------------

    def _experiment(self, key: str) -> ExperimentRow:
        row = self._store.get_experiment(key) or self._store.find_experiment_by_name(key)
        if row is None:
            raise NotFoundError(f"no experiment {shown(key)}")
        return row

    def _pb(self, row: ExperimentRow, timeline: bool = False) -> controller_pb2.Experiment:
        exports = {
            str(e["ref"]): str(e["message"])
            for e in self._store.events_for(row.id)
            if e["kind"] == MLFLOW_EVENT
        }
        pb = experiment_to_pb(row, self._store.attempts_for(row.id), exports=exports)
        with_timelines(self._store, pb, timeline)
        return pb

    @_unary
    def SubmitExperiments(
        self, request: controller_pb2.SubmitExperimentsRequest, context: grpc.ServicerContext
    ) -> controller_pb2.SubmitExperimentsResponse:
        if request.request_id and not REQUEST_ID.fullmatch(request.request_id):
            raise InvalidRequest(
                "request_id: at most 128 characters of letters, digits and . _ : - "
                f"(got {len(request.request_id)} characters)"
            )
        done = self._submissions.submit(
            request.spec_yaml, request.source, request.request_id, request.dry_run
        )
        if not request.dry_run and not done.again:
            self._wake(False)
        if done.search:
            return controller_pb2.SubmitExperimentsResponse(search_group=done.group)
        return controller_pb2.SubmitExperimentsResponse(
            experiments=[experiment_to_pb(e, done.attempts.get(e.id, [])) for e in done.experiments]
        )

    def _search(self, group: str) -> SearchRow:
        row = self._store.get_search(group)
        if row is None:
            raise NotFoundError(f"no search {shown(group)} (submit printed its g-... group)")
        return row

    @_unary
    def GetSearch(
        self, request: controller_pb2.GetSearchRequest, context: grpc.ServicerContext
    ) -> controller_pb2.GetSearchResponse:
        row = self._search(request.group)
        document = search_document(row, self._store.search_trials(row.group))
        return controller_pb2.GetSearchResponse(
            search_json=json.dumps(document, sort_keys=True), terminal=row.state.is_terminal()
        )

    @_unary
    def CancelSearch(
        self, request: controller_pb2.CancelSearchRequest, context: grpc.ServicerContext
    ) -> controller_pb2.CancelSearchResponse:
        row = self._store.request_search_cancel(self._search(request.group).group)
        self._wake(False)
        trials = self._store.search_trials(request.group)
        document = search_document(row, trials) if row is not None else {}
        return controller_pb2.CancelSearchResponse(search_json=json.dumps(document, sort_keys=True))

    # --- watches -----------------------------------------------------------------------------

    def _watch(self, name: str) -> WatchRow:
        row = self._store.get_watch(name)
        if row is None:
            raise NotFoundError(f"no watch {shown(name)} (tunelab watch ls lists them)")
        return row

    def _watch_summary(self, row: WatchRow) -> dict[str, Any]:
        latest = self._store.latest_occurrences(row.name, 1)
        return watch_summary(row, latest[0] if latest else None)

    @_unary
    def AddWatch(
        self, request: controller_pb2.AddWatchRequest, context: grpc.ServicerContext
    ) -> controller_pb2.AddWatchResponse:
        found = watch_from_text(request.spec_yaml, request.source, self._limits)
        if found is None:
            raise SpecError([SpecIssue("watch", "is required (this spec has no watch: section)")])
        now = self._clock()
        row = WatchRow(
            name=found.name,
            spec=found.spec.to_dict(),
            base_yaml=found.base_yaml,
            state=WATCH_ACTIVE,
            next_due=now,  # the first occurrence (the baseline, usually) runs at once
            created_at=now,
            pin=found.spec.pin,
        )
        if not request.dry_run:
            self._store.insert_watch(row)
            log.info("watch_added", watch=row.name, every=found.spec.every)
            self._wake(False)
        return controller_pb2.AddWatchResponse(
            watch_json=json.dumps(watch_summary(row, None), sort_keys=True)
        )

    @_unary
    def ListWatches(
        self, request: controller_pb2.ListWatchesRequest, context: grpc.ServicerContext
    ) -> controller_pb2.ListWatchesResponse:
        summaries = [self._watch_summary(w) for w in self._store.list_watches()]
        return controller_pb2.ListWatchesResponse(
            watches_json=json.dumps(summaries, sort_keys=True)
        )

    @_unary
    def GetWatch(
        self, request: controller_pb2.GetWatchRequest, context: grpc.ServicerContext
    ) -> controller_pb2.GetWatchResponse:
        row = self._watch(request.name)
        occurrences = self._store.watch_occurrences(row.name)
        running = {
            o.group: self._store.group_experiments(o.group)
            for o in occurrences
            if o.verdict is None
        }
        document = watch_document(row, occurrences, running)
        return controller_pb2.GetWatchResponse(watch_json=json.dumps(document, sort_keys=True))

    @_unary
    def SetWatchState(
        self, request: controller_pb2.SetWatchStateRequest, context: grpc.ServicerContext
    ) -> controller_pb2.SetWatchStateResponse:
        target = WATCH_STATE_OF.get(request.state)
        if target is None:
            raise InvalidRequest("state: expected WATCH_STATE_ACTIVE or WATCH_STATE_PAUSED")
        row = self._store.set_watch_state(self._watch(request.name).name, target)
        self._wake(False)
        return controller_pb2.SetWatchStateResponse(
            watch_json=json.dumps(self._watch_summary(row), sort_keys=True)
        )

    @_unary
    def RemoveWatch(
        self, request: controller_pb2.RemoveWatchRequest, context: grpc.ServicerContext
    ) -> controller_pb2.RemoveWatchResponse:
        self._store.remove_watch(self._watch(request.name).name)
        log.info("watch_removed", watch=request.name)
        return controller_pb2.RemoveWatchResponse()

    @_unary
    def ListExperiments(
        self, request: controller_pb2.ListExperimentsRequest, context: grpc.ServicerContext
    ) -> controller_pb2.ListExperimentsResponse:
        unknown = [s for s in request.states if s not in PB_TO_EXPERIMENT]
        if unknown:
            raise InvalidRequest(f"states: unknown experiment state {unknown[0]}")
        states = [PB_TO_EXPERIMENT[s] for s in request.states]
        rows = self._store.list_experiments(states, request.limit or 500, request.group)
        attempts = self._store.attempts_for_many([r.id for r in rows])
        return controller_pb2.ListExperimentsResponse(
            experiments=[experiment_to_pb(r, attempts[r.id]) for r in rows]
        )

    @_unary
    def GetExperiment(
        self, request: controller_pb2.GetExperimentRequest, context: grpc.ServicerContext
    ) -> controller_pb2.GetExperimentResponse:
        return controller_pb2.GetExperimentResponse(
            experiment=self._pb(self._experiment(request.id), timeline=request.timeline)
        )

    @_stream
    def WatchExperiment(
        self, request: controller_pb2.WatchExperimentRequest, context: grpc.ServicerContext
    ) -> Iterator[controller_pb2.WatchExperimentResponse]:
        ids = [self._experiment(i).id for i in request.ids]
        seen: dict[str, bytes] = {}
        stopped = threading.Event()
        context.add_callback(stopped.set)
        while context.is_active() and not stopped.is_set():
            pending = False
            for experiment_id in ids:
                snapshot = self._watched.get(experiment_id)
                if snapshot is None:
                    continue
                if seen.get(experiment_id) != snapshot.encoded:
                    seen[experiment_id] = snapshot.encoded
                    yield controller_pb2.WatchExperimentResponse(experiment=snapshot.message)
                pending = pending or not snapshot.terminal
            if not pending:
                return
            stopped.wait(WATCH_POLL)

    def _read_watched(self, experiment_id: str) -> tuple[controller_pb2.Experiment, bool] | None:
        row = self._store.get_experiment(experiment_id)
        return None if row is None else (self._pb(row), row.state.is_terminal())

    @_unary
    def CancelExperiment(
        self, request: controller_pb2.CancelExperimentRequest, context: grpc.ServicerContext
    ) -> controller_pb2.CancelExperimentResponse:
        rows = [self._experiment(i) for i in request.ids]  # all known before any is touched
        out = []
        for row in rows:
            if row.state is ExperimentState.QUEUED:
                try:
                    row = self._store.set_experiment_state(
                        row.id,
                        ExperimentState.CANCELLED,
                        [ExperimentState.QUEUED],
                        finished_at=self._clock(),
                        message="cancelled while queued",
                        cancel_requested=True,
                    )
                except StoreConflict:  # dispatched meanwhile: cancel the running attempt
                    row = self._store.request_cancel(row.id) or row
            elif row.state is ExperimentState.RUNNING:
                row = self._store.request_cancel(row.id) or row
            out.append(self._pb(row))
        self._wake(False)
        return controller_pb2.CancelExperimentResponse(experiments=out)

    @_stream
    def StreamExperimentLogs(
        self, request: controller_pb2.StreamExperimentLogsRequest, context: grpc.ServicerContext
    ) -> Iterator[agent_pb2.StreamLogsResponse]:
        experiment = self._experiment(request.id)
        attempts = self._store.attempts_for(experiment.id)
        if not attempts:
            raise StoreConflict(
                f"experiment {experiment.id} has not started yet ({experiment.state.value})"
            )
        attempt = attempts[-1]
        host = self._host(attempt.host)
        if is_slurm(host.address) and self._slurm is not None:
            if request.stream not in STREAMS:
                raise InvalidRequest("stream: expected server, bench or job")

            def finished() -> bool:
                now = self._store.get_attempt(attempt.id)
                return now is None or now.state.is_terminal()

            yield from job_log_chunks(
                self._slurm.job_folder(attempt.id),
                request.stream,
                tail_lines=request.tail_lines,
                follow=request.follow,
                finished=finished,
                active=context.is_active,
            )
            return
        proxied = agent_pb2.StreamLogsRequest(
            run_id=attempt.id,
            stream=request.stream or "server",
            follow=request.follow,
            tail_lines=request.tail_lines,
        )
        upstream = self._agents.stream_logs(host.address, host.token, proxied)
        if isinstance(upstream, grpc.Call):  # the client left: end the agent's stream too
            call = upstream

            def cancel_upstream() -> None:
                call.cancel()

            context.add_callback(cancel_upstream)
        yield from upstream

    @_stream
    def FetchExperimentProfile(
        self, request: controller_pb2.FetchExperimentProfileRequest, context: grpc.ServicerContext
    ) -> Iterator[agent_pb2.FetchProfileResponse]:
        """A trace the attempt's result lists, from its agent; names are checked here and there."""
        attempt = self._store.get_attempt(request.id)
        if attempt is None:
            attempts = self._store.attempts_for(self._experiment(request.id).id)
            if not attempts:
                raise NotFoundError(f"experiment {shown(request.id)} has no attempt yet")
            attempt = attempts[-1]
        kept = (attempt.result or {}).get("profile") or {}
        files = [*kept.get("traces", []), *kept.get("other_files", [])]
        names = [t.get("name") for t in files if isinstance(t, dict)]
        if request.name not in names:
            listed = ", ".join(str(n) for n in names) or "none"
            raise NotFoundError(
                f"attempt {attempt.id} keeps no trace {request.name!r} (it keeps: {listed})"
            )
        host = self._host(attempt.host)
        proxied = agent_pb2.FetchProfileRequest(
            run_id=attempt.id, name=request.name, offset=request.offset, max_bytes=request.max_bytes
        )
        upstream = self._agents.fetch_profile(host.address, host.token, proxied)
        if isinstance(upstream, grpc.Call):  # the client left: end the agent's stream too
            call = upstream

            def cancel_upstream() -> None:
                call.cancel()

            context.add_callback(cancel_upstream)
        yield from upstream

    # --- hosts -------------------------------------------------------------------------------

    def _host(self, name: str) -> HostRow:
        host = self._store.get_host(name)
        if host is None:
            raise NotFoundError(f"no host {shown(name)} (tunelab hosts ls lists them)")
        return host

    def _host_pb(self, host: HostRow) -> controller_pb2.Host:
        current = [a.id for a in self._store.live_attempts(host.name)]
        return host_to_pb(host, current)

    @_unary
    def ListHosts(
        self, request: controller_pb2.ListHostsRequest, context: grpc.ServicerContext
    ) -> controller_pb2.ListHostsResponse:
        return controller_pb2.ListHostsResponse(
            hosts=[self._host_pb(h) for h in self._store.list_hosts()]
        )

    @_unary
    def AddHost(
        self, request: controller_pb2.AddHostRequest, context: grpc.ServicerContext
    ) -> controller_pb2.AddHostResponse:
        if not HOST_NAME.match(request.name):
            raise InvalidRequest(
                "name: expected 1-63 letters, digits, '.', '_' or '-', starting alnum"
            )
        if request.HasField("slurm"):
            return controller_pb2.AddHostResponse(host=self._host_pb(self._add_pool(request)))
        try:
            host, _ = split_host_port(request.address)
        except ValueError as exc:
            raise InvalidRequest(f"address: {exc}") from None
        metrics_url = self._metrics_url(host, request.metrics_url)
        _check_labels("labels", request.labels)
        row = HostRow(
            name=request.name,
            address=request.address,
            labels=dict(request.labels),
            token=request.token or None,  # None: the agent client's default, never copied
            metrics_url=metrics_url,
            state=HostState.UNREACHABLE,
            state_reason="not polled yet",
            added_at=self._clock(),
        )
        saved = self._store.add_host(row, replace=request.replace)
        self._wake(True)
        return controller_pb2.AddHostResponse(host=self._host_pb(saved))

    def _metrics_url(self, agent_host: str, given: str) -> str:
        url = given or f"http://{_url_host(agent_host)}:{self._metrics_port}/metrics"
        if not url.startswith(("http://", "https://")):
            raise InvalidRequest("metrics_url: must start with http:// or https://")
        scraped = urllib.parse.urlsplit(url).hostname or ""
        if not _same_host(scraped, agent_host):
            # the controller fetches this URL on every scrape: never a host other than the agent's
            raise InvalidRequest(
                f"metrics_url: host {shown(scraped)} is not the agent's host {shown(agent_host)}; "
                "the controller scrapes only the agent's own host"
            )
        return url

    @_unary
    def UpdateHost(
        self, request: controller_pb2.UpdateHostRequest, context: grpc.ServicerContext
    ) -> controller_pb2.UpdateHostResponse:
        """Change the fields given and keep every other one (labels one by one)."""
        host = self._host(request.name)
        _check_labels("set_labels", request.set_labels)
        fields: HostFields = {}
        if request.HasField("metrics_url"):
            agent_host, _ = split_host_port(host.address)
            fields["metrics_url"] = self._metrics_url(agent_host, request.metrics_url)
        if request.set_labels or request.remove_labels:
            unknown = sorted(set(request.remove_labels) - host.labels.keys())
            if unknown:
                raise InvalidRequest(f"remove_labels: {request.name} has no label {unknown[0]!r}")
            labels = {k: v for k, v in host.labels.items() if k not in request.remove_labels}
            fields["labels"] = {**labels, **request.set_labels}
        if request.HasField("token"):
            fields["token"] = request.token or None
        if not fields:
            raise InvalidRequest(
                "give at least one of metrics_url, set_labels, remove_labels, token"
            )
        self._store.update_host(request.name, **fields)  # removed meanwhile: StoreNotFound
        self._wake(True)
        return controller_pb2.UpdateHostResponse(host=self._host_pb(self._host(request.name)))

    def _add_pool(self, request: controller_pb2.AddHostRequest) -> HostRow:
        if self._slurm is None:
            raise InvalidRequest("slurm: this controller does not run Slurm jobs")
        saved = self._slurm.add_pool(request, self._clock())
        self._wake(True)
        return saved

    @_unary
    def ReportRun(
        self, request: controller_pb2.ReportRunRequest, context: grpc.ServicerContext
    ) -> controller_pb2.ReportRunResponse:
        if self._slurm is None:
            raise BadReportToken("this controller runs no Slurm jobs")
        return self._slurm.report(request)

    @_unary
    def RemoveHost(
        self, request: controller_pb2.RemoveHostRequest, context: grpc.ServicerContext
    ) -> controller_pb2.RemoveHostResponse:
        self._host(request.name)
        self._store.remove_host(request.name)
        return controller_pb2.RemoveHostResponse()

    @_unary
    def SetHostDrain(
        self, request: controller_pb2.SetHostDrainRequest, context: grpc.ServicerContext
    ) -> controller_pb2.SetHostDrainResponse:
        self._host(request.name)
        changed = change_host(
            self._store, request.name, drain(request.drain, request.clear_quarantine)
        )
        if changed is None:
            raise NotFoundError(f"no host {shown(request.name)} (tunelab hosts ls lists them)")
        self._wake(True)
        return controller_pb2.SetHostDrainResponse(host=self._host_pb(changed))

    @_unary
    def AuditHost(
        self, request: controller_pb2.AuditHostRequest, context: grpc.ServicerContext
    ) -> controller_pb2.AuditHostResponse:
        host = self._host(request.name)
        response = self._agents.run_audit(host.address, host.token, list(request.only))
        return controller_pb2.AuditHostResponse(report=response.report)

    # --- results -----------------------------------------------------------------------------

    @_unary
    def CompareRuns(
        self, request: controller_pb2.CompareRunsRequest, context: grpc.ServicerContext
    ) -> controller_pb2.CompareRunsResponse:
        if not request.ids:
            raise InvalidRequest("ids: give experiment ids, names or submission groups")
        rows: list[ExperimentRow] = []
        for key in request.ids:
            group = (
                self._store.list_experiments(limit=100_000, group=key)
                if key.startswith("g-")
                else []
            )
            rows.extend(group or [self._experiment(key)])
        unique = list({r.id: r for r in rows}.values())
        attempts = self._store.attempts_for_many([r.id for r in unique])
        document = compare(redacted_pairs((r, attempts[r.id]) for r in unique))
        document["timeline_differences"] = timeline_differences(self._store, document, attempts)
        return controller_pb2.CompareRunsResponse(
            comparison_json=json.dumps(document, sort_keys=True)
        )


def _check_labels(field: str, labels: Mapping[str, str]) -> None:
    for key in labels:
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$", key):
            raise InvalidRequest(f"{field}: bad label name {shown(key)}")
    for key, value in labels.items():
        if not LABEL_VALUE.match(value):
            raise InvalidRequest(
                f"{field}.{shown(key)}: value must be at most 253 characters with no "
                "control characters (no NUL, no newline)"
            )


def _same_host(a: str, b: str) -> bool:
    """The same host as written (case-insensitive), or both loopback."""
    return a.strip("[]").lower() == b.strip("[]").lower() or (is_loopback(a) and is_loopback(b))


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
