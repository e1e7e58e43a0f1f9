"""What every ``tunelab`` subcommand shares: exit codes, connection flags, error mapping, output."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from tunelab.cli.userconfig import load_user_config
from tunelab.common.auth import AuthConfigError, ClientAuth

EXIT_OK = 0
EXIT_FAILED = 1  # the server, experiment or check failed
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3  # cannot connect, or not authorised

DEFAULT_AGENT = "127.0.0.1:50051"
DEFAULT_CONTROLLER = "127.0.0.1:50050"
T = TypeVar("T")


class CliError(Exception):
    """A failure already phrased for a person, with the exit code to use."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def add_auth_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--token-file", help="bearer token file (else $TUNELAB_TOKEN)")
    parser.add_argument("--tls-ca", help="CA certificate to verify the daemon (PEM)")
    parser.add_argument("--tls-cert", help="client certificate for mTLS (PEM)")
    parser.add_argument("--tls-key", help="client private key for mTLS (PEM)")


def add_agent_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--agent",
        default=os.environ.get("TUNELAB_AGENT", DEFAULT_AGENT),
        help=f"agent address HOST:PORT (default $TUNELAB_AGENT or {DEFAULT_AGENT})",
    )
    add_auth_args(parser)


def add_controller_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--controller",
        help="controller HOST:PORT (default $TUNELAB_CONTROLLER, the config file, or "
        f"{DEFAULT_CONTROLLER})",
    )
    add_auth_args(parser)


def controller_target(args: argparse.Namespace) -> tuple[str, ClientAuth]:
    """Where the controller is and how to authenticate: flags, environment, config file."""
    try:
        user = load_user_config()
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from exc
    address = args.controller or os.environ.get("TUNELAB_CONTROLLER") or user.get("controller")
    try:
        auth = ClientAuth.from_options(
            args.token_file
            or (None if os.environ.get("TUNELAB_TOKEN") else user.get("token_file")),
            args.tls_ca or user.get("tls_ca"),
            args.tls_cert or user.get("tls_cert"),
            args.tls_key or user.get("tls_key"),
        )
    except AuthConfigError as exc:
        raise CliError(str(exc), EXIT_USAGE) from exc
    return address or DEFAULT_CONTROLLER, auth


def client_auth(args: argparse.Namespace) -> ClientAuth:
    try:
        return ClientAuth.from_options(args.token_file, args.tls_ca, args.tls_cert, args.tls_key)
    except AuthConfigError as exc:
        raise CliError(str(exc), EXIT_USAGE) from exc


def agent_channel(args: argparse.Namespace) -> grpc.Channel:
    return client_auth(args).channel(args.agent)


def rpc_error(exc: grpc.RpcError, target: str) -> CliError:
    """A gRPC failure as a message and an exit code (3: cannot connect / not authorised)."""
    code = exc.code()
    details = exc.details() or str(exc)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return CliError(f"cannot reach {target}: {details}", EXIT_UNAVAILABLE)
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return CliError(
            f"{target} refused the call ({details}); pass --token-file or set TUNELAB_TOKEN",
            EXIT_UNAVAILABLE,
        )
    if code is grpc.StatusCode.INVALID_ARGUMENT:
        return CliError(f"rejected: {details}", EXIT_USAGE)
    if code is grpc.StatusCode.NOT_FOUND:
        return CliError(details or "not found", EXIT_FAILED)
    return CliError(f"{code.name.lower()}: {details}", EXIT_FAILED)


def call(target: str, fn: Callable[[], T]) -> T:
    """Run one RPC, turning gRPC errors into CliError."""
    try:
        return fn()
    except grpc.RpcError as exc:
        raise rpc_error(exc, target) from exc


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def is_terminal() -> bool:
    return sys.stdout.isatty()
