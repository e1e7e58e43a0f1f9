"""``tunelab server``: direct control of one agent's inference servers from a laptop."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import grpc

from tunelab.cli import server_profile
from tunelab.cli.clients import AgentClient
from tunelab.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    PipedLog,
    add_agent_args,
    is_terminal,
    print_json,
    rpc_error,
)
from tunelab.cli.progress_view import ServerProgressView
from tunelab.common import engineflags
from tunelab.common.durations import format_duration, parse_duration
from tunelab.common.textwidth import table as aligned
from tunelab.v1 import agent_pb2, server_pb2

STATUS_LOG_LINES = 5
FAILED_STATES = {server_pb2.SERVER_STATE_FAILED, server_pb2.SERVER_STATE_KILL_FAILED}


def state_name(state: server_pb2.ServerState.ValueType) -> str:
    return server_pb2.ServerState.Name(state).removeprefix("SERVER_STATE_")


def server_json(server: server_pb2.Server) -> dict[str, Any]:
    """The CLI's JSON form of a server (a contract: keys are only ever added)."""
    progress = None
    if server.HasField("progress"):
        p = server.progress
        progress = {
            "label": p.label,
            "done": p.done,
            "total": p.total,
            "rate_per_second": p.rate_per_second,
            "eta_seconds": p.eta_seconds if p.eta_seconds >= 0 else None,
            "phase": phase_name(p.phase),
        }
    return {
        "id": server.id,
        "name": server.spec.name or server.id,
        "state": state_name(server.state),
        "pid": server.pid,
        "exit_code": server.exit_code if server.HasField("exit_code") else None,
        "progress": progress,
        "ready_seconds": server.ready_seconds or None,
        "port": server.spec.port,
        "argv": list(server.spec.argv),
        "message": server.message,
        "log_tail": list(server.log_tail),
        "log_path": server.log_path,
        "started_at": server.started_at or None,
        "ready_at": server.ready_at or None,
        "finished_at": server.finished_at or None,
        "gpu_check_skipped": server.gpu_check_skipped,
        "gpu_memory_bytes": server.gpu_memory_bytes,
        "engine": server.engine or None,
        "phase": phase_name(server.phase),
        "phase_started_at": server.phase_started_at or None,
        "phases": [
            {"phase": phase_name(s.phase), "started_at": s.started_at, "seconds": s.seconds}
            for s in server.phases
        ],
        "failure_reason": failure_name(server.failure_reason),
        "failure_line": server.failure_line or None,
        "probe_requests": server.probe_requests,
        "leftovers_removed": list(server.leftovers_removed),
        "profilable": server.spec.profile,  # started with --profile: `server profile` works
        "profiling": server.profiling,  # a profile's window is open now
        "profile_dir": server.profile_dir or None,  # where the agent keeps its traces
    }


def phase_name(phase: server_pb2.ServerPhase.ValueType) -> str | None:
    return server_pb2.ServerPhase.Name(phase).removeprefix("SERVER_PHASE_") if phase else None


def failure_name(reason: server_pb2.FailureReason.ValueType) -> str | None:
    return server_pb2.FailureReason.Name(reason).removeprefix("FAILURE_REASON_") if reason else None


def _env_pairs(values: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"--env {item!r}: expected NAME=VALUE", EXIT_USAGE)
        env[key] = value
    return env


def _duration(flag: str, text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise CliError(f"{flag}: {exc}", EXIT_USAGE) from None


def _get(client: AgentClient, args: argparse.Namespace) -> server_pb2.Server:
    """The server ``args.id`` names (an id or a name), as the agent has it now."""
    return client.get_server(agent_pb2.GetServerRequest(id=args.id)).server


# --- start ---------------------------------------------------------------------------------


def cmd_start(args: argparse.Namespace) -> int:
    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise CliError(
            "give the server command after --, e.g. -- python -m vllm.entrypoints...", EXIT_USAGE
        )
    spec = server_pb2.ServerSpec(
        name=args.name or "",
        argv=argv,
        env=_env_pairs(args.env),
        cwd=args.cwd or "",
        port=args.port,
        ready_path=args.ready_path,
        ready_model=args.ready_model or "",
        startup_timeout_seconds=_duration("--startup-timeout", args.startup_timeout),
        stop_grace_seconds=_duration("--grace", args.grace),
        engine=args.engine or "",
        profile=args.profile,
    )
    client = AgentClient.for_args(args)
    response = client.start_server(agent_pb2.StartServerRequest(id=args.id or "", spec=spec))
    server = response.server
    if args.wait:
        server = _wait_ready(client, args, server)
    return _report(server, args.json)


def _report(server: server_pb2.Server, as_json: bool) -> int:
    if as_json:
        print_json(server_json(server))
    else:
        _print_summary(server)
    return EXIT_FAILED if server.state in FAILED_STATES else EXIT_OK


def cmd_wait(args: argparse.Namespace) -> int:
    """Follow a server that is starting (again, e.g. after Ctrl-C) until READY or FAILED."""
    client = AgentClient.for_args(args)
    return _report(_wait_ready(client, args, _get(client, args)), args.json)


def _wait_ready(
    client: AgentClient, args: argparse.Namespace, server: server_pb2.Server
) -> server_pb2.Server:
    """Follow WatchServer until READY or terminal, reconnecting if the stream drops."""
    view = ServerProgressView(enabled=is_terminal() and not args.json)
    last = server
    try:
        return _follow(client, args, view, last)
    except KeyboardInterrupt:
        name = last.spec.name or last.id
        raise CliError(
            f"stopped following; {name} goes on starting on the agent. Follow it again with: "
            f"tunelab server wait --agent {args.agent} {name} (or server stop to end it)",
            EXIT_INTERRUPTED,
        ) from None


def _follow(
    client: AgentClient,
    args: argparse.Namespace,
    view: ServerProgressView,
    server: server_pb2.Server,
) -> server_pb2.Server:
    last = server
    with view:
        while True:
            try:
                stream = client.watch_server(agent_pb2.WatchServerRequest(id=server.id))
                try:
                    for update in stream:
                        last = update.server
                        view.update(last)
                        if last.state in FAILED_STATES or last.state in (
                            server_pb2.SERVER_STATE_READY,
                            server_pb2.SERVER_STATE_STOPPED,
                        ):
                            return last
                finally:
                    stream.cancel()  # an open stream keeps the process alive at exit
                return last
            except grpc.RpcError as exc:
                error = rpc_error(exc, args.agent, daemon="agent")
                if exc.code() != grpc.StatusCode.UNAVAILABLE:
                    raise error from exc
                time.sleep(1.0)  # the agent restarted: re-attach to the same server


def _print_summary(server: server_pb2.Server) -> None:
    data = server_json(server)
    line = f"{data['id']}  {data['state']}  pid {data['pid']}  port {data['port']}"
    if data["ready_seconds"]:
        line += f"  ready in {format_duration(data['ready_seconds'])}"
    print(line)
    if server.state in FAILED_STATES:
        # the message already holds the reason, its line and the exit code when the agent put
        # them there: each is said once (argparse's error was printed three times, issue 37.7)
        message = server.message
        print(f"  {message}")
        failure_line = data["failure_line"] or ""
        if data["failure_reason"] and not (failure_line and failure_line in message):
            print(f"  failure reason {data['failure_reason']}: {failure_line}")
        if data["exit_code"] is not None and f"exit code {data['exit_code']}" not in message:
            print(f"  exit code {data['exit_code']}")
        tail = list(server.log_tail)
        if data["failure_reason"] == "BAD_ARGUMENT":  # the error line says it: not its usage
            tail = [line for line in tail if not engineflags.usage_line(line)]
        for line in tail:
            if not (failure_line and line.strip() == failure_line and failure_line in message):
                print(f"  | {line}")
        if len(tail) < len(server.log_tail):
            print(f"  (the server's usage lines left out: tunelab server logs {server.id})")


# --- ls / status -----------------------------------------------------------------------------


def cmd_ls(args: argparse.Namespace) -> int:
    client = AgentClient.for_args(args)
    response = client.list_servers(agent_pb2.ListServersRequest(include_finished=args.all))
    rows = [server_json(s) for s in response.servers]
    if args.json:
        print_json(rows)
        return EXIT_OK
    if not rows:
        print("no servers" + ("" if args.all else " (--all shows finished ones)"))
        return EXIT_OK
    header = ("ID", "NAME", "STATE", "PHASE", "PID", "PORT", "PROGRESS", "READY IN")
    table = [header]
    for row in rows:
        progress = row["progress"]
        table.append(
            (
                row["id"],
                row["name"],
                row["state"],
                (row["phase"] or "-").lower(),
                str(row["pid"]),
                str(row["port"]),
                f"{progress['done']}/{progress['total']}" if progress else "-",
                format_duration(row["ready_seconds"]) if row["ready_seconds"] else "-",
            )
        )
    print("\n".join(aligned(table, cut=1)))  # the name is cut first (the id names it)
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    client = AgentClient.for_args(args)
    server = _get(client, args)
    if args.json:
        data = server_json(server)
        if not data["log_tail"]:  # a live server's reply has none: the same lines as the text
            data["log_tail"] = _last_lines(client, server.id)
        print_json(data)
    else:
        _print_summary(server)
        phase = phase_name(server.phase)
        if phase and server.state != server_pb2.SERVER_STATE_READY:
            print(f"  phase {phase}")
        if server.HasField("progress") and server.state != server_pb2.SERVER_STATE_READY:
            p = server.progress
            print(f"  {p.label}: {p.done}/{p.total}")
        if server.state not in FAILED_STATES:  # failed ones printed their log tail above
            if server.message:
                print(f"  {server.message}")
            if server.spec.profile:
                now = "; profiling now" if server.profiling else ""
                print(f"  profilable (tunelab server profile {server.id}){now}")
            for tail in list(server.log_tail) or _last_lines(client, server.id):
                print(f"  | {tail}")
    return EXIT_FAILED if server.state in FAILED_STATES else EXIT_OK


def _last_lines(client: AgentClient, server_id: str) -> list[str]:
    """The log's last lines (a live server's reply carries none), one per progress redraw."""
    request = agent_pb2.StreamLogsRequest(server_id=server_id, tail_lines=STATUS_LOG_LINES)
    data = b"".join(chunk.data for chunk in client.read_logs(request))
    text = PipedLog(terminal=False).convert(data).decode("utf-8", errors="replace")
    return [line for line in text.splitlines() if line.strip()][-STATUS_LOG_LINES:]


# --- logs ------------------------------------------------------------------------------------


def cmd_logs(args: argparse.Namespace) -> int:
    client = AgentClient.for_args(args)
    try:
        return _stream_logs(client, args)
    except KeyboardInterrupt:
        raise CliError(
            f"stopped following; the server goes on (tunelab server status --agent {args.agent} "
            f"{args.id})",
            EXIT_INTERRUPTED,
        ) from None


def _piped_tail(client: AgentClient, args: argparse.Namespace) -> int:
    """``--tail N`` into a pipe: the agent counts newline-ended lines, but one of those may hold
    dozens of ``\r`` progress redraws that the pipe gets as lines; print the last N of those.
    Returns the offset after what was read (``-f`` goes on from there)."""
    request = agent_pb2.StreamLogsRequest(server_id=args.id, tail_lines=args.tail)
    chunks = client.read_logs(request)
    data = PipedLog(terminal=False).convert(b"".join(c.data for c in chunks))
    kept = data.splitlines(keepends=True)[-args.tail :] if args.tail > 0 else []
    sys.stdout.buffer.write(b"".join(kept))
    sys.stdout.buffer.flush()
    return max((c.offset + len(c.data) for c in chunks), default=0)


def _stream_logs(client: AgentClient, args: argparse.Namespace) -> int:
    out = sys.stdout.buffer
    lines = PipedLog(terminal=is_terminal())
    offset = 0
    tail = args.tail
    if tail is not None and not is_terminal():
        offset = _piped_tail(client, args)
        if not args.follow:
            return EXIT_OK
        tail = None
    while True:
        request = agent_pb2.StreamLogsRequest(server_id=args.id, follow=args.follow)
        if tail is not None:
            request.tail_lines = tail
        else:
            request.offset = offset
        stream = client.stream_logs(request)
        try:
            for chunk in stream:
                out.write(lines.convert(chunk.data))
                out.flush()
                offset = chunk.offset + len(chunk.data)
                if chunk.eof:
                    return EXIT_OK
            return EXIT_OK
        except grpc.RpcError as exc:
            if not args.follow or exc.code() != grpc.StatusCode.UNAVAILABLE:
                raise rpc_error(exc, args.agent, daemon="agent") from exc
            tail = None  # resume exactly where the stream broke
            time.sleep(1.0)
        finally:
            stream.cancel()  # an open stream keeps the process alive at exit


# --- stop ------------------------------------------------------------------------------------


def cmd_stop(args: argparse.Namespace) -> int:
    client = AgentClient.for_args(args)
    grace = _duration("--grace", args.grace) if args.grace else 0.0
    current = _get(client, args)
    budget = (grace or current.spec.stop_grace_seconds or 30.0) + 90.0
    response = client.stop_server(
        agent_pb2.StopServerRequest(id=args.id, grace_seconds=grace), timeout=budget
    )
    server = response.server
    if args.json:
        print_json(server_json(server))
    else:
        print(f"{server.id}  {state_name(server.state)}  {server.message}")
    return EXIT_FAILED if server.state == server_pb2.SERVER_STATE_KILL_FAILED else EXIT_OK


# --- parsers ---------------------------------------------------------------------------------


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    server = sub.add_parser("server", help="start, watch and stop inference servers on one agent")
    ssub = server.add_subparsers(dest="server_command", required=True, metavar="SUBCOMMAND")

    start = ssub.add_parser(
        "start", help="start a server: tunelab server start --port P -- ARGV..."
    )
    add_agent_args(start)
    start.add_argument("--id", help="caller-chosen id; repeating it returns the same server")
    start.add_argument("--name", help="unique name among live servers (default: the id)")
    start.add_argument(
        "--env", action="append", default=[], metavar="K=V", help="environment addition"
    )
    start.add_argument("--cwd", help="working directory (absolute)")
    start.add_argument("--port", type=int, required=True, help="port the server listens on")
    start.add_argument("--ready-path", default="/health", help="readiness path (any 2xx = ready)")
    start.add_argument("--ready-model", help="also require this model id in /v1/models")
    start.add_argument(
        "--engine",
        choices=("vllm", "sglang", "generic"),
        help="engine profile (phases, failure reasons); default: detected from the argv",
    )
    start.add_argument("--startup-timeout", default="20m", help="startup budget (default 20m)")
    start.add_argument("--grace", default="30s", help="SIGTERM grace on stop (default 30s)")
    start.add_argument("--wait", action="store_true", help="follow the load until READY or FAILED")
    start.add_argument(
        "--profile",
        action="store_true",
        help="start it ready to be profiled (the engine's profiler flags, a trace folder of the "
        "agent's): then `tunelab server profile ID`",
    )
    start.add_argument("--json", action="store_true", help="print one JSON object")
    start.add_argument(
        "argv",
        nargs=argparse.REMAINDER,
        help="-- the server's argv; a relative program path is resolved on the agent, so give "
        "an absolute one, a name on the agent's PATH, or {python} for the agent's own Python",
    )
    start.set_defaults(handler=cmd_start)

    wait = ssub.add_parser("wait", help="follow a starting server until READY or FAILED")
    add_agent_args(wait)
    wait.add_argument("id", help="server id or name")
    wait.add_argument("--json", action="store_true", help="print one JSON object")
    wait.set_defaults(handler=cmd_wait)

    ls = ssub.add_parser("ls", help="list servers")
    add_agent_args(ls)
    ls.add_argument("--all", action="store_true", help="include stopped and failed servers")
    ls.add_argument("--json", action="store_true", help="print a JSON list")
    ls.set_defaults(handler=cmd_ls)

    status = ssub.add_parser("status", help="one server's state, progress and last log lines")
    add_agent_args(status)
    status.add_argument("id", help="server id or name")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.set_defaults(handler=cmd_status)

    logs = ssub.add_parser("logs", help="print a server's log")
    add_agent_args(logs)
    logs.add_argument("id", help="server id or name")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing until it ends")
    logs.add_argument("--tail", type=int, help="start N lines before the end")
    logs.set_defaults(handler=cmd_logs)

    stop = ssub.add_parser("stop", help="stop a server and wait until its GPUs are free")
    add_agent_args(stop)
    stop.add_argument("id", help="server id or name")
    stop.add_argument("--grace", help="override the SIGTERM grace period")
    stop.add_argument("--json", action="store_true", help="print one JSON object")
    stop.set_defaults(handler=cmd_stop)

    server_profile.register(ssub)
