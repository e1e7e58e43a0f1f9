"""``tunelab submit | ls | show | logs | cancel | compare``: the experiment queue from a laptop."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

from tunelab.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    add_controller_args,
    call,
    controller_target,
    is_terminal,
    print_json,
    rpc_error,
)
from tunelab.cli.compare_view import render_compare_csv, render_compare_table
from tunelab.cli.watch_view import ExperimentsView
from tunelab.v1 import controller_pb2, controller_pb2_grpc, server_pb2

TIMEOUT = 30.0
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


def stub_for(args: argparse.Namespace) -> tuple[str, controller_pb2_grpc.ControllerStub]:
    address, auth = controller_target(args)
    return address, controller_pb2_grpc.ControllerStub(auth.channel(address))


def _state(value: int) -> str:
    return controller_pb2.ExperimentState.Name(value).removeprefix("EXPERIMENT_STATE_")  # type: ignore[arg-type]


def _attempt_state(value: int) -> str:
    return controller_pb2.AttemptState.Name(value).removeprefix("ATTEMPT_STATE_")  # type: ignore[arg-type]


def _loads(text: str) -> Any:
    return json.loads(text) if text else None


def attempt_json(a: controller_pb2.Attempt, full: bool) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": a.id,
        "number": a.number,
        "host": a.host,
        "state": _attempt_state(a.state),
        "gpus": list(a.gpus),
        "message": a.message,
        "created_at": a.created_at or None,
        "finished_at": a.finished_at or None,
        "progress": _loads(a.progress_json),
        "failure_reason": _reason(a.failure_reason),
        "failure_line": a.failure_line or None,
    }
    if full:
        data["result"] = _loads(a.result_json)
        data["gpu_summary"] = _loads(a.gpu_summary_json)
    return data


def _reason(reason: server_pb2.FailureReason.ValueType) -> str | None:
    return server_pb2.FailureReason.Name(reason).removeprefix("FAILURE_REASON_") if reason else None


def experiment_json(e: controller_pb2.Experiment, full: bool = False) -> dict[str, Any]:
    """The CLI's JSON form of an experiment (a contract: keys are only ever added)."""
    data: dict[str, Any] = {
        "id": e.id,
        "name": e.name,
        "state": _state(e.state),
        "group": e.group,
        "varied": dict(e.varied),
        "priority": e.priority,
        "host_selector": e.host_selector,
        "repeat_index": e.repeat_index,
        "submitted_at": e.submitted_at or None,
        "started_at": e.started_at or None,
        "finished_at": e.finished_at or None,
        "message": e.message,
        "cancel_requested": e.cancel_requested,
        "failure_reason": _reason(e.failure_reason),
        "attempts": [attempt_json(a, full) for a in e.attempts],
    }
    if full:
        data["spec"] = _loads(e.spec_json)
    return data


# --- submit ----------------------------------------------------------------------------------


def cmd_submit(args: argparse.Namespace) -> int:
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    except OSError as exc:
        raise CliError(f"{args.file}: {exc.strerror}", EXIT_USAGE) from None
    target, stub = stub_for(args)
    request = controller_pb2.SubmitExperimentsRequest(
        spec_yaml=text, dry_run=args.dry_run, source=args.file
    )
    experiments = list(
        call(target, lambda: stub.SubmitExperiments(request, timeout=TIMEOUT)).experiments
    )
    if not args.wait:
        if args.json:
            print_json([experiment_json(e, full=args.dry_run) for e in experiments])
        else:
            verb = "would queue" if args.dry_run else "queued"
            print(f"{verb} {len(experiments)} experiment(s), group {experiments[0].group}:")
            for e in experiments:
                varied = ", ".join(f"{k}={v}" for k, v in e.varied.items()) or "baseline"
                print(f"  {e.id}  {e.name}  [{varied}]  on {e.host_selector}")
        return EXIT_OK
    if args.dry_run:
        raise CliError("--wait with --dry-run: nothing would run", EXIT_USAGE)
    final = wait_for(stub, target, [e.id for e in experiments], quiet=args.json)
    if args.json:
        print_json([experiment_json(e, full=True) for e in final])
    failed = [e for e in final if _state(e.state) != "SUCCEEDED"]
    return EXIT_FAILED if failed else EXIT_OK


def wait_for(
    stub: controller_pb2_grpc.ControllerStub, target: str, ids: list[str], quiet: bool
) -> list[controller_pb2.Experiment]:
    """Follow the experiments until all are finished; survives a controller restart."""
    latest: dict[str, controller_pb2.Experiment] = {}
    with ExperimentsView(enabled=is_terminal() and not quiet, plain=not quiet) as view:
        while True:
            try:
                for update in stub.WatchExperiment(controller_pb2.WatchExperimentRequest(ids=ids)):
                    latest[update.experiment.id] = update.experiment
                    view.update(update.experiment)
                if len(latest) == len(ids) and all(
                    _state(e.state) in TERMINAL for e in latest.values()
                ):
                    break
            except grpc.RpcError as exc:
                if exc.code() not in (
                    grpc.StatusCode.UNAVAILABLE,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                ):
                    raise rpc_error(exc, target) from exc
                time.sleep(2.0)  # the controller restarted or the laptop slept: follow again
    return [latest[i] for i in ids]


# --- ls / show -------------------------------------------------------------------------------


def cmd_ls(args: argparse.Namespace) -> int:
    target, stub = stub_for(args)
    states = []
    for name in args.state:
        for part in name.upper().split(","):
            try:
                states.append(controller_pb2.ExperimentState.Value(f"EXPERIMENT_STATE_{part}"))
            except ValueError:
                raise CliError(
                    f"--state {part}: expected QUEUED, RUNNING, SUCCEEDED, FAILED or CANCELLED",
                    EXIT_USAGE,
                ) from None
    request = controller_pb2.ListExperimentsRequest(
        states=states, limit=args.limit, group=args.group or ""
    )
    experiments = call(target, lambda: stub.ListExperiments(request, timeout=TIMEOUT)).experiments
    rows = [experiment_json(e) for e in experiments]
    if args.json:
        print_json(rows)
        return EXIT_OK
    if not rows:
        print("no experiments")
        return EXIT_OK
    table = [("ID", "NAME", "STATE", "HOST", "ATTEMPTS", "MESSAGE")]
    for r in rows:
        host = r["attempts"][-1]["host"] if r["attempts"] else "-"
        table.append(
            (r["id"], r["name"], r["state"], host, str(len(r["attempts"])), r["message"][:60])
        )
    _print_table(table)
    return EXIT_OK


def _print_table(table: Sequence[Sequence[str]]) -> None:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip())


def cmd_show(args: argparse.Namespace) -> int:
    target, stub = stub_for(args)
    request = controller_pb2.GetExperimentRequest(id=args.id)
    experiment = call(target, lambda: stub.GetExperiment(request, timeout=TIMEOUT)).experiment
    data = experiment_json(experiment, full=True)
    if args.json:
        print_json(data)
        return EXIT_OK
    print(f"{data['id']}  {data['name']}  {data['state']}  (group {data['group']})")
    print(f"  varied: {data['varied'] or 'baseline'}   host: {data['host_selector']}")
    if data["message"]:
        print(f"  {data['message']}")
    for a in data["attempts"]:
        gpus = a["gpus"] or "all"
        head = f"  attempt {a['number']} {a['id']} on {a['host']} gpus {gpus}"
        print(f"{head}: {a['state']} {a['message']}")
        for point in (a["result"] or {}).get("points", []):
            print(
                f"    c={point.get('concurrency') or '-'} rate={point.get('request_rate')}: "
                f"{point.get('output_throughput', 0):.1f} tok/s, "
                f"TTFT p50 {point.get('median_ttft_ms', 0):.1f} ms, "
                f"TPOT p50 {point.get('median_tpot_ms', 0):.2f} ms, {point.get('failed', 0)} failed"
            )
        gpu = a["gpu_summary"] or {}
        if gpu.get("samples"):
            print(
                f"    GPU: {gpu.get('mean_power_watts_total')} W mean (sum), "
                f"{gpu.get('benchmark_energy_used_joules', '-')} J while benchmarking "
                f"({gpu.get('benchmark_energy_source', 'no energy figure')}), "
                f"{gpu.get('tokens_per_joule') or '-'} tok/J over {gpu['samples']} scrapes"
            )
    return EXIT_FAILED if data["state"] == "FAILED" else EXIT_OK


# --- logs / cancel / compare -----------------------------------------------------------------


def cmd_logs(args: argparse.Namespace) -> int:
    target, stub = stub_for(args)
    request = controller_pb2.StreamExperimentLogsRequest(
        id=args.id,
        stream="bench" if args.bench else "server",
        follow=args.follow,
        tail_lines=args.tail or 0,
    )
    out = sys.stdout.buffer
    try:
        for chunk in stub.StreamExperimentLogs(request):
            out.write(chunk.data)
            out.flush()
    except grpc.RpcError as exc:
        raise rpc_error(exc, target) from exc
    return EXIT_OK


def cmd_cancel(args: argparse.Namespace) -> int:
    target, stub = stub_for(args)
    request = controller_pb2.CancelExperimentRequest(ids=args.ids)
    experiments = call(target, lambda: stub.CancelExperiment(request, timeout=TIMEOUT)).experiments
    for e in experiments:
        state = _state(e.state)
        note = "cancelling (the agent stops the run)" if state == "RUNNING" else state
        print(f"{e.id}  {e.name}  {note}")
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    target, stub = stub_for(args)
    request = controller_pb2.CompareRunsRequest(ids=args.ids)
    document = json.loads(
        call(target, lambda: stub.CompareRuns(request, timeout=TIMEOUT)).comparison_json
    )
    if args.json:
        print_json(document)
    elif args.csv:
        sys.stdout.write(render_compare_csv(document))
    else:
        print(render_compare_table(document))
    return EXIT_OK


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    submit = sub.add_parser("submit", help="queue the experiments of a spec file (YAML)")
    submit.add_argument("file", help="spec file, or - for stdin")
    submit.add_argument("--wait", action="store_true", help="follow them; exit 1 if any failed")
    submit.add_argument("--dry-run", action="store_true", help="validate and expand only")
    submit.add_argument("--json", action="store_true")
    add_controller_args(submit)
    submit.set_defaults(handler=cmd_submit)

    ls = sub.add_parser("ls", help="list experiments")
    ls.add_argument(
        "--state", action="append", default=[], help="QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED"
    )
    ls.add_argument("--group", help="one submission")
    ls.add_argument("--limit", type=int, default=200)
    ls.add_argument("--json", action="store_true")
    add_controller_args(ls)
    ls.set_defaults(handler=cmd_ls)

    show = sub.add_parser("show", help="one experiment: attempts, results, GPU summary")
    show.add_argument("id", help="experiment id or name")
    show.add_argument("--json", action="store_true")
    add_controller_args(show)
    show.set_defaults(handler=cmd_show)

    logs = sub.add_parser("logs", help="an experiment's server (or --bench) log, via its agent")
    logs.add_argument("id")
    logs.add_argument("-f", "--follow", action="store_true")
    logs.add_argument("--bench", action="store_true", help="the load generator's log")
    logs.add_argument("--tail", type=int, help="start N lines before the end")
    add_controller_args(logs)
    logs.set_defaults(handler=cmd_logs)

    cancel = sub.add_parser("cancel", help="cancel queued or running experiments")
    cancel.add_argument("ids", nargs="+")
    add_controller_args(cancel)
    cancel.set_defaults(handler=cmd_cancel)

    comp = sub.add_parser("compare", help="experiments side by side (ids, names or groups)")
    comp.add_argument("ids", nargs="+")
    fmt = comp.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true")
    fmt.add_argument("--csv", action="store_true", help="one row per experiment and sweep point")
    add_controller_args(comp)
    comp.set_defaults(handler=cmd_compare)
