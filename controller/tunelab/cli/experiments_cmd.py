"""``tunelab submit | ls | show | logs | cancel | compare | report``: the experiment queue from a
laptop."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

from tunelab.cli.clients import ControllerClient
from tunelab.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    PipedLog,
    add_controller_args,
    add_json_arg,
    is_terminal,
    print_json,
    rpc_error,
)
from tunelab.cli.follow import follow_hint, wait_for
from tunelab.cli.keys import group_of, resolve, spec_names
from tunelab.cli.show_view import render_show
from tunelab.v1 import controller_pb2, server_pb2


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
        "mlflow_run_url": a.mlflow_run_url or None,
    }
    if full:
        data["result"] = _loads(a.result_json)
        data["gpu_summary"] = _loads(a.gpu_summary_json)
        data["provenance"] = _loads(a.provenance_json)
        data["timeline_events"] = _loads(a.timeline_events_json) or []
        if a.timeline_json:
            data["timeline"] = _loads(a.timeline_json)
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


# --- submit / wait ---------------------------------------------------------------------------

SPEC_LIMIT = 4 << 20  # the controller's gRPC message limit; a spec is a few KiB


def read_spec(path: str) -> str:
    try:
        if path == "-":
            text = sys.stdin.read(SPEC_LIMIT + 1)
        else:
            with open(path, encoding="utf-8") as handle:
                text = handle.read(SPEC_LIMIT + 1)
    except OSError as exc:
        raise CliError(f"{path}: {exc.strerror}", EXIT_USAGE) from None
    except UnicodeDecodeError:
        raise CliError(f"{path}: not a UTF-8 text file", EXIT_USAGE) from None
    if len(text) > SPEC_LIMIT:
        raise CliError(
            f"{path}: larger than {SPEC_LIMIT >> 20} MiB; a spec is a few KiB", EXIT_USAGE
        )
    return text


def dry_run(text: str, source: str) -> list[controller_pb2.Experiment]:
    """Validate and expand here, with the controller's own code; no controller is contacted."""
    from tunelab.controller.spec.errors import SpecError
    from tunelab.controller.spec.expand import expand_text
    from tunelab.controller.wire import selector_text

    try:
        expanded = expand_text(text, source)
    except SpecError as exc:
        raise CliError(f"rejected: {exc}", EXIT_USAGE) from None
    return [
        controller_pb2.Experiment(
            name=e.name,
            state=controller_pb2.EXPERIMENT_STATE_QUEUED,
            spec_json=json.dumps(e.spec, sort_keys=True),
            varied=e.varied,
            priority=e.priority,
            repeat_index=e.repeat_index,
            host_selector=selector_text(e.host),
        )
        for e in expanded
    ]


def _print_queued(experiments: Sequence[controller_pb2.Experiment], dry: bool) -> None:
    if dry:
        print(f"valid: would queue {len(experiments)} experiment(s):")
    else:
        print(f"queued {len(experiments)} experiment(s), group {experiments[0].group}:")
    for e in experiments:
        varied = ", ".join(f"{k}={v}" for k, v in e.varied.items()) or "baseline"
        print(f"  {e.id or '-'}  {e.name}  [{varied}]  on {e.host_selector}", flush=True)


def cmd_submit(args: argparse.Namespace) -> int:
    if args.wait and args.dry_run:
        raise CliError("--wait with --dry-run: nothing would run", EXIT_USAGE)
    text = read_spec(args.file)
    if args.dry_run and _dry_run_search(text, args.file, args.json):
        return EXIT_OK
    if args.dry_run:
        experiments = dry_run(text, args.file)
        if args.json:
            print_json([experiment_json(e, full=True) for e in experiments])
        else:
            _print_queued(experiments, dry=True)
        return EXIT_OK
    client = ControllerClient.for_args(args)
    response = client.submit_experiments(text, args.file)
    if response.search_group:
        return _submitted_search(client, response.search_group, args)
    experiments = list(response.experiments)
    if not args.wait:
        if args.json:
            print_json([experiment_json(e) for e in experiments])
        else:
            _print_queued(experiments, dry=False)
        return EXIT_OK
    group = experiments[0].group
    if not args.json:
        _print_queued(experiments, dry=False)
        print(f"following (Ctrl-C stops following, not the experiments: {follow_hint([], group)})")
    final = wait_for(client, [e.id for e in experiments], quiet=args.json, group=group)
    return _finished(final, args.json)


def _dry_run_search(text: str, source: str, as_json: bool) -> bool:
    """Validate a search spec here (no controller); False when the text is no search."""
    from tunelab.controller.search.strategies import finite_size
    from tunelab.controller.search.submit import search_from_text
    from tunelab.controller.spec.errors import SpecError

    try:
        found = search_from_text(text, source)
    except SpecError as exc:
        raise CliError(f"rejected: {exc}", EXIT_USAGE) from None
    if found is None:
        return False
    size = finite_size(found.spec)
    if as_json:
        print_json({"search": found.spec.to_dict(), "first_point": found.first})
    else:
        print(
            f"valid: a {found.spec.strategy} search over "
            f"{size if size is not None else 'a continuous'} point(s), at most "
            f"{found.spec.max_trials} trials; the first point runs:"
        )
        print("  " + " ".join(_argv(found.first)))
    return True


def _argv(spec: dict[str, Any]) -> list[str]:
    from tunelab.controller.spec.render import server_argv

    return server_argv(spec)


def _submitted_search(client: ControllerClient, group: str, args: argparse.Namespace) -> int:
    from tunelab.cli.search_cmd import finished, follow_search

    if not args.wait:
        if args.json:
            print_json({"search_group": group})
        else:
            print(
                f"search queued, group {group}: tunelab search show {group}; tunelab wait {group}"
            )
        return EXIT_OK
    if not args.json:
        print(f"search {group}: following (Ctrl-C stops following, not the search)")
    return finished(follow_search(client, group, quiet=args.json), args.json)


def _finished(final: list[controller_pb2.Experiment], as_json: bool) -> int:
    if as_json:
        print_json([experiment_json(e, full=True) for e in final])
    failed = [e for e in final if _state(e.state) != "SUCCEEDED"]
    if not as_json:
        for e in failed:
            print(f"{e.id}  {e.name}  {_state(e.state)}: {e.message}", file=sys.stderr)
    return EXIT_FAILED if failed else EXIT_OK


def cmd_wait(args: argparse.Namespace) -> int:
    """Follow experiments again (after Ctrl-C, or from another terminal) until they finish."""
    client = ControllerClient.for_args(args)
    if len(args.ids) == 1 and args.ids[0].startswith("g-"):
        from tunelab.cli.search_cmd import finished, follow_search, get_search

        if get_search(client, args.ids[0]) is not None:
            doc = follow_search(client, args.ids[0], quiet=args.json)
            return finished(doc, args.json)
    ids, group = resolve(client, args.ids)
    final = wait_for(client, ids, quiet=args.json, group=group)
    return _finished(final, args.json)


# --- ls / show -------------------------------------------------------------------------------


def cmd_ls(args: argparse.Namespace) -> int:
    client = ControllerClient.for_args(args)
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
        states=states, limit=args.limit, group=group_of(client, args.group) if args.group else ""
    )
    experiments = client.list_experiments(request).experiments
    rows = [experiment_json(e) for e in experiments]
    if args.json:
        print_json(rows)
        return EXIT_OK
    if not rows:
        print("no experiments")
        return EXIT_OK
    table = [("ID", "GROUP", "NAME", "STATE", "HOST", "ATTEMPTS", "MESSAGE")]
    for r in rows:
        host = r["attempts"][-1]["host"] if r["attempts"] else "-"
        attempts = str(len(r["attempts"]))
        message = r["message"]
        if r["state"] == "RUNNING" and r["attempts"]:
            last = r["attempts"][-1]  # what runs now: e.g. the server's load progress
            message = f"{last['state']}: {last['message']}" if last["message"] else last["state"]
        table.append((r["id"], r["group"], r["name"], r["state"], host, attempts, message))
    print_table(table)
    return EXIT_OK


def print_table(table: Sequence[Sequence[str]]) -> None:
    """Aligned columns; the last one (a message) is never cut."""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip())


def cmd_show(args: argparse.Namespace) -> int:
    request = controller_pb2.GetExperimentRequest(id=args.id, timeline=args.timeline)
    experiment = ControllerClient.for_args(args).get_experiment(request).experiment
    data = experiment_json(experiment, full=True)
    if args.json:
        print_json(data)
        return EXIT_OK
    sys.stdout.write(render_show(data, _argv))
    return EXIT_FAILED if data["state"] == "FAILED" else EXIT_OK


# --- logs / cancel / compare -----------------------------------------------------------------


def cmd_logs(args: argparse.Namespace) -> int:
    client = ControllerClient.for_args(args)
    request = controller_pb2.StreamExperimentLogsRequest(
        id=args.id,
        stream="job" if args.job else "bench" if args.bench else "server",
        follow=args.follow,
        tail_lines=args.tail or 0,
    )
    out = sys.stdout.buffer
    lines = PipedLog(terminal=is_terminal())
    stream = client.stream_experiment_logs(request)
    try:
        for chunk in stream:
            out.write(lines.convert(chunk.data))
            out.flush()
    except grpc.RpcError as exc:
        raise rpc_error(exc, client.target) from exc
    except KeyboardInterrupt:
        raise CliError(
            f"stopped following; the run goes on (tunelab wait {args.id})", EXIT_INTERRUPTED
        ) from None
    finally:
        stream.cancel()  # an open stream keeps the process alive at exit
    return EXIT_OK


def cmd_cancel(args: argparse.Namespace) -> int:
    """Cancel experiments by id or name, a whole group, or a spec's latest submission; a
    search's group cancels the search (no further trials) and its running trials."""
    from tunelab.cli.search_cmd import cancel_search, get_search

    client = ControllerClient.for_args(args)
    keys = []
    for key in spec_names(client, args.ids):
        if key.startswith("g-") and get_search(client, key) is not None:
            cancel_search(client, key, as_json=False)
        else:
            keys.append(key)
    if not keys:
        return EXIT_OK
    ids, _ = resolve(client, keys)
    request = controller_pb2.CancelExperimentRequest(ids=ids)
    experiments = client.cancel_experiment(request).experiments
    for e in experiments:
        state = _state(e.state)
        note = "cancelling (the agent stops the run)" if state == "RUNNING" else state
        print(f"{e.id}  {e.name}  {note}")
    return EXIT_OK


def _percent(text: str, below: float = 1.0) -> float:
    """``2%`` or ``0.02`` -> 0.02, for --min-effect and --max-cv: the spec's reader (a bare 2
    is refused: before, it meant 2 % here and 200 % in a spec)."""
    from tunelab.controller.spec.schema import read_fraction  # not for --help

    try:
        return read_fraction(text, below, zero=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def comparison(args: argparse.Namespace) -> dict[str, Any]:
    """The controller's comparison; effects recomputed here when a flag asks for other
    thresholds, correction or primary metric than the document's (the launches it holds are all
    that is needed)."""
    from tunelab.analysis.effects import (  # not for --help
        CORRECTIONS,
        EffectSettings,
        effects_document,
    )

    client = ControllerClient.for_args(args)
    request = controller_pb2.CompareRunsRequest(ids=spec_names(client, args.ids))
    document: dict[str, Any] = json.loads(client.compare_runs(request).comparison_json)
    held = EffectSettings.from_dict(document.get("settings") or {})
    settings = EffectSettings(
        min_effect=held.min_effect if args.min_effect is None else args.min_effect,
        max_cv=held.max_cv if args.max_cv is None else args.max_cv,
        correction=held.correction if args.correction is None else CORRECTIONS[args.correction],
        primary=held.primary if args.primary is None else args.primary or None,
    )
    if settings != held or "correction" not in document:
        document.update(effects_document(document["experiments"], settings))
    return document


def cmd_compare(args: argparse.Namespace) -> int:
    from tunelab.cli.compare_view import render_compare_csv, render_compare_table

    document = comparison(args)
    if args.json:
        print_json(document)
    elif args.csv:
        sys.stdout.write(render_compare_csv(document))
    else:
        print(render_compare_table(document))
    return EXIT_OK


def _write_watch_report(args: argparse.Namespace) -> bool:
    """``tunelab report WATCH_NAME``: the watch's history page; False when no watch has the
    name (then it names experiments, as before)."""
    from tunelab.cli.watches_cmd import watch_report

    page = watch_report(ControllerClient.for_args(args), args.ids[0])
    if page is None:
        return False
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", args.ids[0])[:80]
    out = Path(args.out or f"report-watch-{safe}.html")
    try:
        out.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise CliError(f"{out}: {exc.strerror}", EXIT_USAGE) from None
    print(f"report: {out.resolve()}")
    return True


def cmd_report(args: argparse.Namespace) -> int:
    from tunelab.analysis.report import write_report, write_search_report
    from tunelab.cli.search_cmd import get_search

    search = None
    if len(args.ids) == 1 and args.ids[0].startswith("g-"):
        search = get_search(ControllerClient.for_args(args), args.ids[0])
    elif len(args.ids) == 1 and _write_watch_report(args):
        return EXIT_OK
    document = comparison(args)
    if not args.no_profiles:
        from tunelab.cli.profile_cmd import ablation_profiles

        args.top, args.max_size = 20, 2 * 1000 * 1000 * 1000
        profiles = ablation_profiles(args, document["experiments"])
        if profiles["diffs"]:
            document["profiles"] = profiles
    if not args.no_timelines:
        from tunelab.cli.timeline_view import fetch_timelines

        document["timelines"] = fetch_timelines(
            ControllerClient.for_args(args), document["experiments"]
        )
    default = re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(args.ids))[:80]
    out = Path(args.out or f"report-{default}.html")
    try:
        if search is not None:
            write_search_report(search, document, out, title=args.ids[0])
        else:
            write_report(document, out, title=" ".join(args.ids))
    except OSError as exc:
        raise CliError(f"{out}: {exc.strerror}", EXIT_USAGE) from None
    print(f"report: {out.resolve()}")
    return EXIT_OK


def _add_effect_args(parser: argparse.ArgumentParser) -> None:
    """Defaults live in tunelab.analysis.effects.EffectSettings (not imported for --help)."""
    parser.add_argument(
        "--min-effect",
        type=_percent,
        metavar="PCT",
        help="an interval inside +-PCT is 'no meaningful difference': 5%% or 0.05 (default 2%%)",
    )
    parser.add_argument(
        "--max-cv",
        type=lambda text: _percent(text, 10.0),
        metavar="PCT",
        help="launches spread more than this are 'not enough repeats': 10%% or 0.1 (default 10%%)",
    )
    parser.add_argument(
        "--correction",
        choices=("bh", "holm"),
        help="how the rows of the comparison are corrected as one family: bh, the false "
        "discovery rate (Benjamini-Hochberg, the default), or holm, the family-wise error "
        "(default: the spec's compare.correction, else bh)",
    )
    parser.add_argument(
        "--primary",
        metavar="METRIC",
        choices=("output_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
                 "p99_tpot_ms", "median_itl_ms", "p99_itl_ms", "tokens_per_joule", ""),
        help="judge this metric's rows first, as their own family; the rest only with the "
        "alpha its discoveries pass on (default: the spec's compare.primary; '' for none)",
    )  # fmt: skip


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    submit = sub.add_parser("submit", help="queue the experiments of a spec file (YAML)")
    submit.add_argument("file", help="spec file, or - for stdin")
    submit.add_argument(
        "--wait", action="store_true", help="follow them until they finish; exit 1 if any failed"
    )
    submit.add_argument(
        "--dry-run",
        action="store_true",
        help="validate and expand here, without a controller; queue nothing",
    )
    add_json_arg(submit, "the experiments")
    add_controller_args(submit)
    submit.set_defaults(handler=cmd_submit)

    wait = sub.add_parser(
        "wait", help="follow experiments until they finish (again, e.g. after Ctrl-C)"
    )
    wait.add_argument("ids", nargs="+", metavar="ID|NAME|GROUP", help="experiments to follow")
    add_json_arg(wait, "the finished experiments")
    add_controller_args(wait)
    wait.set_defaults(handler=cmd_wait)

    ls = sub.add_parser("ls", help="list experiments")
    ls.add_argument(
        "--state",
        action="append",
        default=[],
        help="only these: QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED (repeatable, or a,b)",
    )
    ls.add_argument(
        "--group",
        help="only one submission: the g-... that submit printed, or a spec's name (its latest)",
    )
    ls.add_argument("--limit", type=int, default=200, help="at most this many (default 200)")
    add_json_arg(ls, "the experiments")
    add_controller_args(ls)
    ls.set_defaults(handler=cmd_ls)

    show = sub.add_parser("show", help="one experiment: spec, attempts, results, GPU summary")
    show.add_argument("id", help="experiment id or name")
    show.add_argument(
        "--timeline",
        action="store_true",
        help="each attempt's timeline too (every series per window with --json; docs/timeline.md)",
    )
    add_json_arg(show, "the experiment, spec and results included")
    add_controller_args(show)
    show.set_defaults(handler=cmd_show)

    logs = sub.add_parser("logs", help="an experiment's server (or --bench) log, via its agent")
    logs.add_argument("id", help="experiment id or name")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing until it ends")
    logs.add_argument("--bench", action="store_true", help="the load generator's log")
    logs.add_argument(
        "--job", action="store_true", help="a Slurm job's own output (its run-once's log)"
    )
    logs.add_argument("--tail", type=int, help="start N lines before the end")
    add_controller_args(logs)
    logs.set_defaults(handler=cmd_logs)

    cancel = sub.add_parser("cancel", help="cancel queued or running experiments, or a search")
    cancel.add_argument(
        "ids",
        nargs="+",
        metavar="ID",
        help="experiment ids or names, submission groups (g-...), or a spec's name (its latest "
        "submission); a search's group or name cancels the search",
    )
    add_controller_args(cancel)
    cancel.set_defaults(handler=cmd_cancel)

    comp = sub.add_parser(
        "compare", help="experiments side by side (ids, names, groups or a spec's name)"
    )
    comp.add_argument(
        "ids",
        nargs="+",
        metavar="ID|NAME|GROUP",
        help="experiment ids or names, submission groups (g-...), or a spec's name (its latest "
        "submission)",
    )
    fmt = comp.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the comparison document")
    fmt.add_argument("--csv", action="store_true", help="one row per experiment and sweep point")
    _add_effect_args(comp)
    add_controller_args(comp)
    comp.set_defaults(handler=cmd_compare)

    report = sub.add_parser("report", help="one self-contained HTML report (ids, names or groups)")
    report.add_argument(
        "ids",
        nargs="+",
        metavar="ID|NAME|GROUP",
        help="experiment ids or names, submission groups (g-...), a spec's name, or a "
        "watch's name (its history)",
    )
    report.add_argument("--out", help="file to write (default report-<ids>.html)")
    report.add_argument(
        "--no-profiles",
        action="store_true",
        help="leave out the profile diff (fetching the kept traces can take a while)",
    )
    report.add_argument(
        "--no-timelines",
        action="store_true",
        help="leave out the attempts' timeline panels (docs/timeline.md)",
    )
    _add_effect_args(report)
    add_controller_args(report)
    report.set_defaults(handler=cmd_report)
