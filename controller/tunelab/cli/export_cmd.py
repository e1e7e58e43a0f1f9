"""``tunelab export mlflow GROUP|ID...``: the experiments' attempts as MLflow runs, nested under
a parent run per submission group (``tunelab.analysis.mlflow.plan`` says what each run holds).
Reads from the controller as ``compare`` and ``show`` do; writes with MLflow's own client."""

from __future__ import annotations

import argparse
import json
from typing import Any

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
from tunelab.cli.experiments_cmd import _add_effect_args, attempt_json, comparison
from tunelab.cli.search_cmd import get_search
from tunelab.v1 import controller_pb2

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


def cmd_export_mlflow(args: argparse.Namespace) -> int:
    from tunelab.analysis.mlflow.plan import plans_for
    from tunelab.analysis.mlflow.sink import MlflowError, MlflowSink, MlflowUnavailable

    document = comparison(args)
    attempts, benchmarks = _attempts(
        args, [str(r["id"]) for r in document.get("experiments") or []]
    )
    plans = plans_for(document, attempts, _reports(document), _searches(args, document), benchmarks)
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
        print(f"{'exported ' if item.written else 'unchanged'}  {names[item.key]}  {item.url}")
    written = sum(1 for d in done if d.written)
    print(
        f"{written} run(s) written, {len(rows) - written} unchanged, in MLflow experiment "
        f"{json.dumps(args.experiment)} at {sink.shown}"
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
        help="submission groups (g-...), experiment ids or names, or a spec's name",
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
    _add_effect_args(mlflow)
    add_controller_args(mlflow)
    mlflow.set_defaults(handler=cmd_export_mlflow)
