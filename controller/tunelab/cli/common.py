"""What every ``tunelab`` subcommand shares: exit codes, connection flags, the error map, output.

Exit codes, the same for every command (README "Exit codes"):

    0  ok
    1  the work failed (a server, experiment, benchmark or check failed; the daemon refused it)
    2  usage or invalid input (a bad flag, a rejected spec, a file that cannot be read)
    3  cannot connect or not authorised (nothing answers, wrong daemon, wrong token, timeout)
    4  not found (no such experiment, host or server)

``rpc_error`` is the one place a gRPC status becomes a message and one of these codes.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import json
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from tunelab.cli.userconfig import load_user_config
from tunelab.common.auth import AuthConfigError, ClientAuth, split_host_port
from tunelab.common.rpcerrors import PROXY_MESSAGES

EXIT_OK = 0
EXIT_FAILED = 1  # the server, experiment or check failed
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3  # cannot connect, or not authorised
EXIT_NOT_FOUND = 4
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT

AGENT_PORT = 50051
CONTROLLER_PORT = 50050
DEFAULT_AGENT = f"127.0.0.1:{AGENT_PORT}"
DEFAULT_CONTROLLER = f"127.0.0.1:{CONTROLLER_PORT}"
T = TypeVar("T")


class CliError(Exception):
    """A failure already phrased for a person, with the exit code to use."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def with_default_port(address: str, port: int) -> str:
    """``localhost`` → ``localhost:50051``: a bare host gets the daemon's default port.

    gRPC would otherwise dial 443 for a name without a port. Raises ValueError for what is no
    address at all (``::::``, ``[::1``), naming the expected form.
    """
    text = address.strip()
    if text.startswith("[") and "]" not in text:
        raise ValueError(f"expected [IPv6][:PORT], got {address!r}")
    if text.startswith("["):
        full = text if "]:" in text else f"{text}:{port}"
    elif text.count(":") > 1:  # a bare IPv6 address
        full = f"[{text}]:{port}"
    else:
        full = text if ":" in text else f"{text}:{port}"
    host, _ = split_host_port(full)
    if not host or (":" in host and not _is_ipv6(host)) or any(c in host for c in "[] /\\"):
        raise ValueError(f"expected HOST[:PORT] or [IPv6][:PORT], got {address!r}")
    return full


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _address_type(port: int) -> Callable[[str], str]:
    """An argparse ``type`` that adds the default port and rejects what is not an address."""

    def parse(text: str) -> str:
        try:
            return with_default_port(text, port)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def add_auth_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--token-file", help="bearer token file (else $TUNELAB_TOKEN)")
    parser.add_argument("--tls-ca", help="CA certificate to verify the daemon (PEM)")
    parser.add_argument("--tls-cert", help="client certificate for mTLS (PEM)")
    parser.add_argument("--tls-key", help="client private key for mTLS (PEM)")


def add_agent_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--agent",
        default=os.environ.get("TUNELAB_AGENT", DEFAULT_AGENT),
        type=_address_type(AGENT_PORT),
        help=f"agent address HOST[:PORT] (default $TUNELAB_AGENT or {DEFAULT_AGENT}; "
        f"port {AGENT_PORT} when omitted)",
    )
    add_auth_args(parser)


def add_controller_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--controller",
        help="controller HOST[:PORT] (default $TUNELAB_CONTROLLER, the config file, or "
        f"{DEFAULT_CONTROLLER}; port {CONTROLLER_PORT} when omitted)",
    )
    add_auth_args(parser)


def add_json_arg(parser: argparse.ArgumentParser, what: str = "the result") -> None:
    parser.add_argument("--json", action="store_true", help=f"print {what} as JSON")


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
    try:
        return with_default_port(address or DEFAULT_CONTROLLER, CONTROLLER_PORT), auth
    except ValueError as exc:
        raise CliError(f"controller address: {exc}", EXIT_USAGE) from None


def client_auth(args: argparse.Namespace) -> ClientAuth:
    try:
        return ClientAuth.from_options(args.token_file, args.tls_ca, args.tls_cert, args.tls_key)
    except AuthConfigError as exc:
        raise CliError(str(exc), EXIT_USAGE) from exc


def agent_channel(args: argparse.Namespace) -> grpc.Channel:
    return client_auth(args).channel(args.agent)


# --- the error map ----------------------------------------------------------------------------

_START = {
    "controller": "tunelab controller serve",
    "agent": "tunelab-agent serve",
}
_WHERE = {
    "controller": "--controller, $TUNELAB_CONTROLLER or the config file",
    "agent": "--agent or $TUNELAB_AGENT",
}
_BY_CODE: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.INVALID_ARGUMENT: EXIT_USAGE,
    grpc.StatusCode.OUT_OF_RANGE: EXIT_USAGE,
    grpc.StatusCode.NOT_FOUND: EXIT_NOT_FOUND,
    grpc.StatusCode.UNAVAILABLE: EXIT_UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: EXIT_UNAVAILABLE,
    grpc.StatusCode.UNAUTHENTICATED: EXIT_UNAVAILABLE,
    grpc.StatusCode.PERMISSION_DENIED: EXIT_UNAVAILABLE,
    grpc.StatusCode.UNIMPLEMENTED: EXIT_UNAVAILABLE,
}


def _agent_unreached(details: str) -> str | None:
    """What the controller says when an agent it called was not reached (rpcerrors'
    PROXY_MESSAGES, sent as FAILED_PRECONDITION): the rest of the sentence, else None."""
    for message in PROXY_MESSAGES.values():
        if details == f"agent {message}":
            return message
    return None


def _proxied(details: str) -> str | None:
    """The agent's own message when the controller passed an agent's status through."""
    head, sep, rest = details.partition(": ")
    return rest if sep and head in ("agent", "the agent") else None


def _unreachable(details: str, daemon: str, target: str) -> str:
    lowered = details.lower()
    if "failed parsing http/2" in lowered or "expected settings frame" in lowered:
        grpc_port = AGENT_PORT if daemon == "agent" else CONTROLLER_PORT
        return (
            f"{target} answered, but not in gRPC (plain HTTP, such as a /metrics port): it is "
            f"not a tunelab {daemon}'s gRPC address (that is port {grpc_port} by default; "
            f"/metrics is on 9473 for an agent, 9474 for a controller); check {_WHERE[daemon]}"
        )
    if "http1" in lowered or "http/1" in lowered:
        return (
            f"{target} speaks HTTP/1, not gRPC: it is not a tunelab {daemon} "
            f"(check {_WHERE[daemon]})"
        )
    reason = details.rsplit(": ", 1)[-1].strip(" []") or details  # "...: Connection refused"
    return (
        f"cannot reach the {daemon} at {target}: {reason} "
        f"(is `{_START[daemon]}` running there? address from {_WHERE[daemon]})"
    )


def rpc_error(
    exc: grpc.RpcError, target: str, daemon: str = "controller", timeout: float | None = None
) -> CliError:
    """A gRPC failure as a message and an exit code, by the table in the module docstring."""
    code = exc.code()
    details = exc.details() or ""
    agent_said = _proxied(details) if daemon == "controller" else None
    exit_code = _BY_CODE.get(code, EXIT_FAILED)
    unreached = _agent_unreached(details) if daemon == "controller" else None
    if code is grpc.StatusCode.FAILED_PRECONDITION and unreached is not None:
        # the controller answered; the agent behind it is down or hung: a connection problem
        return CliError(
            f"the controller at {target} is up, but the agent behind it {unreached}",
            EXIT_UNAVAILABLE,
        )
    if code is grpc.StatusCode.UNAVAILABLE:
        if agent_said is not None:
            message = (
                f"the controller at {target} is up, but the agent behind it did not answer: "
                f"{agent_said} (tunelab hosts ls shows each host's state)"
            )
        else:
            message = _unreachable(details, daemon, target)
    elif code is grpc.StatusCode.DEADLINE_EXCEEDED:
        within = f" within {timeout:g}s" if timeout else " in time"
        who = "the agent behind the controller" if agent_said is not None else f"the {daemon}"
        message = f"{who} at {target} did not answer{within}"
    elif code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        if agent_said is not None:
            message = (
                f"the agent refused the controller's token ({agent_said}); give the host its "
                "token: tunelab hosts set NAME --agent-token-file F"
            )
        else:
            message = (
                f"the {daemon} at {target} refused the call ({details}); pass --token-file "
                "or set TUNELAB_TOKEN"
            )
    elif code is grpc.StatusCode.UNIMPLEMENTED:
        message = (
            f"{target} is not a tunelab {daemon}, or one too old for this command "
            f"({details or 'method not found'}); check {_WHERE[daemon]}"
        )
    elif code is grpc.StatusCode.INVALID_ARGUMENT:
        message = f"rejected: {details}"
    elif code is grpc.StatusCode.NOT_FOUND:
        message = details or "not found"
    elif code is grpc.StatusCode.RESOURCE_EXHAUSTED:
        too_big = "larger than max" in details.lower()
        exit_code = EXIT_USAGE if too_big else EXIT_UNAVAILABLE
        message = (
            f"too large for the {daemon}: {details}"
            if too_big
            else f"the {daemon} at {target} is overloaded: {details}; try again"
        )
    else:
        message = f"{code.name.lower()}: {details}"
    return CliError(message, exit_code)


# --- output -------------------------------------------------------------------------------------


def local_time(stamp: Any) -> str:
    """A unix time as the local date and time (``-`` for none)."""
    if isinstance(stamp, bool) or not isinstance(stamp, int | float):
        return "-"
    return datetime.datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M:%S")


def step_error_line(doc: dict[str, Any], when: Callable[[Any], str] = local_time) -> list[str]:
    """The controller's account of this watch's or search's failing control-loop step (its
    ``step_error``), if any: a line to show under the object's head."""
    fault = doc.get("step_error")
    if not fault:
        return []
    line = f"step failing ({fault['failures']} in a row since {when(fault['since'])}; "
    return [line + f"retried with back-off): {fault['error']}"]


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def is_terminal() -> bool:
    return sys.stdout.isatty()


class PipedLog:
    """Log bytes as written to stdout: on a terminal as is; piped, each ``\\r`` redraw ends a line.

    Progress bars redraw with a bare carriage return, so a piped log would hold every redraw of a
    load on one line of kilobytes; ``grep`` and ``less`` want one line per redraw. A ``\\r\\n``
    split across two chunks stays one line end.
    """

    def __init__(self, terminal: bool) -> None:
        self._terminal = terminal
        self._after_cr = False

    def convert(self, data: bytes) -> bytes:
        if self._terminal or not data:
            return data
        if self._after_cr and data.startswith(b"\n"):
            data = data[1:]
        self._after_cr = data.endswith(b"\r")
        return data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
