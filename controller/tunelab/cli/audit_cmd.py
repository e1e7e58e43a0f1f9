"""``tunelab audit``: a host's audit, run by its agent, shown here exactly as on the host.

The agent returns the report document it would print with ``tunelab-agent audit --json``;
``--json`` prints it unchanged and the table is rendered from it by the same code, so output and
exit code (0 no FAIL, 1 a FAIL, 2 usage, 3 cannot connect/auth, 4 no such host) match the host's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from tunelab.cli.clients import AgentClient, ControllerClient
from tunelab.cli.common import (
    AGENT_PORT,
    DEFAULT_AGENT,
    EXIT_USAGE,
    CliError,
    add_auth_args,
    with_default_port,
)
from tunelab.common.auditview import exit_code, render_table
from tunelab.v1 import agent_pb2, audit_pb2, controller_pb2

DESCRIPTION = (
    "Run the host audit on a GPU host's agent and print it as `tunelab-agent audit` does on the "
    "host. Exit codes: 0 no check FAILed, 1 a check FAILed, 2 usage, 3 cannot connect or not "
    "authorised, 4 no such host."
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "audit",
        help="audit a GPU host for inference tuning (through its agent)",
        description=DESCRIPTION,
    )
    p.add_argument(
        "host",
        nargs="?",
        help="a host known to the controller (see tunelab hosts ls); or use --agent ADDR",
    )
    p.add_argument(
        "--agent",
        help="audit this agent directly, HOST:PORT (default $TUNELAB_AGENT or 127.0.0.1:50051)",
    )
    p.add_argument(
        "--controller",
        help="controller HOST:PORT for a named HOST (default $TUNELAB_CONTROLLER, config file)",
    )
    add_auth_args(p)
    p.add_argument(
        "--only", action="append", default=[], metavar="ID[,ID...]", help="run only these checks"
    )
    p.add_argument("--json", action="store_true", help="print the agent's report document")
    p.set_defaults(handler=run)


def report_from_pb(report: audit_pb2.AuditReport) -> dict[str, Any]:
    """The document from the message fields, for an agent that sent no report_json."""
    return {
        "host": report.host,
        "environment": report.environment,
        "generated_at": report.generated_at,
        "checks": [
            {
                "id": c.id,
                "title": c.title,
                "status": audit_pb2.CheckStatus.Name(c.status).removeprefix("CHECK_STATUS_"),
                "observed": c.observed,
                "expected": c.expected,
                "evidence": [{"source": e.source, "value": e.value} for e in c.evidence],
                "remediation": {
                    "command": c.remediation.command,
                    "persistent": c.remediation.persistent,
                    "reboot_required": c.remediation.reboot_required,
                },
            }
            for c in report.checks
        ],
    }


def _through_controller(args: argparse.Namespace, only: list[str]) -> audit_pb2.AuditReport:
    """``tunelab audit HOST``: the controller asks the host's agent (with its own credentials)."""
    with ControllerClient.for_args(args) as client:
        request = controller_pb2.AuditHostRequest(name=args.host, only=only)
        return client.audit_host(request).report


def _direct(args: argparse.Namespace, only: list[str]) -> audit_pb2.AuditReport:
    """``tunelab audit --agent ADDR``: straight to one agent."""
    with AgentClient.for_args(args) as client:
        return client.run_audit(agent_pb2.RunAuditRequest(only=only)).report


def run(args: argparse.Namespace) -> int:
    args.agent_given = args.agent is not None
    try:
        args.agent = with_default_port(
            args.agent or os.environ.get("TUNELAB_AGENT", DEFAULT_AGENT), AGENT_PORT
        )
    except ValueError as exc:
        raise CliError(f"--agent: {exc}", EXIT_USAGE) from None
    if args.host and args.agent_given:
        raise CliError("give a HOST known to the controller or --agent ADDR, not both", EXIT_USAGE)
    only = [part.strip() for value in args.only for part in value.split(",") if part.strip()]
    report = _through_controller(args, only) if args.host else _direct(args, only)
    text = report.report_json
    document: dict[str, Any] = json.loads(text) if text else report_from_pb(report)
    if args.json:
        print(text if text else json.dumps(document, indent=2))
    else:
        colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        sys.stdout.write(render_table(document, colour=colour))
    return exit_code(document)
