"""``tunelab-agent run-once``: carry out exactly one run, with no daemon and no root, and report
it to the controller (the Slurm path: this is what a job runs on its node).

The run goes through the daemon's own parts — the :class:`RunExecutor` (server start, readiness,
benchmark, stop, failure reasons, ``max_duration``), the :class:`ServerRegistry` and its monitor
process, the built-in load generator — in a state dir of the job's own. Every change of the run
is sent with ``ReportRun`` (the node connects out; the controller never calls the node),
authenticated by the attempt's own token. The controller's answer may ask for a cancel, and the
run's CANCELLED is then reported. SIGTERM (an ``scancel`` from outside, a time limit, a
preemption) stops the run too, but sends no final state: the job then ends without a result,
and the controller reads why from Slurm (LOST, retried). A report the controller refuses (the
attempt was fenced or is over) stops the run: its result would count nowhere.

Exit status: 0 the run succeeded, 1 it did not, 2 bad input, 3 the controller refused or could
not be reached with the final result, 143 stopped by SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import grpc
import structlog
from google.protobuf import json_format
from prometheus_client import CollectorRegistry, generate_latest

from tunelab.agent.errors import NotFound
from tunelab.agent.gpu import GpuBackend, open_backend
from tunelab.agent.metrics.app import AgentMetrics, MetricsSettings
from tunelab.agent.metrics.servers import ListServers
from tunelab.agent.runs.builtinjob import BuiltinJob
from tunelab.agent.runs.executor import RunExecutor
from tunelab.agent.runs.provenance import RunProvenance
from tunelab.agent.runs.record import RunRecord
from tunelab.agent.runs.states import RunState
from tunelab.agent.servers.registry import ServerRegistry
from tunelab.agent.servers.supervisor import SupervisorSettings
from tunelab.agent.system import System
from tunelab.agent.timeline.recorder import TimelineSources
from tunelab.agent.wire import run_spec_from_pb, run_to_pb
from tunelab.common import __version__
from tunelab.common.auth import ClientAuth, read_token
from tunelab.common.logsetup import configure_logging
from tunelab.v1 import controller_pb2, controller_pb2_grpc, run_pb2

log = structlog.get_logger(__name__)
REPORT_EVERY = 1.0  # seconds between progress-only reports; state changes go at once
FINAL_TRIES = 10
MIRROR_EVERY = 1.0


class Refused(Exception):
    """The controller will take no more reports for this attempt."""


class LogMirror:
    """Copies the run's server and bench logs, as they grow, into the job's folder (on the file
    system the controller shares with the nodes), where ``tunelab logs`` reads them. The logs
    themselves stay in the local state dir: the monitor's socket lives there too."""

    def __init__(self, runs: RunExecutor, run_id: str, folder: Path) -> None:
        self._runs, self._run_id, self._folder = runs, run_id, folder
        self._stop = threading.Event()
        self._sent: dict[str, int] = {}
        self._thread = threading.Thread(target=self._loop, name="log-mirror", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(MIRROR_EVERY):
            self.copy()

    def copy(self) -> None:
        for stream in ("server", "bench"):
            try:
                source = self._runs.log_path(self._run_id, stream)
                with source.open("rb") as f:
                    f.seek(self._sent.get(stream, 0))
                    data = f.read()
            except (OSError, NotFound):
                continue
            if data:
                with (self._folder / f"{stream}.log").open("ab") as out:
                    out.write(data)
                self._sent[stream] = self._sent.get(stream, 0) + len(data)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.copy()


GPU_METRICS_LIMIT = 64 << 10  # bytes of tunelab_gpu_* text per report


class GpuFigures:
    """The job's GPU families as the daemon's /metrics has them, sampled by the same code
    (``AgentMetrics`` with no HTTP), for each report: the controller cannot scrape a node."""

    def __init__(self, gpu: GpuBackend, list_servers: ListServers, instance: str) -> None:
        self._metrics = AgentMetrics(
            MetricsSettings(listen=""),
            gpu=gpu,
            list_servers=list_servers,
            registry=CollectorRegistry(),
            last_audit=lambda: None,
            version=__version__,
            instance_id=instance,
            started_at=time.time(),
            measuring=lambda: True,  # the job exists for its one run
        )

    def start(self) -> None:
        self._metrics.start()

    def close(self) -> None:
        self._metrics.close()

    def text(self) -> str:
        """The ``tunelab_gpu_*`` lines (with their HELP/TYPE), at most GPU_METRICS_LIMIT; only
        the GPUs Slurm granted the job (``SLURM_JOB_GPUS``, the node's indices) when the page
        has them (NVML sees every GPU of the node)."""
        if not self._metrics.gpu_source.enabled:
            return ""
        lines = [
            line
            for line in generate_latest(self._metrics.registry).decode().splitlines()
            if _family(line).startswith("tunelab_gpu_")
        ]
        granted = {g for g in os.environ.get("SLURM_JOB_GPUS", "").split(",") if g.strip()}
        seen = {m.group(1) for m in map(_GPU_LABEL.search, lines) if m}
        if granted & seen:
            lines = [
                line
                for line in lines
                if (m := _GPU_LABEL.search(line)) is None or m.group(1) in granted
            ]
        kept, size = [], 0
        for line in lines:
            size += len(line) + 1
            if size > GPU_METRICS_LIMIT:
                break
            kept.append(line)
        return "\n".join(kept) + "\n" if kept else ""


_GPU_LABEL = re.compile(r'[{,]gpu="([^"]*)"')


def _family(line: str) -> str:
    """The metric a line of the text format is about (a sample, or its HELP/TYPE comment)."""
    if line.startswith("# "):
        parts = line.split(" ", 3)
        return parts[2] if len(parts) > 2 else ""
    return line


class Reporter:
    def __init__(
        self,
        address: str,
        attempt_id: str,
        token: str,
        job_id: str,
        gpu_metrics: Callable[[], str] = str,
    ) -> None:
        self._channel = ClientAuth().channel(address)
        self._stub = controller_pb2_grpc.ControllerStub(self._channel)
        self._attempt, self._token, self._job = attempt_id, token, job_id
        self.gpu_metrics = gpu_metrics

    def send(self, run: run_pb2.Run, timeout: float = 10.0) -> bool:
        """One report; True when the controller asks for a cancel. Raises Refused when the
        controller will not take it, grpc.RpcError on a transport failure."""
        request = controller_pb2.ReportRunRequest(
            attempt_id=self._attempt,
            token=self._token,
            run=run,
            slurm_job_id=self._job,
            gpu_metrics=self.gpu_metrics(),
        )
        try:
            response = self._stub.ReportRun(request, timeout=timeout)
        except grpc.RpcError as exc:
            if exc.code() in (
                grpc.StatusCode.FAILED_PRECONDITION,
                grpc.StatusCode.UNAUTHENTICATED,
                grpc.StatusCode.NOT_FOUND,
            ):
                raise Refused(f"{exc.code().name}: {exc.details()}") from None
            raise
        return bool(response.cancel)

    def close(self) -> None:
        self._channel.close()


def add_run_once_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("run-once", help="carry out one run and report it (inside a Slurm job)")
    p.add_argument("--spec", type=Path, required=True, help="the RunSpec as JSON")
    p.add_argument("--attempt", required=True, help="the attempt id (the run id)")
    p.add_argument("--controller", required=True, help="controller gRPC address HOST:PORT")
    p.add_argument("--token-file", type=Path, required=True, help="the attempt's token")
    p.add_argument(
        "--state-dir", type=Path, help="default $SLURM_TMPDIR or $TMPDIR, /tmp/tunelab-<attempt>"
    )
    p.add_argument(
        "--log-dir", type=Path, help="copy server.log and bench.log here (default: --spec's folder)"
    )
    p.add_argument(
        "--nvml-snapshot",
        default=os.environ.get("TUNELAB_AGENT_NVML_SNAPSHOT"),
        help="answer GPU queries from a captured NVML snapshot ($TUNELAB_AGENT_NVML_SNAPSHOT)",
    )
    p.set_defaults(handler=run_once_command)


def run_once_command(args: argparse.Namespace) -> int:
    configure_logging("info")
    try:
        spec_pb = json_format.Parse(args.spec.read_text(), run_pb2.RunSpec())
        token = read_token(args.token_file) or ""
    except (OSError, ValueError) as exc:
        print(f"tunelab-agent run-once: {exc}")
        return 2
    base = os.environ.get("SLURM_TMPDIR") or tempfile.gettempdir()
    state_dir = args.state_dir or Path(base) / f"tunelab-{args.attempt}"
    job_id = os.environ.get("SLURM_JOB_ID", "")
    reporter = Reporter(args.controller, args.attempt, token, job_id)
    try:
        log_dir = args.log_dir or args.spec.parent
        return run_once(spec_pb, args.attempt, state_dir, reporter, args.nvml_snapshot, log_dir)
    finally:
        reporter.close()


def run_once(
    spec_pb: run_pb2.RunSpec,
    attempt_id: str,
    state_dir: Path,
    reporter: Reporter,
    nvml_snapshot: str | None = None,
    log_dir: Path | None = None,
) -> int:
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    gpu = open_backend(Path(nvml_snapshot) if nvml_snapshot else None)
    registry = ServerRegistry(state_dir, gpu, SupervisorSettings())
    runs = RunExecutor(
        state_dir,
        registry,
        BuiltinJob,
        provenance=RunProvenance(gpu, time.time),
        timeline=TimelineSources(gpu, System()),
    )
    stop = threading.Event()

    def on_term(signum: int, frame: FrameType | None) -> None:
        log.warning("run_once_signalled", signal=signum)
        stop.set()
        runs.cancel(attempt_id)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    instance = f"run-once-{os.getpid()}"
    mirror = LogMirror(runs, attempt_id, log_dir) if log_dir is not None else None
    figures = GpuFigures(gpu, registry.servers, instance)
    reporter.gpu_metrics = figures.text
    figures.start()
    try:
        runs.start(attempt_id, run_spec_from_pb(spec_pb))
        if mirror is not None:
            mirror.start()
        flush = mirror.copy if mirror is not None else (lambda: None)
        final = _follow(runs, registry, attempt_id, reporter, instance, stop, flush)
    finally:
        if mirror is not None:
            mirror.close()
        figures.close()
        runs.close()
        registry.close()
    if stop.is_set():
        return 143
    if final is None:
        return 3
    return 0 if final.state is RunState.SUCCEEDED else 1


def _pb(registry: ServerRegistry, record: RunRecord, instance: str) -> run_pb2.Run:
    server = None
    if record.server_id:
        try:
            server = registry.get(record.server_id)
        except NotFound:
            server = None
    return run_to_pb(record, server, instance)


def _follow(
    runs: RunExecutor,
    registry: ServerRegistry,
    attempt_id: str,
    reporter: Reporter,
    instance: str,
    signalled: threading.Event,
    flush: Callable[[], None] = lambda: None,
) -> RunRecord | None:
    """Report every state change at once and progress at most once a second, until the run is
    over; then the final state, retried (not after a SIGTERM: Slurm says why the job ended).
    None: the controller never took the final report."""
    last_state: RunState | None = None
    last_sent = 0.0
    record = runs.get(attempt_id)
    for record in runs.watch(attempt_id, lambda: False):
        now = time.monotonic()
        if record.state.is_terminal():
            break
        if signalled.is_set() or (record.state is last_state and now - last_sent < REPORT_EVERY):
            continue
        try:
            if reporter.send(_pb(registry, record, instance)):
                runs.cancel(attempt_id)
        except Refused as exc:
            log.error("report_refused", attempt=attempt_id, reason=str(exc))
            runs.cancel(attempt_id)
        except grpc.RpcError as exc:
            log.warning("report_failed", attempt=attempt_id, code=exc.code().name)
            continue
        last_state, last_sent = record.state, now
    record = runs.get(attempt_id)
    flush()  # the logs are complete in the job's folder before the controller hears "done"
    if signalled.is_set():
        log.warning("run_stopped_by_signal", attempt=attempt_id, state=record.state.value)
        return None
    for attempt in range(FINAL_TRIES):
        try:
            reporter.send(_pb(registry, record, instance))
            log.info("run_reported", attempt=attempt_id, state=record.state.value)
            return record
        except Refused as exc:
            log.error("final_report_refused", attempt=attempt_id, reason=str(exc))
            return None
        except grpc.RpcError as exc:
            log.warning("final_report_failed", attempt=attempt_id, code=exc.code().name)
            time.sleep(min(2.0**attempt, 10.0))
    return None
