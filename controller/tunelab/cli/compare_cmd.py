"""``tunelab compare | report``: experiments side by side, and one HTML page of them (a
search's report for a search, a watch's history for a watch). Both read their words with
``keys.target``, so a spec's name and its group give the same page."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from tunelab.cli.clients import ControllerClient
from tunelab.cli.common import EXIT_OK, EXIT_USAGE, CliError, add_controller_args, print_json
from tunelab.cli.keys import spec_names, target
from tunelab.common.shares import read_fraction
from tunelab.v1 import controller_pb2


def _percent(text: str, below: float = 1.0) -> float:
    """``2%`` or ``0.02`` -> 0.02, for --min-effect and --max-cv: the spec's reader (a bare 2
    is refused: before, it meant 2 % here and 200 % in a spec)."""
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


def _write_page(page: str, out: Path) -> None:
    from tunelab.analysis.report import write_page

    try:
        write_page(page, out)
    except OSError as exc:
        raise CliError(f"{out}: {exc.strerror}", EXIT_USAGE) from None
    print(f"report: {out.resolve()}")


def cmd_report(args: argparse.Namespace) -> int:
    """One page: a watch's history for a watch's name, a search's report for a search (its
    group or its spec's name), else the comparison of the experiments named."""
    from tunelab.analysis.report import render_report, render_search_report

    named = target(ControllerClient.for_args(args), args.ids[0]) if len(args.ids) == 1 else None
    if named is not None and named.watch:
        from tunelab.cli.watches_cmd import watch_report

        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", named.watch)[:80]
        page = watch_report(ControllerClient.for_args(args), named.watch)
        if page is not None:
            _write_page(page, Path(args.out or f"report-watch-{safe}.html"))
            return EXIT_OK
    if named is not None and named.group:
        args.ids = [named.group]  # the name and its group are one page
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
    words = [named.key] if named is not None else args.ids
    default = re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(words))[:80]
    out = Path(args.out or f"report-{default}.html")
    if named is not None and named.search is not None:
        page = render_search_report(named.search, document, named.shown)
    else:
        page = render_report(document, named.shown if named else " ".join(args.ids))
    _write_page(page, out)
    return EXIT_OK


def add_effect_args(parser: argparse.ArgumentParser) -> None:
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
    add_effect_args(comp)
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
    add_effect_args(report)
    add_controller_args(report)
    report.set_defaults(handler=cmd_report)
