"""``tunelab profile``: summarise PyTorch profiler traces, or diff two sets of them.

    tunelab profile --trace FILE_OR_DIR [--json]                 one summary
    tunelab profile --trace A [--trace A2 ...] --vs B [--vs B2]  B against A, per category

Each ``--trace``/``--vs`` is one profiled run (a file, or a folder whose trace files are that
run's ranks or processes); several of them on one side are repeats, which give the diff an
interval. Reading is streamed (``tunelab.controller.profiles.traceread``), so a trace of
hundreds of MB needs tens of MB of memory, not its size.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from tunelab.cli.common import EXIT_OK, EXIT_USAGE, CliError, print_json

if TYPE_CHECKING:
    from tunelab.controller.profiles.diff import DiffRow, ProfileDiff
    from tunelab.controller.profiles.summary import ProfileSummary

TRACE_SUFFIXES = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "profile",
        help="summarise a profiler trace (top kernels, categories, GPU idle) or diff two",
        description="Summarise PyTorch Chrome-trace JSON (gzipped or not): wall time, the top "
        "kernels and ops by self time, time by category, GPU busy vs idle, engine steps. "
        "With --vs, the difference per category and for the kernels that changed most.",
    )
    p.add_argument(
        "--trace",
        action="append",
        type=Path,
        default=[],
        metavar="PATH",
        help="a trace file, or a folder of one run's trace files (repeat for repeats)",
    )
    p.add_argument(
        "--vs",
        action="append",
        type=Path,
        default=[],
        metavar="PATH",
        help="the other side of a diff, like --trace (repeat for repeats)",
    )
    p.add_argument("--top", type=int, default=20, help="how many kernels/ops to list (20)")
    p.add_argument(
        "--tokens",
        type=int,
        default=None,
        help="output tokens in the --trace window: the diff is then per output token",
    )
    p.add_argument("--vs-tokens", type=int, default=None, help="the same for --vs")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=_profile)


def trace_files(path: Path) -> list[Path]:
    """The trace files of one run: the file itself, or those in the folder, sorted."""
    if path.is_dir():
        found = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
        if not found:
            raise CliError(f"{path} holds no trace files (*.json, *.json.gz)", EXIT_USAGE)
        return found
    if not path.is_file():
        raise CliError(f"no such trace file: {path}", EXIT_USAGE)
    return [path]


def _summaries(paths: list[Path], top: int, tokens: int | None) -> list[ProfileSummary]:
    from tunelab.controller.profiles import TraceError
    from tunelab.controller.profiles.summary import summarize

    out = []
    for path in paths:
        try:
            out.append(summarize(trace_files(path), top=top, output_tokens=tokens))
        except TraceError as exc:
            raise CliError(f"{path}: {exc}", EXIT_USAGE) from exc
    return out


def _profile(args: argparse.Namespace) -> int:
    if not args.trace:
        raise CliError("give --trace FILE (an attempt's profile is not fetched yet)", EXIT_USAGE)
    if args.top < 1:
        raise CliError("--top must be at least 1", EXIT_USAGE)
    side_a = _summaries(args.trace, args.top, args.tokens)
    if not args.vs:
        if len(side_a) > 1:
            raise CliError("several --trace without --vs: give one run to summarise", EXIT_USAGE)
        if args.json:
            print_json(side_a[0].to_json())
        else:
            print(render_summary(side_a[0]))
        return EXIT_OK
    from tunelab.controller.profiles.diff import diff

    side_b = _summaries(args.vs, args.top, args.vs_tokens)
    result = diff(side_a, side_b, top=args.top)
    if args.json:
        print_json(result.to_json())
    else:
        print(render_diff(result))
    return EXIT_OK


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{share * 100:.1f}%"


def render_summary(s: ProfileSummary) -> str:
    lines = [
        f"traces: {', '.join(s.trace_files)} ({s.events} events)",
        (
            f"wall time profiled: {s.wall_ms:.3f} ms; GPU time {s.gpu_ms:.3f} ms; "
            f"CPU op time {s.cpu_ms:.3f} ms"
        ),
    ]
    if s.gpu_idle_share is not None:
        lines.append(f"GPU idle: {_pct(s.gpu_idle_share)} of the wall time")
        for d in s.devices:
            lines.append(f"  device {d.device}: busy {d.busy_ms:.3f} ms, idle {_pct(d.idle_share)}")
    if s.steps is not None:
        st = s.steps
        lines.append(
            f"steps ({st.marker}): {st.count}, mean {st.mean_ms:.3f} ms, "
            f"median {st.p50_ms:.3f} ms, max {st.max_ms:.3f} ms"
        )
    shares = s.category_shares()
    lines.append(f"by category ({s.categories_basis} time):")
    for name, ms in sorted(s.categories.items(), key=lambda kv: -kv[1]):
        if ms:
            lines.append(f"  {name:<18} {ms:>12.3f} ms {_pct(shares[name]):>7}")
    lines.append(f"top {len(s.top)} by self time:")
    lines.append(f"  {'kind':<4} {'self ms':>11} {'calls':>7} {'share':>7}  {'category':<16} name")
    for t in s.top:
        lines.append(
            f"  {t.kind:<4} {t.self_ms:>11.3f} {t.calls:>7} {_pct(t.share):>7}  "
            f"{t.category:<16} {_short(t.name)}"
        )
    return "\n".join(lines)


def _short(name: str, width: int = 90) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def render_diff(d: ProfileDiff) -> str:
    a, b = d.repeats
    lines = [
        (
            f"B against A, {d.basis} time in {d.unit} (A: {a} run(s), B: {b} run(s)); "
            f"GPU idle A {_pct(d.gpu_idle_share[0])}, B {_pct(d.gpu_idle_share[1])}"
        ),
        f"  {'category':<18} {'A':>11} {'B':>11} {'B-A':>11} {'B/A':>7}  interval of B-A",
    ]

    def row(label: str, r: DiffRow) -> str:
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}x"
        interval = "-" if r.interval is None else f"[{r.interval[0]:+.4f}, {r.interval[1]:+.4f}]"
        return f"  {label:<18} {r.a:>11.4f} {r.b:>11.4f} {r.delta:>+11.4f} {ratio:>7}  {interval}"

    for r in d.categories:
        if r.a or r.b:
            lines.append(row(r.name, r))
    lines.append(f"top {len(d.kernels)} changed:")
    for r in d.kernels:
        lines.append(row(r.category, r) + f"  {_short(r.name, 70)}")
    return "\n".join(lines)
