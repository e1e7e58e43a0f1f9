"""``tunelab export mlflow GROUP|ID...``: the experiments' attempts as MLflow runs, nested under
a parent run per submission group (``tunelab.analysis.mlflow.plan`` says what each run holds).
Reads from the controller as ``compare`` and ``show`` do; writes with MLflow's own client."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from tunelab.cli.clients import ControllerClient
from tunelab.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    CliError,
    add_controller_args,
    add_json_arg,
    print_json,
)
from tunelab.cli.compare_cmd import add_effect_args, comparison
from tunelab.cli.experiments_cmd import attempt_json
from tunelab.cli.keys import get_search, target
from tunelab.common.textwidth import wrapped
from tunelab.v1 import controller_pb2

if TYPE_CHECKING:
    from tunelab.analysis.mlflow.plan import RunPlan

DEFAULT_EXPERIMENT = "tunelab"


Attempts = dict[str, list[dict[str, Any]]]


def _attempts(args: argparse.Namespace, ids: list[str]) -> tuple[Attempts, dict[str, Any]]:
    """Each experiment's attempts, and its ``benchmark:`` settings (the attempt runs' params)."""
    out: Attempts = {}
    benchmarks: dict[str, Any] = {}
    with ControllerClient.for_args(args) as client:
        for experiment_id in ids:
            request = controller_pb2.GetExperimentRequest(id=experiment_id, timeline=True)
            experiment = client.get_experiment(request).experiment
            out[experiment_id] = [attempt_json(a, full=True) for a in experiment.attempts]
            spec = json.loads(experiment.spec_json or "{}")
            benchmarks[experiment_id] = spec.get("benchmark") or {}
    return out, benchmarks


def _searches(args: argparse.Namespace, document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The search document of each group that is a search (its MLflow parent holds the answer)."""
    groups = sorted({str(r["group"]) for r in document.get("experiments") or [] if r["group"]})
    out = {}
    with ControllerClient.for_args(args) as client:
        for group in groups:
            found = get_search(client, group)
            if found is not None:
                out[group] = found
    return out


def _reports(document: dict[str, Any]) -> dict[str, bytes]:
    from tunelab.analysis.report import report_bytes

    groups = sorted({str(r["group"]) for r in document.get("experiments") or [] if r["group"]})
    out = {}
    for group in groups:
        rows = [r for r in document["experiments"] if r["group"] == group]
        out[group] = report_bytes({**document, "experiments": rows})
    return out


def _watch_plans(client: ControllerClient, name: str) -> list[RunPlan]:
    """A watch's judged occurrences, one run each, under the keys the controller's own export
    uses (``watch:NAME:N``): exporting both ways writes each once."""
    from tunelab.analysis.mlflow.watch_plan import occurrence_plan
    from tunelab.cli.watches_cmd import get_watch

    doc = get_watch(client, name)
    judged = [o for o in doc["occurrences"] if o["verdict"] is not None]
    if not judged:
        raise CliError(
            f"watch {name}: no judged occurrence to export yet (tunelab watch show {name})",
            EXIT_FAILED,
        )
    return [
        occurrence_plan(name, o["index"], o["group"], o["started_at"], o["judged_at"], o)
        for o in judged
    ]


def cmd_export_mlflow(args: argparse.Namespace) -> int:
    from tunelab.analysis.mlflow.plan import plans_for
    from tunelab.analysis.mlflow.sink import MlflowError, MlflowSink, MlflowUnavailable

    client = ControllerClient.for_args(args)
    named = target(client, args.ids[0]) if len(args.ids) == 1 else None
    if named is not None and named.watch:
        plans = _watch_plans(client, named.watch)
    else:
        if named is not None and named.group:
            args.ids = [named.group]
        document = comparison(args)
        attempts, benchmarks = _attempts(
            args, [str(r["id"]) for r in document.get("experiments") or []]
        )
        plans = plans_for(
            document, attempts, _reports(document), _searches(args, document), benchmarks
        )
    try:
        sink = MlflowSink(args.tracking_uri, args.experiment)
        done = sink.write(plans)
    except MlflowUnavailable as exc:
        raise CliError(str(exc), EXIT_UNAVAILABLE) from None
    except MlflowError as exc:
        raise CliError(str(exc), EXIT_FAILED) from None
    rows = [{"key": d.key, "run_id": d.run_id, "url": d.url, "written": d.written} for d in done]
    if args.json:
        print_json({"tracking_uri": sink.shown, "experiment": args.experiment, "runs": rows})
        return EXIT_OK
    names = {p.key: p.name for p in plans}
    for item in done:
        print(f"{'exported ' if item.written else 'unchanged'}  {names[item.key]}")
        print(f"  {item.url}")
    written = sum(1 for d in done if d.written)
    print(
        wrapped(
            f"{written} run(s) written, {len(rows) - written} unchanged, in MLflow experiment "
            f"{json.dumps(args.experiment)} at {sink.shown}"
        )
    )
    return EXIT_OK


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    export = sub.add_parser("export", help="send results elsewhere (MLflow)")
    targets = export.add_subparsers(dest="target", metavar="TARGET", required=True)
    mlflow = targets.add_parser(
        "mlflow",
        help="each attempt as an MLflow run, nested under a run per group (idempotent)",
    )
    mlflow.add_argument(
        "ids",
        nargs="+",
        metavar="GROUP|ID|NAME",
        help="submission groups (g-...), experiment ids or names, a spec's name, or a watch's "
        "name (its judged occurrences, as the controller's own export writes them)",
    )
    mlflow.add_argument(
        "--tracking-uri",
        required=True,
        metavar="URI",
        help="MLflow tracking server, e.g. http://mlflow:5000 (credentials in it are never shown)",
    )
    mlflow.add_argument(
        "--experiment",
        default=DEFAULT_EXPERIMENT,
        help=f"MLflow experiment to write into, created if missing (default {DEFAULT_EXPERIMENT})",
    )
    add_json_arg(mlflow, "where each run went")
    add_effect_args(mlflow)
    add_controller_args(mlflow)
    mlflow.set_defaults(handler=cmd_export_mlflow)
