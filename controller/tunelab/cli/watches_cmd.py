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
    step_error_line,
)
from tunelab.cli.keys import watch_of
from tunelab.common.textwidth import table, wrap

WATCH_HELP = "the watch's name (its spec's name:), or an occurrence's g-... or an experiment of one"
MAX_PAGE = 1000  # the controller's GetWatch page at most
SHOWN_OCCURRENCES = 10  # the text `show` prints the newest ones; --json a page of 100
REPORT_WINDOW = 1000  # occurrences `report WATCH` charts, the newest (one page of summaries)


def _when(stamp: Any) -> str:
    if not isinstance(stamp, int | float):
        return "-"
    return datetime.datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M:%S")


def get_watch(
    client: ControllerClient, name: str, limit: int = 0, before: int = 0
) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(client.get_watch(name, limit, before).watch_json)
    return found


def _summary_rows(watches: list[dict[str, Any]]) -> list[str]:
    """One row per watch; ``last`` is the newest verdict, and says which occurrence runs now."""
    rows = [("NAME", "STATE", "EVERY", "RUNS", "NEXT", "LAST VERDICT")]
    for w in watches:
        last = w["last_verdict"] or "-"
        if w.get("running_occurrence"):
            last += f" (#{w['running_occurrence']} running)"
        if w.get("watch_state"):
            last += f"; state: {w['watch_state']}"
        if w.get("step_error"):
            last += "  STEP FAILING"
        due = _when(w["next_due"]) if w["state"] == "active" else "(paused)"
        rows.append((w["name"], w["state"], w["every"], str(w["occurrences_count"]), due, last))
    return table(rows, cut=0)


def render_watch(doc: dict[str, Any], last: int = SHOWN_OCCURRENCES) -> str:
    from tunelab.analysis.watch import verdict_line

    head = (
        f"watch {doc['name']} ({doc['state']}): every {doc['every']}, {doc['launches']} launches, "
        f"baseline {doc['baseline']}, margin {doc['margin_pct']:g}%"
    )
    lines = [
        *wrap(head),
        *wrap(f"metrics: {', '.join(doc['metrics'])}"),
        f"next occurrence: {_when(doc['next_due']) if doc['state'] == 'active' else '(paused)'}",
        *step_error_line(doc, _when),
    ]
    lines += [line for text in state_text(doc) for line in wrap(text)]
    occurrences = doc["occurrences"]
    shown = occurrences[-last:]
    older = shown[0]["index"] - 1 if shown else 0  # numbered 1..n, so these come before
    if older > 0:
        lines.append(f"({older} older occurrences: --before {shown[0]['index']} shows them)")
    for o in occurrences[-last:]:
        verdict = o["verdict"]
        if verdict is None:
            states = ", ".join(f"{n} {s.lower()}" for s, n in sorted(o["experiments"].items()))
            lines += wrap(
                f"#{o['index']} {_when(o['started_at'])} {o['group']}: running ({states})"
            )
            continue
        against = f" against #{o['baseline']}" if o.get("baseline") else ""
        launches = f"{o.get('launches', 0)}/{o.get('launches_total', 0)} launches"
        lines += wrap(
            f"#{o['index']} {_when(o['started_at'])} {o['group']}: {verdict}{against} ({launches})"
        )
        if o.get("reason") and verdict != "baseline":
            lines += wrap(o["reason"], "    ", "  ")
        for row in o.get("metrics") or []:
            lines += wrap(verdict_line(row, o.get("changes") or []), "    ", "  ")
    return "\n".join(lines)


def state_text(doc: dict[str, Any]) -> list[str]:
    """A line per metric's state (what alerts follow) and the change points seen."""
    lines = []
    for metric, s in sorted((doc.get("metric_states") or {}).items()):
        cause = s.get("cause") or ""
        cause = (
            "judged a regression" if cause == "verdict" and s["state"] == "regression" else cause
        )
        since = f" since #{s['since']}" if s.get("since") else ""
        lines.append(f"state {metric}: {s['state']}{since}" + (f" ({cause})" if cause else ""))
    for p in doc.get("change_points") or []:
        lines.append(
            f"change point before #{p['occurrence']}: {p['metric']} {p['change_pct']:+g} % "
            f"(p {p['p']:.2g})"
        )
    return lines


def history(doc: dict[str, Any]) -> str:
    """``tunelab report WATCH``'s page: ``tunelab.analysis.watch.history_page`` over the judged
    occurrences, with the baseline the latest of them was judged against."""
    from tunelab.analysis.watch import Occurrence, history_page

    judged = [o for o in doc["occurrences"] if o["verdict"] is not None]
    occurrences = [
        Occurrence(
            index=o["index"],
            started_at=o["started_at"],
            values=_values(o),
            provenance=o.get("provenance") or {},
        )
        for o in judged
    ]
    baselines = [o["baseline"] for o in judged if o.get("baseline")]
    first = next((o["index"] for o in judged if o["verdict"] == "baseline"), 0)
    baseline = baselines[-1] if baselines else first
    total = (doc.get("page") or {}).get("total", 0)
    return history_page(doc["name"], occurrences, judged, baseline, doc["metrics"], total)


def _values(o: dict[str, Any]) -> dict[str, tuple[float, ...]]:
    """The launches' values, or (a page of summaries) each metric's mean as one value."""
    if o.get("values"):
        return {m: tuple(v) for m, v in o["values"].items()}
    return {m: (float(v),) for m, v in (o.get("means") or {}).items()}


def watch_report(client: ControllerClient, name: str) -> str | None:
    """The history page of the watch ``name`` over its newest ``REPORT_WINDOW`` occurrences
    (one page of summaries: bounded whatever the history), or None when no watch has it."""
    response = client.find_watch(name, REPORT_WINDOW, summaries=True)
    return None if response is None else history(json.loads(response.watch_json))


def sees(summary: dict[str, Any]) -> str:
    """What the watch can see: the smallest change per metric once occurrences exist, else
    when it will say so."""
    seen = summary.get("detectable_pct") or {}
    if seen:
        parts = ", ".join(f"{m} ±{v:.3g} %" for m, v in sorted(seen.items()))
        return f"at its noise it sees changes of: {parts}"
    return (
        "the smallest change it can see is said once its baseline has run "
        f"(tunelab watch show {summary['name']}); changes under "
        f"{summary['margin_pct']:g}% are no change"
    )


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
        print(sees(summary))
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
        print("\n".join(_summary_rows(watches)))
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    if args.last is not None and not 1 <= args.last <= MAX_PAGE:
        raise CliError(f"--last: between 1 and {MAX_PAGE}", EXIT_USAGE)
    if args.before is not None and args.before < 1:
        raise CliError("--before: an occurrence number >= 1", EXIT_USAGE)
    last = args.last or (0 if args.json else SHOWN_OCCURRENCES)
    with ControllerClient.for_args(args) as client:
        doc = get_watch(client, watch_of(client, args.name), last, args.before or 0)
    if args.json:
        print_json(doc)
    else:
        print(render_watch(doc, last))
    return EXIT_OK


def _set_state(args: argparse.Namespace, paused: bool) -> int:
    from tunelab.v1 import controller_pb2

    state = controller_pb2.WATCH_STATE_PAUSED if paused else controller_pb2.WATCH_STATE_ACTIVE
    with ControllerClient.for_args(args) as client:
        summary = json.loads(client.set_watch_state(watch_of(client, args.name), state).watch_json)
    if args.json:
        print_json(summary)
    else:
        print("\n".join(_summary_rows([summary])))
    return EXIT_OK


def cmd_pause(args: argparse.Namespace) -> int:
    return _set_state(args, paused=True)


def cmd_resume(args: argparse.Namespace) -> int:
    return _set_state(args, paused=False)


def cmd_rm(args: argparse.Namespace) -> int:
    with ControllerClient.for_args(args) as client:
        name = watch_of(client, args.name)
        client.remove_watch(name)
    if args.json:
        print_json({"removed": name})
    else:
        print(f"watch {name} removed (the experiments it queued stay in tunelab ls)")
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
    show.add_argument("name", help=WATCH_HELP)
    show.add_argument(
        "--last",
        type=int,
        default=None,
        help=f"occurrences shown, newest (default {SHOWN_OCCURRENCES}; --json: 100; "
        f"at most {MAX_PAGE})",
    )
    show.add_argument(
        "--before", type=int, default=None, help="show the occurrences before this one (a page)"
    )
    pause = verbs.add_parser("pause", help="stop queuing occurrences (a running one finishes)")
    pause.add_argument("name", help=WATCH_HELP)
    resume = verbs.add_parser("resume", help="queue occurrences again (a missed one runs once)")
    resume.add_argument("name", help=WATCH_HELP)
    rm = verbs.add_parser("rm", help="remove a watch and its history (not its experiments)")
    rm.add_argument("name", help=WATCH_HELP)
    handlers = {add: cmd_add, ls: cmd_ls, show: cmd_show, pause: cmd_pause, resume: cmd_resume,
                rm: cmd_rm}  # fmt: skip
    for parser, handler in handlers.items():
        add_json_arg(parser)
        add_controller_args(parser)
        parser.set_defaults(handler=handler)
