"""``tunelab search show | cancel``, and following a search for ``submit --wait``, ``wait`` and
``report``: the controller's search document (docs/search.md) read through GetSearch."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import threading
from typing import Any

from tunelab.analysis.slos import slo_label, slo_text
from tunelab.bench.promptlengths import prompt_tokens_line
from tunelab.cli.clients import ControllerClient
from tunelab.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    CliError,
    add_controller_args,
    add_json_arg,
    is_terminal,
    print_json,
    step_error_line,
)
from tunelab.cli.keys import get_search, group_of
from tunelab.common.textwidth import WIDTH, table, wrap

SEARCH_HELP = "the g-... that submit printed, or the spec's name (its latest submission)"
TIMEOUT = 15.0
POLL = 1.0
STOP = threading.Event()  # never set by the CLI itself: a wait that Ctrl-C interrupts


def _progress(doc: dict[str, Any]) -> str:
    trials = doc["trials"]
    ended = sum(1 for t in trials if t["state"] != "RUNNING")
    best = doc.get("best")
    best_text = (
        f"best {doc['objective'].get('maximize') or doc['objective'].get('minimize')} "
        f"{best['objective']:g} (trial {best['trial']}, {best.get('verdict') or 'racing'})"
        if best and best.get("objective") is not None
        else "no feasible point yet"
    )
    return (
        f"{doc['state']}: {ended}/{len(trials)} trials ended "
        f"(budget {doc['budget']['trials']}), {best_text}"
    )


def follow_search(client: ControllerClient, group: str, quiet: bool) -> dict[str, Any]:
    """Poll the search until it ends; one progress line per change (none under --json).
    Ctrl-C stops following only: the search goes on, and the message says how to follow it."""
    try:
        return _follow_search(client, group, quiet)
    except KeyboardInterrupt:
        raise CliError(
            f"stopped following; the search goes on. Follow it again with: tunelab wait {group} "
            f"(tunelab search cancel {group} stops it)",
            EXIT_INTERRUPTED,
        ) from None


def _follow_search(client: ControllerClient, group: str, quiet: bool) -> dict[str, Any]:
    last = ""
    while True:
        doc = get_search(client, group)
        if doc is None:
            raise LookupError(group)
        line = _progress(doc)
        if not quiet and line != last:
            end = "\r" if is_terminal() else "\n"
            print(line.ljust(len(last)), end=end, flush=True)
            last = line
        if doc["state"] != "RUNNING":
            if not quiet and is_terminal():
                print()
            return doc
        STOP.wait(POLL)


def _number(value: Any) -> str:
    return "-" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)


def _short(path: str) -> str:
    return path.split(".", 2)[2] if path.startswith("server.flags.") else path


def _params(params: dict[str, Any]) -> str:
    return ", ".join(f"{_short(p)}={v}" for p, v in params.items())


def _values(params: dict[str, Any]) -> str:
    """The parameters' values alone, in the space's order (the legend above the table names
    them): ``4096 64``."""
    return " ".join(str(v) for v in params.values())


def _wrapped(text: str, indent: str = "", later: str = "  ") -> list[str]:
    return wrap(text, indent, later, WIDTH)


def argv_lines(argv: list[str]) -> list[str]:
    """The server's command, one flag and its value a line, continued with backslashes: it
    pastes into a shell as it is."""
    words = [shlex.quote(a) for a in argv]
    head = next((i for i, w in enumerate(words) if w.startswith("--")), len(words))
    groups = [" ".join(words[:head])] if head else []
    for word in words[head:]:
        if word.startswith("-") or not groups:
            groups.append(word)
        else:
            groups[-1] += " " + word
    return [
        ("    " if i == 0 else "      ") + g + (" \\" if i < len(groups) - 1 else "")
        for i, g in enumerate(groups)
    ]


def _prompt_tokens(trials: list[dict[str, Any]]) -> str | None:
    """The server's mean prompt tokens over the trials that reported them (each trial counts
    once), and "lengths approximate" when a trial ran without a tokenizer."""
    means = [{"completed": 1, "mean_input_tokens": t.get("mean_input_tokens")} for t in trials]
    said = {t.get("lengths_exact") for t in trials} - {None}
    return prompt_tokens_line(means, False if False in said else (True if said else None))


def _state(t: dict[str, Any]) -> str:
    if t["state"] != "DONE":
        return str(t["failure_reason"] or t["state"])
    return "DONE" if t["objective"] is not None else "no load met the SLOs"


def render_search(doc: dict[str, Any]) -> str:
    """The table: rank, trial, parameters (their values; a legend names them), load found,
    objective with its interval, launches, SLO margins and state or failure reason; then the
    answer with its evidence when the search is done. Every line fits 100 columns but a
    parameter value or an argv word longer than that."""
    lines = _wrapped(f"search {doc['group']} ({doc['name']}): {doc['state']} — {doc['message']}")
    for line in step_error_line(doc):
        lines += _wrapped(line)
    objective = doc["objective"].get("maximize") or doc["objective"].get("minimize")
    lines += _wrapped(
        f"objective: {'maximize' if 'maximize' in doc['objective'] else 'minimize'} "
        f"{objective} under {slo_text(doc.get('slo') or {})}"
    )
    names = [_short(p["path"]) for p in doc.get("space", [])]
    if names:
        lines += _wrapped(f"parameters: {' '.join(names)}")
    # only the strategy's trials are ranked: a launch at a given load (the race's, the effect's,
    # a drift launch of the default) is measured there whatever the SLOs say (issue 46)
    ranked = sorted(
        (
            t
            for t in doc["trials"]
            if t["objective"] is not None and t.get("phase", "strategy") == "strategy"
        ),
        key=lambda t: t["objective"],
        reverse="maximize" in doc["objective"],
    )
    rank = {t["number"]: i + 1 for i, t in enumerate(ranked)}
    # a host column only where trials ran on several hosts (one host: the hosts: line below)
    several = len({t.get("host") for t in doc["trials"] if t.get("host")}) > 1
    rows = [["#", "trial", "parameters", "load", "launch", "config [95%]", "n", "SLO margin",
             *(["host"] if several else []), "state"]]  # fmt: skip
    for t in sorted(doc["trials"], key=lambda t: (rank.get(t["number"], 10**9), t["number"])):
        interval = t.get("interval")
        margins = t.get("slo_margins") or {}
        rows.append(
            [
                str(rank.get(t["number"], "-")),
                f"{t['number']}"
                + (f" rung {t['rung']}" if t["rung"] else "")
                + (f" race {t['race']}" if t.get("race") and t.get("phase") != "effect" else "")
                + (" effect" if t.get("phase") == "effect" else "")
                + (f" drift {t['drift']}" if t.get("drift") else ""),
                _values(t["params"]),
                _load(t.get("load"), short=True),
                _number(t["objective"]),
                f"[{interval[0]:.4g}, {interval[1]:.4g}]" if interval else "",
                str(t.get("launches") or "-"),
                " ".join(f"{slo_label(k).split()[-1]} {v:+.0%}" for k, v in margins.items()
                         if v is not None) or "-",
                *([t.get("host") or "-"] if several else []),
                _state(t),
            ]
        )  # fmt: skip
    lines += table(rows, WIDTH, cut=2)
    lines += _wrapped(
        "launch: this trial's value; config [95%]: over its configuration's n launches at that load"
    )
    lengths = _prompt_tokens(doc["trials"])
    if lengths:
        lines += _wrapped(lengths)
    classes = {t["host"]: t.get("host_class") for t in doc["trials"] if t.get("host")}
    if classes:
        hosts = "; ".join(f"{h}: {c or 'class not recorded'}" for h, c in classes.items())
        lines += _wrapped(f"hosts: {hosts}")
    if doc.get("answer"):
        lines += ["", *_wrapped(f"answer: {doc['answer']}")]
    for warning in doc.get("warnings") or []:
        lines += _wrapped(f"warning: {warning}")
    if doc.get("cost"):
        lines += _wrapped(_cost_line(doc["cost"], doc.get("noise") or {}))
    rec = doc.get("recommendation")
    best = doc.get("best")
    if best and rec:
        lines += _wrapped(f"best configuration (trial {best['trial']}): {_params(best['params'])}")
        interval = best.get("interval")
        launches = best.get("launches") or 0
        lines += _wrapped(
            f"{objective} {best['objective']:.4g}"
            + (f" [95% {interval[0]:.4g}, {interval[1]:.4g}]" if interval else "")
            + f" at {_load(best['load'])}, {launches} launch{'es' if launches != 1 else ''}",
            "  ",
        )
        effect = rec["effect"]
        own = effect.get("default_load")
        beside = f" (the default alone takes {_load(own)} under the SLOs)" if own else ""
        against = f"vs the default {_params(effect['against'])} at {_load(effect['load'])}"
        if effect.get("interval"):
            lo, hi = effect["interval"]
            n, m = effect["launches"]
            said = (
                f"{against}: {effect['relative_change']:+.1%} [95% {lo:+.1%}, {hi:+.1%}] over "
                f"{n} and {m} fresh launches — {effect['verdict']}{beside}"
            )
        elif effect.get("relative_change") is not None:
            said = f"{against}: {effect['relative_change']:+.1%} — {effect['verdict']}{beside}"
        else:
            said = f"vs the default: {effect['verdict']}{beside}"
        lines += _wrapped(said, "  ")
        lines += ["  server argv:", *argv_lines(rec["argv"])]
        lines += ["  spec snippet:", *_wrapped(json.dumps(rec["spec"]), "    ")]
    return "\n".join(lines)


def _cost_line(cost: dict[str, Any], noise: dict[str, Any]) -> str:
    """What the answer cost, and what its launches vary by (issue 44)."""

    def seconds(key: str) -> str:
        value = cost.get(key)
        return "?" if value is None else f"{value:,.0f}"

    line = (
        f"cost: {cost['launches']} launches, {seconds('gpu_seconds')} GPU-s "
        f"(loading {seconds('load_seconds')}, measuring {seconds('measure_seconds')})"
    )
    if noise.get("launch_cv") is not None:
        line += f"; launch noise {noise['launch_cv']:.1%}"
        if noise.get("within_cv") is not None:
            line += f", within {noise['within_cv']:.1%} ({noise['blocks']} blocks)"
    return line


def _load(load: dict[str, Any] | None, short: bool = False) -> str:
    names = {"concurrency": "conc"} if short else {}
    text = ", ".join(f"{names.get(k, k)} {v:g}" for k, v in (load or {}).items() if v is not None)
    return text or "-"


def finished(doc: dict[str, Any], as_json: bool) -> int:
    if as_json:
        print_json(doc)
    else:
        print(render_search(doc))
    return EXIT_OK if doc["state"] == "DONE" else EXIT_FAILED


def _search(client: ControllerClient, key: str) -> tuple[str, dict[str, Any]]:
    """The group and document of the search ``key`` names: its group, a spec's name (its latest
    submission) or one of its trials."""
    group = group_of(client, key)
    doc = get_search(client, group)
    if doc is None:
        raise CliError(
            f"no search {key!r}" + (f" (its latest submission, {group}, is none)" if group != key
                                    else ""),
            EXIT_NOT_FOUND,
        )  # fmt: skip
    return group, doc


def cmd_show(args: argparse.Namespace) -> int:
    client = ControllerClient.for_args(args)
    group, doc = _search(client, args.group)
    if args.json:
        print_json(doc)
        return EXIT_OK
    try:
        while args.watch and doc["state"] == "RUNNING":  # a live table: redrawn until it ends
            if is_terminal():
                print("\x1b[H\x1b[2J" + render_search(doc), flush=True)
            STOP.wait(POLL * 2)
            doc = get_search(client, group) or doc
    except KeyboardInterrupt:
        raise CliError(
            f"stopped watching; the search goes on (tunelab search show {group} --watch)",
            EXIT_INTERRUPTED,
        ) from None
    print(("\x1b[H\x1b[2J" if args.watch and is_terminal() else "") + render_search(doc))
    return EXIT_OK


def cancel_search(client: ControllerClient, group: str, as_json: bool) -> dict[str, Any]:
    """Cancel a running search; one that has ended is said to have ended, and left as it is."""
    before = get_search(client, group)
    if before is not None and before["state"] != "RUNNING":
        if not as_json:
            print(
                f"search {group} is already finished ({before['state']}); nothing to cancel",
                file=sys.stderr,
            )
        return before
    doc: dict[str, Any] = json.loads(client.cancel_search(group).search_json)
    if not as_json:
        print(f"cancel requested for search {group}; its running trials stop", file=sys.stderr)
    return doc


def cmd_cancel(args: argparse.Namespace) -> int:
    client = ControllerClient.for_args(args)
    group, _ = _search(client, args.group)
    doc = cancel_search(client, group, args.json)
    if args.json:
        print_json(doc)
    return EXIT_OK


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    search = sub.add_parser("search", help="a search's trials and its answer (search: specs)")
    actions = search.add_subparsers(dest="search_command", metavar="ACTION", required=True)
    show = actions.add_parser("show", help="rank, parameters, load found, objective, SLO margins")
    show.add_argument("group", metavar="SEARCH", help=SEARCH_HELP)
    show.add_argument("--watch", action="store_true", help="redraw the table until the search ends")
    add_json_arg(show, "the search document")
    add_controller_args(show)
    show.set_defaults(handler=cmd_show)
    cancel = actions.add_parser("cancel", help="stop a search and its running trials")
    cancel.add_argument("group", metavar="SEARCH", help=SEARCH_HELP)
    add_json_arg(cancel, "the search document")
    add_controller_args(cancel)
    cancel.set_defaults(handler=cmd_cancel)
