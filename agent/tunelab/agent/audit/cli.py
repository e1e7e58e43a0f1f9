"""``tunelab-agent audit``: run the host audit here, with no daemon.

Exit codes: 0 no check FAILed, 1 a check FAILed, 2 usage (an unknown check id lists the valid
ones), 3 never (nothing to connect to).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from tunelab.agent.audit.checks import CHECKS
from tunelab.agent.audit.context import NO_SNAPSHOT_FOR_CAPTURE, AuditContext, AuditOptions
from tunelab.agent.audit.report import (
    ReportFileError,
    compare,
    fix_script,
    load_report,
    render_changes,
)
from tunelab.agent.audit.runner import UnknownCheck, parse_only, run_audit
from tunelab.agent.gpu import GpuBackend, open_backend
from tunelab.agent.system import System
from tunelab.common.auditview import exit_code, render_table

EXIT_USAGE = 2


def add_audit_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "audit",
        help="audit this host for GPU inference tuning (no daemon needed)",
        description=__doc__.replace("``", ""),  # RST quotes are for the source, not --help
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--root",
        type=Path,
        help="read sysfs/procfs/etc/dev under DIR (a captured tree); NVML checks SKIP "
        "unless --nvml-snapshot is given",
    )
    p.add_argument(
        "--only", action="append", default=[], metavar="ID[,ID...]", help="run only these checks"
    )
    p.add_argument("--json", action="store_true", help="print the report document as JSON")
    p.add_argument(
        "--fix-script",
        action="store_true",
        help="print a shell script of the runtime fixes (applies nothing)",
    )
    p.add_argument(
        "--compare",
        type=Path,
        metavar="OLD.json",
        help="show what changed since an earlier --json report",
    )
    p.add_argument(
        "--nvml-snapshot",
        type=Path,
        metavar="FILE",
        help="answer GPU checks from a captured NVML snapshot",
    )
    p.add_argument("--list", action="store_true", help="list the check ids and exit")
    p.add_argument(
        "--cstate-max-latency",
        type=int,
        default=AuditOptions.cstate_max_latency_us,
        metavar="US",
        help="WARN when the worst-case C-state exit latency is above this (default %(default)s)",
    )
    p.set_defaults(handler=run_cli)


def _usage(message: str) -> int:
    print(f"tunelab-agent audit: {message}", file=sys.stderr)
    return EXIT_USAGE


def _gpu(args: argparse.Namespace, live: bool) -> tuple[GpuBackend | None, str]:
    if args.nvml_snapshot is not None:
        return open_backend(args.nvml_snapshot), ""
    if not live:
        return None, NO_SNAPSHOT_FOR_CAPTURE
    return open_backend(), ""


def build_report(
    root: Path, gpu: GpuBackend | None, reason: str, only: list[str], options: AuditOptions
) -> dict[str, Any]:
    ctx = AuditContext(System(root), gpu, reason, options)
    return run_audit(ctx, only)


def run_cli(args: argparse.Namespace) -> int:
    if args.list:
        for check in CHECKS:
            print(f"{check.id:<24} {check.title}")
        return 0
    try:
        only = parse_only(args.only)
    except UnknownCheck as exc:
        return _usage(str(exc))
    root = args.root if args.root is not None else Path("/")
    if not root.is_dir():
        return _usage(f"--root {root}: not a directory")
    if args.nvml_snapshot is not None and not args.nvml_snapshot.is_file():
        return _usage(f"--nvml-snapshot {args.nvml_snapshot}: no such file")
    if args.fix_script and (args.json or args.compare is not None):
        other = "--json" if args.json else "--compare"
        return _usage(f"--fix-script prints a shell script; it does not combine with {other}")
    if args.cstate_max_latency < 0:
        return _usage("--cstate-max-latency: expected microseconds >= 0")
    old = None
    if args.compare is not None:
        try:
            old = load_report(args.compare)
        except ReportFileError as exc:
            return _usage(str(exc))
    try:
        gpu, reason = _gpu(args, System(root).is_live)
    except (OSError, ValueError, KeyError) as exc:
        return _usage(f"--nvml-snapshot {args.nvml_snapshot}: not a snapshot ({exc})")
    options = AuditOptions(cstate_max_latency_us=args.cstate_max_latency)
    report = build_report(root, gpu, reason, only, options)
    if old is not None:
        changes = compare(old, report)
        if args.json:
            print(json.dumps({**report, "changes": changes}, indent=2))
        else:
            sys.stdout.write(render_changes(old, report, changes))
    elif args.fix_script:
        sys.stdout.write(fix_script(report))
    elif args.json:
        print(json.dumps(report, indent=2))
    else:
        colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        sys.stdout.write(render_table(report, colour=colour))
    return exit_code(report)
