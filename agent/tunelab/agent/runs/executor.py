"""Carrying out runs: one thread per run drives server → readiness → benchmark → stop, writing
every step to ``runs/<run_id>/run.json`` before it is reported, and enforcing the run's own
``max_duration`` whether or not any controller is listening."""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol, Unpack

import structlog

from tunelab.agent.engines import profiling as engine_profiling
from tunelab.agent.engines.profiles import profile_for
from tunelab.agent.engines.profiling import EnginePlan
from tunelab.agent.engines.traces import TRACE_DIR, keep_traces
from tunelab.agent.errors import AgentError, Conflict, InvalidSpec, NotFound, storage_error
from tunelab.agent.quarantine import QuarantineList
from tunelab.agent.recordbook import RecordBook
from tunelab.agent.runs.builtinjob import PROCESS_FILE
from tunelab.agent.runs.commandjob import RESULT_FILE_FIELD, BenchFailed, CommandJob, confined
from tunelab.agent.runs.datasetfile import resolve_dataset
from tunelab.agent.runs.metrics import exported_progress
from tunelab.agent.runs.record import MAX_EVENTS, RunChanges, RunEvent, RunRecord, RunSpec
from tunelab.agent.runs.states import RunState, check_run_transition
from tunelab.agent.runs.tokenizerfile import resolve_tokenizer
from tunelab.agent.servers.ports import PortPool
from tunelab.agent.servers.record import ServerRecord
from tunelab.agent.servers.registry import ServerRegistry
from tunelab.agent.servers.spec import SERVER_NAME, ServerSpec, ValidServerSpec
from tunelab.agent.servers.states import ServerState
from tunelab.agent.statefile import read_json, write_json_atomic
from tunelab.agent.statewriter import DurableWriter
from tunelab.agent.timeline.recorder import TimelineRecorder, TimelineSources
from tunelab.agent.watching import watch_versioned
from tunelab.common.rpcerrors import shown

log = structlog.get_logger(__name__)
RUN_FILE = "run.json"
RESULT_FILE = "result.json"
TIMELINE_ORIGIN_FILE = "timeline-origin.json"
STOP_GRACE_BENCH = 10.0
POLL = 0.25


class BenchJob(Protocol):
    """A running benchmark, whichever kind (built-in load generator or external command)."""

    def start(self) -> None: ...
    def attach(self) -> bool: ...
    def progress(self) -> dict[str, Any] | None: ...
    def finished(self) -> bool: ...
    def result(self) -> dict[str, Any]: ...
    def stop(self, grace: float, closing: threading.Event) -> None: ...


BuiltinJobFactory = Callable[[dict[str, Any], Path, str], BenchJob]
ProvenanceHook = Callable[[RunSpec, ServerSpec | None], dict[str, Any]]


class _Interrupted(Exception):
    """The run was cancelled or ran past its max_duration."""

    def __init__(self, state: RunState, message: str) -> None:
        super().__init__(message)
        self.state = state


class RunExecutor:
    def __init__(
        self,
        state_dir: Path,
        registry: ServerRegistry,
        builtin_job: BuiltinJobFactory,
        clock: Callable[[], float] = time.time,
        provenance: ProvenanceHook | None = None,
        writer: DurableWriter | None = None,
        quarantined: QuarantineList | None = None,
        ports: PortPool | None = None,
        datasets_dir: Path | None = None,
        timeline: TimelineSources | None = None,
    ) -> None:
        self._dir = state_dir / "runs"
        # each agent's auto ports start at a place of its own (its state dir's hash): two
        # agents on one host (tests, a lab box) no longer race for the window's first port
        self._ports = ports or PortPool()
        self._datasets_dir = datasets_dir or state_dir / "datasets"
        self._provenance = provenance
        self._timeline = timeline
        self._dir.mkdir(parents=True, exist_ok=True)
        self._registry = registry
        self._builtin_job = builtin_job
        self._clock = clock
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._writer = writer or DurableWriter()
        self.quarantined = quarantined if quarantined is not None else QuarantineList()
        self._runs: RecordBook[RunRecord, RunState, RunEvent] = RecordBook(
            kind="run",
            id_field="run_id",
            path_of=lambda run_id: self.run_dir(run_id) / RUN_FILE,
            check=check_run_transition,
            event=RunEvent,
            max_events=MAX_EVENTS,
            changed=self._changed,
            writer=self._writer,
            quarantined=self.quarantined,
            clock=clock,
        )
        self._jobs: dict[str, BenchJob] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._closing = threading.Event()

    # --- paths and queries -------------------------------------------------------------------

    def run_dir(self, run_id: str) -> Path:
        return self._dir / run_id

    def log_path(self, run_id: str, stream: str) -> Path:
        record = self.get(run_id)
        if stream == "bench":
            return self.run_dir(run_id) / "bench.log"
        if stream not in ("", "server"):
            raise InvalidSpec("stream", "expected server or bench")
        if not record.server_id:
            return self.run_dir(run_id) / "no-server-yet.log"
        return self._registry.log_path(record.server_id)

    def get(self, run_id: str) -> RunRecord:
        with self._lock:
            if run_id not in self._runs:
                raise NotFound(f"no run {shown(run_id)}")
            return self._runs[run_id].snapshot()

    def runs(self, include_finished: bool) -> list[RunRecord]:
        with self._lock:
            return [
                r.snapshot()
                for r in self._runs.values()
                if include_finished or not r.state.is_terminal()
            ]

    def is_finished(self, run_id: str) -> bool:
        return self.get(run_id).state.is_terminal()

    def has_active(self) -> bool:
        """Whether any run is in progress (the metrics read energy counters fast then)."""
        with self._lock:
            return any(not r.state.is_terminal() for r in self._runs.values())

    def active_run_ids(self) -> list[str]:
        return [r.run_id for r in self.runs(include_finished=False)]

    def live_progress(self) -> dict[str, dict[str, Any]]:
        """Latest benchmark progress of each running run (and of runs finished in the last
        FINISHED_LINGER seconds), oldest first, by experiment label or run id."""
        with self._lock:
            return exported_progress(list(self._runs.values()), self._clock())

    def watch(self, run_id: str, cancelled: Callable[[], bool]) -> Iterator[RunRecord]:
        self.get(run_id)
        yield from watch_versioned(self._changed, lambda: self._runs[run_id], cancelled)

    # --- start / cancel ----------------------------------------------------------------------

    def start(self, run_id: str, spec: RunSpec) -> tuple[RunRecord, bool]:
        """Start a run; a known id returns that run (``created`` False), never a second one."""
        if not run_id:
            run_id = f"run-{secrets.token_hex(4)}"
        if not SERVER_NAME.match(run_id):
            raise InvalidSpec(
                "run_id", "expected 1-63 letters, digits, '.', '_' or '-', starting alnum"
            )
        if spec.command is not None:
            confined(self.run_dir(run_id), spec.command.result_file, RESULT_FILE_FIELD)
        if spec.builtin is not None and spec.builtin.get("dataset_path"):
            spec = replace(spec, builtin=resolve_dataset(spec.builtin, self._datasets_dir))
        if spec.builtin is not None and spec.builtin.get("tokenizer"):
            server = spec.server if spec.server is not None else self._server_spec(spec.server_id)
            builtin = resolve_tokenizer(spec.builtin, self._datasets_dir, server)
            spec = replace(spec, builtin=builtin)
        with self._lock:
            if self._closing.is_set():
                raise Conflict("the agent is shutting down")
            if run_id in self._runs:
                return self._runs[run_id].snapshot(), False
            now = self._clock()
            record = RunRecord(run_id=run_id, spec=spec, started_at=now, message="accepted")
            record.events.append(RunEvent(now, RunState.PENDING, "accepted"))
            path = self.run_dir(run_id) / RUN_FILE
            try:  # accepted means on disk: a run that cannot be recorded is not started
                write_json_atomic(path, record.to_dict())
            except OSError as exc:
                raise storage_error(exc, path, "the run was not started") from exc
            self._runs.add(run_id, record)
            self._launch(run_id)
            return record.snapshot(), True

    def _server_spec(self, server_id: str) -> ServerSpec | None:
        """The spec of an existing server a run names (None: not known here)."""
        try:
            return self._registry.get(server_id).spec
        except NotFound:
            return None

    def cancel(self, run_id: str) -> RunRecord:
        with self._runs.locked():
            if run_id not in self._runs:
                raise NotFound(f"no run {shown(run_id)}")
            record = self._runs[run_id]
            if not record.state.is_terminal() and not record.cancel_requested:
                record = self._runs.update(run_id, {"cancel_requested": True}, persist=True)
            return record.snapshot()

    # --- the run thread ----------------------------------------------------------------------

    def _launch(self, run_id: str) -> None:
        thread = threading.Thread(
            target=self._drive, args=(run_id,), name=f"run-{run_id}", daemon=True
        )
        self._threads[run_id] = thread
        thread.start()

    def _drive(self, run_id: str) -> None:
        log_ = log.bind(run_id=run_id)
        try:
            self._steps(run_id)
        except _Interrupted as stop:
            self._stop_all(run_id)
            self._finish(run_id, stop.state, str(stop))
        except (AgentError, BenchFailed) as exc:
            record = self.get(run_id)
            failed = (
                RunState.FAILED_BENCHMARK
                if record.state in (RunState.BENCHMARKING, RunState.STOPPING)
                else RunState.FAILED_STARTUP
            )
            self._stop_all(run_id)
            self._finish(run_id, failed, str(exc))
        except _Closing:
            log_.info("run_detached", state=self.get(run_id).state.value)
        except Exception:  # a bug: record it as a failure instead of leaving the run hanging
            log_.exception("run_crashed")
            self._stop_all(run_id)
            self._finish(
                run_id, RunState.FAILED_BENCHMARK, "internal error in the agent (see its log)"
            )

    def _steps(self, run_id: str) -> None:
        record = self.get(run_id)
        if record.state is RunState.PENDING:
            self._start_server(record)
            record = self.get(run_id)
        if record.state is RunState.STARTING:
            self._wait_ready(record)
            record = self.get(run_id)
        if record.state is RunState.READY:
            self._benchmark(record, fresh=True)
        elif record.state is RunState.BENCHMARKING:
            self._benchmark(record, fresh=False)
        record = self.get(run_id)
        if record.state is RunState.STOPPING:
            self._stop_server(record)
            self._finish(run_id, RunState.SUCCEEDED, "benchmark finished; result stored")

    def _check(self, run_id: str) -> None:
        if self._closing.is_set():
            raise _Closing
        record = self.get(run_id)
        if record.cancel_requested:
            raise _Interrupted(RunState.CANCELLED, "cancelled on request")
        limit = record.spec.max_duration
        if limit and self._clock() - record.started_at > limit:
            raise _Interrupted(RunState.TIMED_OUT, f"ran past its max_duration of {limit:g} s")

    def _start_server(self, record: RunRecord) -> None:
        spec = record.spec
        if spec.server is None:
            server = self._registry.get(spec.server_id)
            if server.state is not ServerState.READY:
                raise InvalidSpec(
                    "spec.server_id", f"server {spec.server_id} is {server.state.value}, not READY"
                )
            self._transition(
                record.run_id,
                RunState.READY,
                f"using READY server {server.id}",
                server_id=server.id,
                port=server.spec.port,
                provenance=self._record_provenance(spec, server.spec),
            )
            return
        port = (
            self._ports.take(record.run_id, exclude={s.spec.port for s in self._registry.servers()})
            if spec.server.auto_port
            else spec.server.port
        )
        server_spec = self._with_engine_plan(record, _with_port(spec.server, port))
        server_id = f"{record.run_id}-server"
        self._transition(
            record.run_id,
            RunState.STARTING,
            f"starting server {server_id} on port {port}",
            server_id=server_id,
            port=port,
            provenance=self._record_provenance(spec, server_spec),
        )
        self._registry.start(server_spec, server_id)

    def _record_provenance(self, spec: RunSpec, server: ServerSpec) -> dict[str, Any] | None:
        """What exactly is about to run (GPU clocks and power limit as they are at start)."""
        return self._provenance(spec, server) if self._provenance else None

    def _wait_ready(self, record: RunRecord) -> None:
        while True:
            self._check(record.run_id)
            server = self._registry.get(record.server_id)
            if server.state is ServerState.READY:
                self._transition(
                    record.run_id, RunState.READY, f"server READY in {server.ready_seconds:.1f} s"
                )
                return
            if server.state.is_terminal():
                # one line for a person: argparse's usage continuation lines carry ~40 spaces
                tail = " | ".join(" ".join(line.split()) for line in server.log_tail[-5:])
                raise BenchFailed(
                    f"server {server.state.value}: {server.message}"
                    + (f" — {tail}" if tail else "")
                )
            self._registry.wait_for(server.id, _changed_since(server.version), POLL * 4)

    def _job(self, record: RunRecord, timeline_start: float = 0.0) -> BenchJob:
        with self._lock:
            known = self._jobs.get(record.run_id)
            if known is not None:
                return known
        subs = {"port": str(record.port), "url": f"http://127.0.0.1:{record.port}"}
        workdir = self.run_dir(record.run_id)
        if record.spec.command is not None:
            job: BenchJob = CommandJob(record.spec.command, workdir, subs)
        else:
            config = dict(record.spec.builtin or {})
            config["url"] = (
                str(config.get("url", "")).replace("{port}", subs["port"]) or subs["url"]
            )
            engine_plan = self._engine_plan(record)
            if engine_plan is not None:
                config.update(engine_plan.bench)
            if timeline_start:
                config["timeline_start"] = timeline_start
            job = self._builtin_job(config, workdir, record.spec.experiment or record.run_id)
        with self._lock:
            self._jobs[record.run_id] = job
            return job

    def _benchmark(self, record: RunRecord, fresh: bool) -> None:
        recorder = self._recorder(record, fresh)
        job = self._job(record, recorder.start_at if recorder is not None else 0.0)
        try:
            self._measure(record, job, fresh, recorder)
        finally:
            if recorder is not None:
                recorder.stop()

    def _measure(
        self, record: RunRecord, job: BenchJob, fresh: bool, recorder: TimelineRecorder | None
    ) -> None:
        if fresh:
            self._transition(record.run_id, RunState.BENCHMARKING, "benchmark started")
            job.start()
        elif not job.attach():
            job.start()  # the agent died before the benchmark process was spawned
        last: dict[str, Any] | None = None
        try:
            while not job.finished():
                self._check(record.run_id)
                progress = job.progress()
                if progress is not None and progress != last:
                    self._update(record.run_id, progress=progress)
                    last = progress
                self._closing.wait(POLL)
        except _Interrupted:
            job.stop(STOP_GRACE_BENCH, self._closing)
            raise
        progress = job.progress()
        if progress is not None:
            self._update(record.run_id, progress=progress)
        result = self._with_traces(record, job.result())
        if recorder is not None:
            recorder.stop()
            result["timeline"] = recorder.document(result.pop("client_timeline", None))
        self._write_result(record.run_id, result)  # on disk before reported
        self._transition(record.run_id, RunState.STOPPING, "benchmark finished", result=result)

    # --- the timeline (issue 47; tunelab.agent.timeline) -------------------------------------

    def _recorder(self, record: RunRecord, fresh: bool) -> TimelineRecorder | None:
        """The run's timeline recorder, started; None for a command benchmark or when the spec
        turned it off. Its origin is kept in the run folder, so a restarted agent's recorder
        stays on the grid that the running load generator bins its requests on."""
        step = float((record.spec.builtin or {}).get("timeline_step_s", 0.0) or 0.0)
        if self._timeline is None or record.spec.builtin is None or not step:
            return None
        path = self.run_dir(record.run_id) / TIMELINE_ORIGIN_FILE
        start_at: float | None = None
        if not fresh:
            with contextlib.suppress(OSError, ValueError, TypeError):
                start_at = float(read_json(path)["start"])
        process_file = self.run_dir(record.run_id) / PROCESS_FILE
        recorder = self._timeline.recorder(
            step, record.port or None, lambda: _bench_pid(process_file), start_at
        )
        with contextlib.suppress(OSError):
            write_json_atomic(path, {"start": recorder.start_at, "step": step})
        recorder.start()
        return recorder

    # --- engine profiler and cache reset (issue 27; tunelab.agent.engines.profiling) ---------

    def _engine_plan(self, record: RunRecord) -> EnginePlan | None:
        """What the engine needs for the profile / cache reset the builtin benchmark asks for."""
        bench = record.spec.builtin
        if bench is None or (
            int(bench.get("profile_point", -1)) < 0 and bench.get("reset_cache") is False
        ):
            return None
        server: ServerSpec | None = record.spec.server
        if server is None:
            with contextlib.suppress(NotFound):
                server = self._registry.get(record.spec.server_id).spec
        if server is None:
            return None
        engine = profile_for(server.engine, server.argv)
        return engine_profiling.plan(
            engine, tuple(server.argv), bench, self.run_dir(record.run_id) / TRACE_DIR
        )

    def _with_engine_plan(self, record: RunRecord, server: ValidServerSpec) -> ValidServerSpec:
        """The server with the engine's profiler flags added; checked again, since the added
        argv may take a spec at the launch-size bound past it."""
        engine_plan = self._engine_plan(record)
        if engine_plan is None or not (engine_plan.argv or engine_plan.env):
            return server
        (self.run_dir(record.run_id) / TRACE_DIR).mkdir(mode=0o700, exist_ok=True)
        return replace(
            server, argv=(*server.argv, *engine_plan.argv), env={**server.env, **engine_plan.env}
        ).validated()

    def _with_traces(self, record: RunRecord, result: dict[str, Any]) -> dict[str, Any]:
        """The result with the kept traces listed (``result["profile"]``) and their warnings."""
        bench = record.spec.builtin or {}
        engine_plan = self._engine_plan(record)
        if engine_plan is None:
            return result
        warnings = list(engine_plan.warnings)
        point = int(bench.get("profile_point", -1))
        if point >= 0:
            kept = keep_traces(self.run_dir(record.run_id), int(bench["profile_max_bytes"]))
            points = result.get("points") or []
            window = points[point].get("profile") if point < len(points) else None
            warnings += kept["warnings"]
            result = {**result, "profile": {**kept, "point": point, "window": window}}
            result["profile"]["warnings"] = [w for w in warnings if w.startswith("profile")]
        if warnings:
            result["warnings"] = [*result.get("warnings", []), *warnings]
        return result

    def _write_result(self, run_id: str, result: dict[str, Any]) -> None:
        """The result must be on disk before it is reported: on a full disk, wait (retrying)
        instead of failing a benchmark that worked; cancel and shutdown still end the wait."""
        path = self.run_dir(run_id) / RESULT_FILE
        while True:
            try:
                write_json_atomic(path, result)
                return
            except OSError as exc:
                log.error("result_write_failed", run_id=run_id, path=str(path), error=str(exc))
            if self._closing.wait(1.0):
                raise _Closing
            self._check(run_id)

    def _stop_server(self, record: RunRecord) -> None:
        if not record.server_id or record.spec.server is None or record.spec.keep_server:
            return
        server = self._registry.stop(record.server_id)
        if server.state is ServerState.KILL_FAILED:
            self._update(record.run_id, kill_failed=True, message=server.message)

    def _stop_all(self, run_id: str) -> None:
        """After a failure, cancel or timeout: end the benchmark, then the server we started."""
        with self._lock:
            job = self._jobs.get(run_id)
        if job is not None:
            job.stop(STOP_GRACE_BENCH, self._closing)
        record = self.get(run_id)
        if record.server_id and record.spec.server is not None and not record.spec.keep_server:
            with contextlib.suppress(NotFound):  # removed by hand meanwhile: nothing to stop
                self._stop_server(record)

    # --- state changes -----------------------------------------------------------------------

    def _transition(
        self, run_id: str, target: RunState, message: str, **changes: Unpack[RunChanges]
    ) -> None:
        """Check and make one state change (a misspelt field fails mypy and raises TypeError)."""
        if target.is_terminal():
            changes = {**changes, "finished_at": self._clock()}
        self._runs.transition(run_id, target, message, changes)

    def _update(
        self, run_id: str, message: str | None = None, **changes: Unpack[RunChanges]
    ) -> None:
        self._runs.update(run_id, changes, message=message)

    def _finish(self, run_id: str, target: RunState, message: str) -> None:
        record = self.get(run_id)
        if record.state.is_terminal():
            return
        if record.kill_failed:
            message = f"{message}; a process survived the stop ladder: {record.message}"
        self._transition(run_id, target, message)
        with self._lock:
            self._jobs.pop(run_id, None)
        self._ports.release(run_id)

    # --- agent start and shutdown ------------------------------------------------------------

    def adopt_existing(self) -> list[str]:
        """Load every run; continue the unfinished ones where they stood."""
        resumed = []
        for path in sorted(self._dir.glob(f"*/{RUN_FILE}")):
            record = self._runs.load(path, RunRecord.from_dict, lambda r: r.run_id)
            if record is None:
                continue
            result_path = path.parent / RESULT_FILE
            if result_path.exists():
                try:
                    record.result = read_json(result_path)
                except (OSError, ValueError):  # unreadable, or not a plain file: no result
                    record.result = None
            with self._lock:
                self._runs.add(record.run_id, record)
                if not record.state.is_terminal():
                    if record.port and record.spec.server and record.spec.server.auto_port:
                        self._ports.hold(record.run_id, record.port)  # its auto port
                    self._launch(record.run_id)
                    resumed.append(record.run_id)
        return resumed

    def close(self, timeout: float = 5.0) -> None:
        """Agent shutdown: stop following runs; their processes go on for the next agent."""
        self._closing.set()
        with self._lock:
            threads = list(self._threads.values())
        for thread in threads:
            thread.join(timeout)


def _changed_since(version: int) -> Callable[[ServerRecord], bool]:
    return lambda record: record.version != version


def _bench_pid(path: Path) -> int | None:
    """The load generator's pid, read (never signalled) for its CPU share on the timeline."""
    try:
        pid = int(read_json(path)[0])
    except (OSError, ValueError, TypeError, IndexError, KeyError):
        return None
    return pid if pid > 1 else None


class _Closing(Exception):
    """The agent is shutting down: leave the run as it is on disk."""


def _with_port(spec: ValidServerSpec, port: int) -> ValidServerSpec:
    """The server spec with its port set and ``{port}`` filled into argv and env values. Still
    valid without a second check: the port is the spec's own or the pool's (1-65535), and five
    digits in place of ``{port}`` never lengthen an argument."""
    if not 1 <= port <= 65535:
        raise ValueError(f"port {port} out of range")  # a bug in the caller, not a spec error
    placeholder = "{port}"
    return ValidServerSpec(
        replace(
            spec,
            port=port,
            auto_port=False,
            argv=tuple(a.replace(placeholder, str(port)) for a in spec.argv),
            env={k: v.replace(placeholder, str(port)) for k, v in spec.env.items()},
        )
    )
