"""``tunelab server profile ID``: profile a server of ``server start --profile`` under load.

The agent (``ProfileServer``) starts the engine's profiler, holds the window, always sends the
stop, and keeps the traces in the server's trace folder; this command then fetches them by name
(``FetchProfile`` with ``server_id``) and prints what ``tunelab profile`` prints for them: the
same summary, the same ``--json`` keys (plus ``server_profile``: the agent's account of the
window and its warnings). ``--out DIR`` keeps the traces (they open in Perfetto as written).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import grpc

from tunelab.cli.clients import AgentClient
from tunelab.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    add_agent_args,
    is_terminal,
    print_json,
    rpc_error,
)
from tunelab.cli.profile_cmd import (
    DEFAULT_MAX_SIZE,
    FETCH_TIMEOUT,
    render_summary,
    save_trace,
    summarize_files,
)
from tunelab.common.durations import parse_duration
from tunelab.v1 import agent_pb2

START_ALLOWANCE = 30.0  # the start's own timeout on the agent
STOP_DEFAULT = 120.0
MARGIN = 60.0  # keeping (gzipping) the traces and the answer
REQUESTS_BOUND = 600.0  # the agent's bound on a window counted in requests


def register(ssub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = ssub.add_parser(
        "profile",
        help="profile a server started with --profile while its load runs; print the summary",
        description="Start the engine's profiler on a READY server started with --profile, keep "
        "it on for a window while your own load (or a tunelab bench against the server) runs, "
        "stop it (always), then fetch the traces and print what `tunelab profile` prints.",
    )
    add_agent_args(p)
    p.add_argument("id", help="server id or name")
    window = p.add_mutually_exclusive_group()
    window.add_argument("--window", help="how long to profile, e.g. 5s (at most 10m)")
    window.add_argument(
        "--requests",
        type=int,
        default=0,
        metavar="N",
        help="profile until the engine completed N requests (vllm, sglang; at most 10m)",
    )
    p.add_argument(
        "--activities", default="", help="cpu,gpu (default both; vLLM records both always)"
    )
    p.add_argument(
        "--max-bytes",
        type=int,
        default=0,
        help="cap on this profile's kept traces on the agent (default 500 MB)",
    )
    p.add_argument("--start-url", default="", help="generic servers: the profiler's start path/URL")
    p.add_argument("--stop-url", default="", help="generic servers: the profiler's stop path/URL")
    p.add_argument("--stop-timeout", default="", help="how long the stop may take (default 2m)")
    p.add_argument("--out", type=Path, default=None, help="save the traces in this folder")
    p.add_argument(
        "--max-size",
        type=int,
        default=DEFAULT_MAX_SIZE,
        help=f"refuse to fetch a trace larger than this many bytes ({DEFAULT_MAX_SIZE})",
    )
    p.add_argument("--top", type=int, default=20, help="how many kernels/ops to list (20)")
    p.add_argument("--json", action="store_true", help="print JSON (the keys of tunelab profile)")
    p.set_defaults(handler=cmd_profile)


def _seconds(flag: str, text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise CliError(f"{flag}: {exc}", EXIT_USAGE) from None


def _request(args: argparse.Namespace) -> agent_pb2.ProfileServerRequest:
    if not args.window and not args.requests:
        raise CliError("give --window (e.g. 5s) or --requests N", EXIT_USAGE)
    if args.requests < 0:
        raise CliError("--requests must be at least 1", EXIT_USAGE)
    if args.top < 1:
        raise CliError("--top must be at least 1", EXIT_USAGE)
    activities = [a.strip().lower() for a in args.activities.split(",") if a.strip()]
    for activity in activities:
        if activity not in ("cpu", "gpu"):
            raise CliError(f"--activities: {activity!r} is not cpu or gpu", EXIT_USAGE)
    return agent_pb2.ProfileServerRequest(
        id=args.id,
        window_seconds=_seconds("--window", args.window) if args.window else 0.0,
        window_requests=args.requests,
        activities=activities,
        max_bytes=args.max_bytes,
        start_url=args.start_url,
        stop_url=args.stop_url,
        stop_timeout_seconds=_seconds("--stop-timeout", args.stop_timeout)
        if args.stop_timeout
        else 0.0,
    )


def outcome_json(pb: agent_pb2.ProfileServerResponse) -> dict[str, Any]:
    """The agent's account of one profile (``server_profile`` in ``--json``)."""
    return {
        "server_id": pb.server_id,
        "profile_id": pb.profile_id,
        "ok": pb.ok,
        "started_at": pb.started_at or None,
        "window_seconds": pb.window_seconds,
        "requests": pb.requests if pb.requests >= 0 else None,
        "traces": [{"name": t.name, "size_bytes": t.size_bytes} for t in pb.traces],
        "other_files": [{"name": t.name, "size_bytes": t.size_bytes} for t in pb.other_files],
        "total_bytes": pb.total_bytes,
        "warnings": list(pb.warnings),
    }


def _run_profile(
    client: AgentClient, args: argparse.Namespace, request: agent_pb2.ProfileServerRequest
) -> agent_pb2.ProfileServerResponse:
    window = request.window_seconds or REQUESTS_BOUND
    stop = request.stop_timeout_seconds or STOP_DEFAULT
    timeout = START_ALLOWANCE + window + 2 * stop + MARGIN  # the stop is retried once
    talk = is_terminal() and not args.json
    final = None
    stream = client.profile_server(request, timeout)
    try:
        for update in stream:
            if update.done:
                final = update
                break
            if talk:
                how = (
                    f"{window:g} s"
                    if request.window_seconds
                    else f"{request.window_requests} requests"
                )
                print(
                    f"profiling {update.server_id} ({update.profile_id}) for {how}; "
                    "run your load now (Ctrl-C ends the window early)",
                    file=sys.stderr,
                )
    except grpc.RpcError as exc:
        raise rpc_error(exc, args.agent, daemon="agent", timeout=timeout) from exc
    finally:
        stream.cancel()
    if final is None:
        raise CliError("the agent ended the profile without an outcome", EXIT_FAILED)
    return final


def cmd_profile(args: argparse.Namespace) -> int:
    request = _request(args)
    client = AgentClient.for_args(args)
    try:
        outcome = _run_profile(client, args, request)
    except KeyboardInterrupt:
        raise CliError(
            "stopped: the agent ends the window, sends the stop and keeps the traces on the "
            f"agent host, in the server's profile_dir (tunelab server status {args.id} --json)",
            EXIT_INTERRUPTED,
        ) from None
    account = outcome_json(outcome)
    if not outcome.traces:
        if args.json:
            print_json({"server_profile": account})
        else:
            for warning in outcome.warnings:
                print(f"warning: {warning}", file=sys.stderr)
            print(f"{outcome.server_id}: {outcome.profile_id} kept no trace", file=sys.stderr)
        return EXIT_FAILED
    with tempfile.TemporaryDirectory(prefix="tunelab-server-profile-") as tmp:
        folder = args.out / outcome.profile_id if args.out else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        names = [t.name for t in outcome.traces]
        if args.out:  # the engine's own tables too (vLLM's key_averages)
            names += [t.name for t in outcome.other_files]
        files = [_fetch(client, outcome.server_id, name, folder, args.max_size) for name in names]
        summary = summarize_files(files[: len(outcome.traces)], outcome.profile_id, args.top, None)
    if args.json:
        print_json({**summary.to_json(), "server_profile": account})
        return EXIT_OK
    for warning in outcome.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(
        f"{outcome.server_id} {outcome.profile_id}: window {outcome.window_seconds:.3f} s"
        + (f", {outcome.requests} requests completed" if outcome.requests >= 0 else "")
    )
    print(render_summary(summary))
    if args.out:
        print(f"saved in {folder}")
    return EXIT_OK


def _fetch(client: AgentClient, server_id: str, name: str, folder: Path, limit: int) -> Path:
    request = agent_pb2.FetchProfileRequest(server_id=server_id, name=name, max_bytes=limit + 1)
    return save_trace(
        lambda: client.fetch_profile(request, FETCH_TIMEOUT),
        name,
        folder,
        limit,
        (client.target, client.daemon),
    )
