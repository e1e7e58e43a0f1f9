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
        print(f"added {host.name} ({host.address}); the controller polls it now")
        # GPU figures come from this URL: a wrong one must not look like "no GPU" later
        print(f"  GPU figures from {host.metrics_url} (--metrics-url to change it)")
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
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip())
    for r in rows:
        if r["state"] in ("UNREACHABLE", "QUARANTINED") and r["state_reason"]:
            print(f"{r['name']}: {r['state_reason']}", file=sys.stderr)
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
            f"{data['name']}: {data['state']}"
            + (f" ({data['state_reason']})" if data["state_reason"] else "")
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
    add.add_argument("--replace", action="store_true", help="change an existing host")
    add_json_arg(add, "the host")
    add_controller_args(add)
    add.set_defaults(handler=cmd_add)

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
