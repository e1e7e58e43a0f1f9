"""``tunelab watch add FILE | ls | show NAME | pause NAME | resume NAME | rm NAME``: a spec run on
a schedule by the controller, each occurrence judged against a baseline (docs/watch.md). The
documents are the controller's (GetWatch, ListWatches); the lines under each occurrence are
``tunelab.analysis.watch.verdict_line``'s."""

from __future__ import annotations

import argparse
import datetime
import json
from typing import Any

from tunelab.cli.clients import ControllerClient
from tunelab.cli.common import (
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    add_controller_args,
    add_json_arg,
    print_json,
)

SHOWN_OCCURRENCES = 10  # the text `show` prints the newest ones; --json has them all


def _when(stamp: Any) -> str:
    if not isinstance(stamp, int | float):
        return "-"
    return datetime.datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M:%S")


def get_watch(client: ControllerClient, name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(client.get_watch(name).watch_json)
    return found


def _summary_line(w: dict[str, Any]) -> str:
    return (
        f"{w['name']:<24} {w['state']:<7} every {w['every']:<12} "
        f"{w['occurrences_count']:>4} occurrences  last: {w['last_verdict'] or '-'}  "
        f"next: {_when(w['next_due']) if w['state'] == 'active' else '(paused)'}"
    )


def render_watch(doc: dict[str, Any], last: int = SHOWN_OCCURRENCES) -> str:
    from tunelab.analysis.watch import verdict_line

    head = (
        f"watch {doc['name']} ({doc['state']}): every {doc['every']}, {doc['launches']} launches, "
        f"baseline {doc['baseline']}, margin {doc['margin_pct']:g}%"
    )
    lines = [
        head,
        f"metrics: {', '.join(doc['metrics'])}",
        f"next occurrence: {_when(doc['next_due']) if doc['state'] == 'active' else '(paused)'}",
    ]
    occurrences = doc["occurrences"]
    if len(occurrences) > last:
        lines.append(f"({len(occurrences) - last} older occurrences: --json lists them)")
    for o in occurrences[-last:]:
        verdict = o["verdict"]
        if verdict is None:
            states = ", ".join(f"{n} {s.lower()}" for s, n in sorted(o["experiments"].items()))
            lines.append(f"#{o['index']} {_when(o['started_at'])} {o['group']}: running ({states})")
            continue
        against = f" against #{o['baseline']}" if o.get("baseline") else ""
        launches = f"{o.get('launches', 0)}/{o.get('launches_total', 0)} launches"
        lines.append(
            f"#{o['index']} {_when(o['started_at'])} {o['group']}: {verdict}{against} ({launches})"
        )
        if o.get("reason") and verdict != "baseline":
            lines.append(f"    {o['reason']}")
        for row in o.get("metrics") or []:
            lines.append(f"    {verdict_line(row, o.get('changes') or [])}")
    return "\n".join(lines)


def history(doc: dict[str, Any]) -> str:
    """``tunelab report WATCH``'s page: ``tunelab.analysis.watch.history_page`` over the judged
    occurrences, with the baseline the latest of them was judged against."""
    from tunelab.analysis.watch import Occurrence, history_page

    judged = [o for o in doc["occurrences"] if o["verdict"] is not None]
    occurrences = [
        Occurrence(
            index=o["index"],
            started_at=o["started_at"],
            values={m: tuple(v) for m, v in (o.get("values") or {}).items()},
            provenance=o.get("provenance") or {},
        )
        for o in judged
    ]
    baselines = [o["baseline"] for o in judged if o.get("baseline")]
    first = next((o["index"] for o in judged if o["verdict"] == "baseline"), 0)
    baseline = baselines[-1] if baselines else first
    return history_page(doc["name"], occurrences, judged, baseline, doc["metrics"])


def watch_report(client: ControllerClient, name: str) -> str | None:
    """The history page of the watch ``name``, or None when no watch has that name."""
    response = client.find_watch(name)
    return None if response is None else history(json.loads(response.watch_json))


def cmd_add(args: argparse.Namespace) -> int:
    from tunelab.cli.experiments_cmd import dry_run_watch, read_spec

    text = read_spec(args.file)
    if args.dry_run:
        return dry_run_watch(text, args.file, args.json)
    with ControllerClient.for_args(args) as client:
        summary = json.loads(client.add_watch(text, args.file).watch_json)
    if args.json:
        print_json(summary)
    else:
        print(f"watch {summary['name']} added: every {summary['every']}, first occurrence now")
        print(f"follow it: tunelab watch show {summary['name']}")
    return EXIT_OK


def cmd_ls(args: argparse.Namespace) -> int:
    with ControllerClient.for_args(args) as client:
        watches = json.loads(client.list_watches().watches_json)
    if args.json:
        print_json(watches)
    elif not watches:
        print("no watches (tunelab watch add FILE adds one)")
    else:
        for w in watches:
            print(_summary_line(w))
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    if args.last < 1:
        raise CliError("--last: must be >= 1", EXIT_USAGE)
    with ControllerClient.for_args(args) as client:
        doc = get_watch(client, args.name)
    if args.json:
        print_json(doc)
    else:
        print(render_watch(doc, args.last))
    return EXIT_OK


def _set_state(args: argparse.Namespace, paused: bool) -> int:
    from tunelab.v1 import controller_pb2

    state = controller_pb2.WATCH_STATE_PAUSED if paused else controller_pb2.WATCH_STATE_ACTIVE
    with ControllerClient.for_args(args) as client:
        summary = json.loads(client.set_watch_state(args.name, state).watch_json)
    if args.json:
        print_json(summary)
    else:
        print(_summary_line(summary))
    return EXIT_OK


def cmd_pause(args: argparse.Namespace) -> int:
    return _set_state(args, paused=True)


def cmd_resume(args: argparse.Namespace) -> int:
    return _set_state(args, paused=False)


def cmd_rm(args: argparse.Namespace) -> int:
    with ControllerClient.for_args(args) as client:
        client.remove_watch(args.name)
    if args.json:
        print_json({"removed": args.name})
    else:
        print(f"watch {args.name} removed (the experiments it queued stay in tunelab ls)")
    return EXIT_OK


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    watch = sub.add_parser(
        "watch", help="run a spec on a schedule and judge each run against a baseline"
    )
    verbs = watch.add_subparsers(dest="watch_command", metavar="VERB")
    add = verbs.add_parser("add", help="register a spec with a watch: section")
    add.add_argument("file", help="spec file (YAML with watch:), or - for stdin")
    add.add_argument(
        "--dry-run", action="store_true", help="check the spec here; no controller, none added"
    )
    ls = verbs.add_parser("ls", help="every watch, its state and last verdict")
    show = verbs.add_parser("show", help="a watch and its occurrences with their verdicts")
    show.add_argument("name", help="the watch's name (its spec's name:)")
    show.add_argument(
        "--last",
        type=int,
        default=SHOWN_OCCURRENCES,
        help=f"occurrences the text shows, newest (default {SHOWN_OCCURRENCES}; --json: all)",
    )
    pause = verbs.add_parser("pause", help="stop queuing occurrences (a running one finishes)")
    pause.add_argument("name", help="the watch's name (its spec's name:)")
    resume = verbs.add_parser("resume", help="queue occurrences again (a missed one runs once)")
    resume.add_argument("name", help="the watch's name (its spec's name:)")
    rm = verbs.add_parser("rm", help="remove a watch and its history (not its experiments)")
    rm.add_argument("name", help="the watch's name (its spec's name:)")
    handlers = {add: cmd_add, ls: cmd_ls, show: cmd_show, pause: cmd_pause, resume: cmd_resume,
                rm: cmd_rm}  # fmt: skip
    for parser, handler in handlers.items():
        add_json_arg(parser)
        add_controller_args(parser)
        parser.set_defaults(handler=handler)
