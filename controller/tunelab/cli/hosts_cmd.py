"""``tunelab hosts``: the controller's host registry."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from tunelab.cli.clients import ControllerClient
from tunelab.cli.common import (
    AGENT_PORT,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    add_controller_args,
    add_json_arg,
    print_json,
    with_default_port,
)
from tunelab.common.auth import AuthConfigError, read_token
from tunelab.common.durations import parse_duration
from tunelab.common.textwidth import table as aligned
from tunelab.common.textwidth import wrapped
from tunelab.v1 import controller_pb2


def host_json(host: controller_pb2.Host) -> dict[str, Any]:
    return {
        "name": host.name,
        "address": host.address,
        "state": controller_pb2.HostState.Name(host.state).removeprefix("HOST_STATE_"),
        "state_reason": host.state_reason,
        "drain": host.drain,
        "labels": dict(host.labels),
        "gpus": host.gpu_count,
        "gpu_names": sorted({g.name for g in host.gpus}),
        "last_seen": host.last_seen or None,
        "current_run": list(host.current_attempts),
        "agent_version": host.agent_version,
        "agent_instance_id": host.agent_instance_id,
        "metrics_url": host.metrics_url,
    }


def _labels(values: list[str]) -> dict[str, str]:
    labels = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"--label {item!r}: expected KEY=VALUE", EXIT_USAGE)
        labels[key] = value
    return labels


def cmd_add(args: argparse.Namespace) -> int:
    try:
        args.address = with_default_port(args.address, AGENT_PORT)
    except ValueError as exc:
        raise CliError(f"ADDR: {exc}", EXIT_USAGE) from None
    try:
        token = read_token(args.agent_token_file) if args.agent_token_file else ""
    except AuthConfigError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    request = controller_pb2.AddHostRequest(
        name=args.name,
        address=args.address,
        labels=_labels(args.label),
        token=token or "",
        metrics_url=args.metrics_url or "",
        replace=args.replace,
    )
    host = ControllerClient.for_args(args).add_host(request).host
    if args.json:
        print_json(host_json(host))
    else:
        print(wrapped(f"added {host.name} ({host.address}); the controller polls it now"))
        # GPU figures come from this URL: a wrong one must not look like "no GPU" later
        print(
            wrapped(
                f"GPU figures from {host.metrics_url} "
                f"(to change it: {set_metrics_url_hint(host.name)})",
                "  ",
            )
        )
    return EXIT_OK


def cmd_set(args: argparse.Namespace) -> int:
    """Change the fields given and keep the rest (``hosts add --replace`` writes a new row)."""
    request = controller_pb2.UpdateHostRequest(
        name=args.name,
        set_labels=_labels(args.label),
        remove_labels=args.unset_label,
    )
    if args.metrics_url is not None:
        request.metrics_url = args.metrics_url
    if args.agent_token_file is not None:
        try:
            token = read_token(args.agent_token_file) if args.agent_token_file else ""
            request.token = token or ""
        except AuthConfigError as exc:
            raise CliError(str(exc), EXIT_USAGE) from None
    if not (
        request.set_labels
        or request.remove_labels
        or request.HasField("metrics_url")
        or request.HasField("token")
    ):
        raise CliError(
            "hosts set: give what to change: --metrics-url, --label K=V, --unset-label K "
            "or --agent-token-file",
            EXIT_USAGE,
        )
    host = ControllerClient.for_args(args).update_host(request).host
    data = host_json(host)
    if args.json:
        print_json(data)
        return EXIT_OK
    labels = ",".join(f"{k}={v}" for k, v in sorted(data["labels"].items())) or "-"
    print(wrapped(f"{host.name}: labels {labels}; GPU figures from {host.metrics_url}"))
    return EXIT_OK


def set_metrics_url_hint(host: str) -> str:
    """The command that fixes a host's metrics URL, as it runs (URL is the agent's address
    with its --metrics-port, e.g. http://10.0.0.5:9473/metrics)."""
    return f"tunelab hosts set {host or 'NAME'} --metrics-url URL"


def _slurm_time(text: str) -> str:
    """``2h``, ``90m``, ``1h30m`` → Slurm's ``H:MM:SS``; empty stays empty (the partition's)."""
    if not text:
        return ""
    try:
        seconds = int(parse_duration(text))
    except ValueError as exc:
        raise CliError(f"--time: {exc}", EXIT_USAGE) from None
    if seconds < 60:
        raise CliError("--time: Slurm counts whole minutes; give at least 1m", EXIT_USAGE)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def cmd_add_slurm(args: argparse.Namespace) -> int:
    request = controller_pb2.AddHostRequest(
        name=args.name,
        labels=_labels(args.label),
        replace=args.replace,
        slurm=controller_pb2.SlurmPool(
            partition=args.partition,
            account=args.account or "",
            qos=args.qos or "",
            gpus_per_node=args.gpus_per_node,
            time_limit=_slurm_time(args.time or ""),
            sbatch_args=args.sbatch_arg,
            max_jobs=args.max_jobs,
        ),
    )
    host = ControllerClient.for_args(args).add_host(request).host
    if args.json:
        print_json(host_json(host))
    else:
        print(wrapped(f"added Slurm pool {host.name} ({host.address}): {host.state_reason}"))
    return EXIT_OK


def cmd_ls(args: argparse.Namespace) -> int:
    hosts = ControllerClient.for_args(args).list_hosts().hosts
    rows = [host_json(h) for h in hosts]
    if args.json:
        print_json(rows)
        return EXIT_OK
    if not rows:
        print("no hosts (tunelab hosts add NAME HOST:PORT)")
        return EXIT_OK
    now = time.time()
    table = [("NAME", "ADDRESS", "STATE", "GPUS", "LABELS", "LAST SEEN", "CURRENT RUN")]
    for r in rows:
        seen = f"{now - r['last_seen']:.0f}s ago" if r["last_seen"] else "never"
        labels = ",".join(f"{k}={v}" for k, v in sorted(r["labels"].items())) or "-"
        table.append(
            (
                r["name"],
                r["address"],
                r["state"],
                str(r["gpus"]),
                labels,
                seen,
                ",".join(r["current_run"]) or "-",
            )
        )
    print("\n".join(aligned(table, cut=4)))  # labels are cut first
    for r in rows:
        if r["state"] in ("UNREACHABLE", "QUARANTINED") and r["state_reason"]:
            print(wrapped(f"{r['name']}: {r['state_reason']}"), file=sys.stderr)
    return EXIT_OK


def _drain(args: argparse.Namespace, drain: bool) -> int:
    request = controller_pb2.SetHostDrainRequest(
        name=args.name, drain=drain, clear_quarantine=not drain
    )
    host = ControllerClient.for_args(args).set_host_drain(request).host
    data = host_json(host)
    if getattr(args, "json", False):
        print_json(data)
    else:
        print(
            wrapped(
                f"{data['name']}: {data['state']}"
                + (f" ({data['state_reason']})" if data["state_reason"] else "")
            )
        )
    return EXIT_OK


def cmd_rm(args: argparse.Namespace) -> int:
    ControllerClient.for_args(args).remove_host(args.name)
    print(f"removed {args.name}")
    return EXIT_OK


def cmd_export_targets(args: argparse.Namespace) -> int:
    """Prometheus file_sd: one target group per host, its agent's metrics address."""
    hosts = ControllerClient.for_args(args).list_hosts().hosts
    groups = []
    for host in hosts:
        url = host.metrics_url or ""
        address = url.split("://", 1)[-1].split("/", 1)[0]
        if not address:
            continue
        labels = {"host": host.name}
        for key, value in sorted(host.labels.items()):
            # host label keys may hold '.', '/' or '-'; a Prometheus label name may not, and one
            # bad name makes Prometheus drop the whole file
            labels.setdefault("label_" + re.sub(r"[^A-Za-z0-9_]", "_", key), value)
        groups.append({"targets": [address], "labels": labels})
    text = json.dumps(groups, indent=2, sort_keys=True) + "\n"
    if args.out:
        out = Path(args.out)
        if not out.parent.is_dir():
            raise CliError(f"--out {out}: folder {out.parent} does not exist", EXIT_USAGE)
        tmp = out.with_suffix(".tmp")
        try:
            tmp.write_text(text)
            tmp.replace(out)  # Prometheus may read it at any moment: never half a file
        except OSError as exc:
            raise CliError(f"--out {out}: {exc.strerror}", EXIT_USAGE) from None
    else:
        sys.stdout.write(text)
    return EXIT_OK


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    hosts = sub.add_parser("hosts", help="register, list, drain and remove GPU hosts")
    hsub = hosts.add_subparsers(dest="hosts_command", required=True, metavar="SUBCOMMAND")

    add = hsub.add_parser("add", help="register an agent: tunelab hosts add NAME HOST:PORT")
    add.add_argument("name", help="the host's name in the registry (letters, digits, . _ -)")
    add.add_argument(
        "address", help=f"the agent's gRPC address HOST[:PORT] (port {AGENT_PORT} when omitted)"
    )
    add.add_argument("--label", action="append", default=[], metavar="K=V", help="host label")
    add.add_argument("--agent-token-file", help="token the controller uses for this agent")
    add.add_argument("--metrics-url", help="agent /metrics URL (default http://HOST:9473/metrics)")
    add.add_argument(
        "--replace",
        action="store_true",
        help="write the host anew (labels, token, metrics URL not given are dropped; "
        "tunelab hosts set changes one field)",
    )
    add_json_arg(add, "the host")
    add_controller_args(add)
    add.set_defaults(handler=cmd_add)

    change = hsub.add_parser(
        "set",
        help="change one field of a host and keep the rest: "
        "tunelab hosts set NAME --metrics-url URL",
    )
    change.add_argument("name", help="a registered host (tunelab hosts ls)")
    change.add_argument("--metrics-url", help="agent /metrics URL ('' for the default)")
    change.add_argument(
        "--label", action="append", default=[], metavar="K=V", help="add or change a label"
    )
    change.add_argument(
        "--unset-label", action="append", default=[], metavar="K", help="remove a label"
    )
    change.add_argument(
        "--agent-token-file", help="token the controller uses for this agent ('' for none)"
    )
    add_json_arg(change, "the host")
    add_controller_args(change)
    change.set_defaults(handler=cmd_set)
    slurm = hsub.add_parser(
        "add-slurm",
        help="register a Slurm partition as a pool (the controller must run on a submit host)",
    )
    slurm.add_argument("name", help="the pool's name in the registry (letters, digits, . _ -)")
    slurm.add_argument("--partition", required=True, help="the Slurm partition jobs go to")
    slurm.add_argument("--account", help="sbatch --account")
    slurm.add_argument("--qos", help="sbatch --qos")
    slurm.add_argument(
        "--gpus-per-node", type=int, default=0, help="GPUs a node has (selectors' gpus: N)"
    )
    slurm.add_argument("--time", help="each job's time limit, e.g. 2h (default: the partition's)")
    slurm.add_argument(
        "--sbatch-arg", action="append", default=[], metavar="ARG", help="extra sbatch flag"
    )
    slurm.add_argument("--max-jobs", type=int, default=16, help="attempts in Slurm at once")
    slurm.add_argument("--label", action="append", default=[], metavar="K=V", help="pool label")
    slurm.add_argument("--replace", action="store_true", help="change an existing pool")
    add_json_arg(slurm, "the pool")
    add_controller_args(slurm)
    slurm.set_defaults(handler=cmd_add_slurm)

    ls = hsub.add_parser("ls", help="hosts with state, GPUs, labels, last seen, current run")
    add_json_arg(ls, "the hosts")
    add_controller_args(ls)
    ls.set_defaults(handler=cmd_ls)

    for name, drain, text in (
        ("drain", True, "no new runs here"),
        ("undrain", False, "accept runs again (also lifts a quarantine)"),
    ):
        p = hsub.add_parser(name, help=text)
        p.add_argument("name", help="a registered host (tunelab hosts ls)")
        add_json_arg(p, "the host")
        add_controller_args(p)
        p.set_defaults(handler=lambda args, d=drain: _drain(args, d))

    rm = hsub.add_parser("rm", help="forget a host (it must have no live runs)")
    rm.add_argument("name", help="a registered host (tunelab hosts ls)")
    add_controller_args(rm)
    rm.set_defaults(handler=cmd_rm)

    export = hsub.add_parser("export-targets", help="Prometheus file_sd targets for every agent")
    export.add_argument("--out", help="write atomically to this file instead of stdout")
    add_controller_args(export)
    export.set_defaults(handler=cmd_export_targets)
