"""``tunelab profile``: summarise PyTorch profiler traces, or diff two sets of them.

    tunelab profile EXPERIMENT [--json] [--out DIR]              its last attempt's profile
    tunelab profile --trace FILE_OR_DIR [--json]                 a trace taken by hand
    tunelab profile A [A2 ...] --vs B [--vs B2]                  B against A, per category
    tunelab profile --trace A [--trace A2 ...] --vs B [--vs B2]

An experiment's traces come from the controller (FetchExperimentProfile, which proxies the
agent's chunked stream); ``--out`` keeps them (they open in Perfetto as written), else they go
to a temporary folder that is removed. ``--vs`` takes a trace path or an experiment.

Each ``--trace``/``--vs`` is one profiled run (a file, or a folder whose trace files are that
run's ranks or processes); several of them on one side are repeats, which give the diff an
interval. Reading is streamed (``tunelab.analysis.profiles.traceread``), so a trace of
hundreds of MB needs tens of MB of memory, not its size.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from tunelab.cli.clients import ControllerClient
from tunelab.cli.common import (
    EXIT_FAILED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    add_controller_args,
    print_json,
    rpc_error,
)

if TYPE_CHECKING:
    from tunelab.analysis.profiles.diff import DiffRow, ProfileDiff
    from tunelab.analysis.profiles.summary import ProfileSummary

TRACE_SUFFIXES = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz")
ATTEMPT_ID = re.compile(r"^(.+)-a\d+$")  # the store names attempts <experiment id>-a<number>
DEFAULT_MAX_SIZE = 2 * 1000 * 1000 * 1000  # bytes fetched per trace at most
DEFAULT_MAX_EVENTS = 20_000_000  # events read per run (a 2 GB vLLM trace holds ~10 M)
DEFAULT_MAX_SECONDS = 600.0  # seconds spent reading one run's traces
FETCH_TIMEOUT = 600.0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "profile",
        help="summarise a profiler trace (top kernels, categories, GPU idle) or diff two",
        description="Summarise PyTorch Chrome-trace JSON (gzipped or not): wall time, the top "
        "kernels and ops by self time, time by category, GPU busy vs idle, engine steps. "
        "With --vs, the difference per category and for the kernels that changed most.",
    )
    p.add_argument(
        "experiments",
        nargs="*",
        metavar="EXPERIMENT",
        help="an experiment id or name (its last attempt), an attempt id, or a group or spec name "
        "(its latest submission's experiments); several: repeats",
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
        default=[],
        metavar="PATH",
        help="the other side of a diff: a trace path or an experiment (repeat for repeats)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="save the fetched traces in this folder (one subfolder per experiment)",
    )
    p.add_argument(
        "--max-size",
        type=int,
        default=DEFAULT_MAX_SIZE,
        help=f"refuse to fetch a trace larger than this many bytes ({DEFAULT_MAX_SIZE})",
    )
    p.add_argument(
        "--max-events",
        type=int,
        default=DEFAULT_MAX_EVENTS,
        help=f"stop reading a run's traces past this many events ({DEFAULT_MAX_EVENTS})",
    )
    p.add_argument(
        "--max-seconds",
        type=float,
        default=DEFAULT_MAX_SECONDS,
        help=f"stop reading a run's traces after this many seconds ({DEFAULT_MAX_SECONDS:g})",
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
    add_controller_args(p)
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


def summarize_files(
    files: list[Path],
    label: str,
    top: int,
    tokens: int | None,
    max_events: int = DEFAULT_MAX_EVENTS,
    max_seconds: float = DEFAULT_MAX_SECONDS,
) -> ProfileSummary:
    from tunelab.analysis.profiles import TraceError, TraceTooLarge
    from tunelab.analysis.profiles.summary import summarize

    try:
        return summarize(
            files,
            top=top,
            output_tokens=tokens,
            max_events=max_events,
            max_seconds=max_seconds,
        )
    except TraceTooLarge as exc:
        hint = "; raise --max-events or --max-seconds to read more"
        raise CliError(
            f"{label}: {exc}{hint if 'stopped' in str(exc) else ''}", EXIT_USAGE
        ) from exc
    except TraceError as exc:
        raise CliError(f"{label}: {exc}", EXIT_USAGE) from exc


class _Fetcher:
    """Fetches experiments' traces through the controller into one folder."""

    def __init__(self, args: argparse.Namespace, folder: Path, keep_others: bool = False) -> None:
        self.args = args
        self.folder = folder
        self.keep_others = keep_others
        self._client: ControllerClient | None = None

    def client(self) -> ControllerClient:
        if self._client is None:
            self._client = ControllerClient.for_args(self.args)
        return self._client

    def expand(self, keys: list[str]) -> list[str]:
        """Ids and attempt ids as given; a group or a spec's name (its latest submission) is
        its experiments, a name is that experiment."""
        from tunelab.cli.keys import resolve

        out: list[str] = []
        for key in keys:
            out += [key] if key.startswith("x-") else resolve(self.client(), [key])[0]
        return out

    def fetch(self, key: str) -> tuple[list[Path], int | None]:
        """The traces of ``key``'s last attempt, and the output tokens of its window."""
        from tunelab.v1 import controller_pb2

        def get(experiment_id: str) -> Any:
            request = controller_pb2.GetExperimentRequest(id=experiment_id)
            return self.client().get_experiment(request).experiment

        attempt_id = ATTEMPT_ID.match(key)
        try:
            experiment = get(key)
        except CliError as exc:  # an attempt id (<experiment id>-a<N>): that very attempt
            if exc.code != EXIT_NOT_FOUND or attempt_id is None:
                raise
            experiment = get(attempt_id.group(1))
        chosen = [a for a in experiment.attempts if a.id == key] or list(experiment.attempts)
        if not chosen:
            raise CliError(f"experiment {key} has no attempt yet", EXIT_NOT_FOUND)
        attempt = chosen[-1]
        result = json.loads(attempt.result_json) if attempt.result_json else {}
        profile = result.get("profile") or {}
        traces = [t for t in profile.get("traces", []) if isinstance(t, dict)]
        if not traces:
            why = "; ".join(profile.get("warnings", [])) or "the spec has no profile:"
            raise CliError(f"attempt {attempt.id} kept no trace ({why})", EXIT_NOT_FOUND)
        folder = self.folder / attempt.id
        folder.mkdir(parents=True, exist_ok=True)
        files = [self._fetch_one(attempt.id, str(t["name"]), folder) for t in traces]
        if self.keep_others:  # --out: the engine's own tables too (vLLM's key_averages)
            for other in profile.get("other_files", []):
                if isinstance(other, dict):
                    self._fetch_one(attempt.id, str(other["name"]), folder)
        window = profile.get("window") or {}
        tokens = window.get("output_tokens")
        return files, int(tokens) if tokens else None

    def _fetch_one(self, attempt_id: str, name: str, folder: Path) -> Path:
        from tunelab.v1 import controller_pb2

        limit = self.args.max_size
        request = controller_pb2.FetchExperimentProfileRequest(
            id=attempt_id, name=name, max_bytes=limit + 1
        )
        client = self.client()
        return save_trace(
            lambda: client.fetch_experiment_profile(request, FETCH_TIMEOUT),
            name,
            folder,
            limit,
            (client.target, client.daemon),
        )


def save_trace(
    stream: Callable[[], Iterable[Any]],
    name: str,
    folder: Path,
    limit: int,
    peer: tuple[str, str],
) -> Path:
    """One trace's chunks (``FetchProfileResponse``-shaped) into ``folder/name``, whole or not at
    all (a partial file is removed); ``limit`` bytes at most; ``peer``: (target, daemon)."""
    if Path(name).name != name or name.startswith(".") or not name:
        raise CliError(f"the {peer[1]} listed an odd trace name {name!r}", EXIT_FAILED)
    target = folder / name
    partial = folder / f".{name}.partial"

    def run() -> None:
        received = 0
        with partial.open("wb") as out:
            for chunk in stream():
                if chunk.size > limit:
                    raise CliError(
                        f"{name} is {chunk.size} bytes, over --max-size {limit}", EXIT_FAILED
                    )
                if chunk.offset != received:
                    raise CliError(f"{name}: the stream skipped bytes", EXIT_FAILED)
                out.write(chunk.data)
                received += len(chunk.data)

    try:
        try:
            run()
        except grpc.RpcError as exc:
            raise rpc_error(exc, peer[0], peer[1], FETCH_TIMEOUT) from exc
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(target)
    return target


def _side(
    traces: list[Path],
    keys: list[str],
    fetcher: _Fetcher,
    args: argparse.Namespace,
    tokens: int | None,
) -> list[ProfileSummary]:
    bounds = (args.max_events, args.max_seconds)
    out = [summarize_files(trace_files(t), str(t), args.top, tokens, *bounds) for t in traces]
    for key in fetcher.expand(keys):
        files, window_tokens = fetcher.fetch(key)
        out.append(summarize_files(files, key, args.top, window_tokens, *bounds))
    return out


def ablation_profiles(args: argparse.Namespace, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """For the report: each variant's profile against the baseline's (repeats pooled), for the
    experiments of a comparison whose attempts kept traces; what could not be had is a note."""

    from tunelab.analysis.profiles.diff import diff

    notes: list[str] = []
    sides: dict[str, list[ProfileSummary]] = {}
    baseline_name = ""
    with tempfile.TemporaryDirectory(prefix="tunelab-report-") as tmp:
        fetcher = _Fetcher(args, Path(tmp))
        for row in rows:
            if row.get("state") != "SUCCEEDED":
                continue
            name = re.sub(r"#\d+$", "", str(row["name"]))
            try:
                files, tokens = fetcher.fetch(str(row["id"]))
                summary = summarize_files(files, str(row["name"]), args.top, tokens)
            except CliError as exc:
                notes.append(f"{row['name']}: {exc}")
                continue
            sides.setdefault(name, []).append(summary)
            if not row.get("varied"):
                baseline_name = name
    diffs = []
    if baseline_name:
        for name, summaries in sides.items():
            if name != baseline_name:
                result = diff(sides[baseline_name], summaries, top=8)
                diffs.append({"baseline": baseline_name, "variant": name, **result.to_json()})
    elif sides:
        notes.append("no baseline launch kept a profile: nothing to diff against")
    return {"diffs": diffs, "notes": notes}


def _profile(args: argparse.Namespace) -> int:
    if not args.trace and not args.experiments:
        raise CliError("give an EXPERIMENT or --trace FILE", EXIT_USAGE)
    if args.top < 1:
        raise CliError("--top must be at least 1", EXIT_USAGE)
    if args.max_events < 1 or not args.max_seconds > 0:
        raise CliError("--max-events and --max-seconds must be above 0", EXIT_USAGE)
    vs_traces = [Path(v) for v in args.vs if Path(v).exists()]
    vs_keys = [str(v) for v in args.vs if not Path(v).exists()]
    with tempfile.TemporaryDirectory(prefix="tunelab-profile-") as tmp:
        fetcher = _Fetcher(args, args.out or Path(tmp), keep_others=args.out is not None)
        side_a = _side(args.trace, args.experiments, fetcher, args, args.tokens)
        if not args.vs:
            if len(side_a) > 1:
                raise CliError("several runs without --vs: give one to summarise", EXIT_USAGE)
            if args.json:
                print_json(side_a[0].to_json())
            else:
                print(render_summary(side_a[0]))
            return EXIT_OK
        from tunelab.analysis.profiles.diff import diff

        side_b = _side(vs_traces, vs_keys, fetcher, args, args.vs_tokens)
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
            + (
                f"; {st.decode_count} decode-only, mean {st.decode_mean_ms:.3f} ms"
                if st.decode_count and st.decode_mean_ms is not None
                else ""
            )
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
