"""Unit: the CLI's shared rules — every option has help, one error-to-exit-code map, addresses
get the daemon's default port, piped logs get one line per redraw, no empty detail."""

from __future__ import annotations

import argparse
from pathlib import Path

import grpc
import pytest

from tunelab.cli import experiments_cmd
from tunelab.cli.common import (
    EXIT_FAILED,
    EXIT_NOT_FOUND,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    PipedLog,
    rpc_error,
    with_default_port,
)
from tunelab.cli.main import _leaves, build_parser, main
from tunelab.cli.watch_view import describe
from tunelab.v1 import controller_pb2


def _every_parser() -> list[tuple[str, argparse.ArgumentParser]]:
    top = build_parser()
    return [("tunelab", top)] + [(p.prog, p) for p in _leaves(top)]


def test_every_option_and_argument_of_every_command_has_a_help_line() -> None:
    missing = [
        f"{prog}: {action.option_strings or action.dest}"
        for prog, parser in _every_parser()
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction)
        and action.help in (None, "")
        and action.dest != "help"
    ]
    assert missing == []


def test_no_help_text_leaks_a_docstring() -> None:
    for prog, parser in _every_parser():
        texts = [parser.description or "", parser.epilog or ""]
        texts += [a.help or "" for a in parser._actions if isinstance(a.help, str)]
        for text in texts:
            assert "``" not in text and "register(" not in text, (prog, text)


@pytest.mark.parametrize(
    ("given", "port", "expected"),
    [
        ("localhost", 50051, "localhost:50051"),
        ("gpu-1.lab", 50050, "gpu-1.lab:50050"),
        ("gpu-1:7000", 50051, "gpu-1:7000"),
        ("[::1]", 50051, "[::1]:50051"),
        ("[::1]:9", 50051, "[::1]:9"),
        ("::1", 50051, "[::1]:50051"),
    ],
)
def test_a_bare_host_gets_the_daemons_default_port(given: str, port: int, expected: str) -> None:
    assert with_default_port(given, port) == expected


@pytest.mark.parametrize("given", ["::::", "a:b:c:d", "[::1", "host:port", "a b:1", ""])
def test_what_is_no_address_is_rejected(given: str) -> None:
    with pytest.raises(ValueError, match="expected"):
        with_default_port(given, 50051)


def test_a_bug_is_one_line_naming_the_trace_file_and_debug_prints_the_trace(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def broken(args: argparse.Namespace) -> int:
        raise RuntimeError("boom")

    monkeypatch.setattr(experiments_cmd, "cmd_ls", broken)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.delenv("TUNELAB_DEBUG", raising=False)
    assert main(["ls"]) == 1
    err = capsys.readouterr().err
    trace = tmp_path / "tunelab" / "cli.log"
    assert err == (
        f"tunelab: unexpected error (RuntimeError: boom); this is a bug: the trace is in {trace} "
        "(--debug prints it)\n"
    )
    assert "Traceback" in trace.read_text() and "tunelab ls" in trace.read_text()
    assert main(["ls", "--debug"]) == 1
    assert "Traceback (most recent call last)" in capsys.readouterr().err


class FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


@pytest.mark.parametrize(
    ("code", "details", "exit_code", "says"),
    [
        (grpc.StatusCode.INVALID_ARGUMENT, "server.port: bad", EXIT_USAGE, "rejected: server.port"),
        (grpc.StatusCode.NOT_FOUND, "no experiment 'x'", EXIT_NOT_FOUND, "no experiment 'x'"),
        (grpc.StatusCode.UNIMPLEMENTED, "Method not found!", EXIT_UNAVAILABLE, "not a tunelab"),
        (grpc.StatusCode.UNAUTHENTICATED, "bad token", EXIT_UNAVAILABLE, "--token-file"),
        (grpc.StatusCode.PERMISSION_DENIED, "no", EXIT_UNAVAILABLE, "refused the call"),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", EXIT_UNAVAILABLE, "within 30s"),
        (grpc.StatusCode.UNAVAILABLE, "x: Connection refused", EXIT_UNAVAILABLE, "cannot reach"),
        (grpc.StatusCode.UNAVAILABLE, "agent: refused", EXIT_UNAVAILABLE, "the agent behind it"),
        (grpc.StatusCode.UNAUTHENTICATED, "agent: bad", EXIT_UNAVAILABLE, "--agent-token-file"),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "Sent message larger than max", EXIT_USAGE, "large"),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "too many streams", EXIT_UNAVAILABLE, "overloaded"),
        (grpc.StatusCode.FAILED_PRECONDITION, "host has live runs", EXIT_FAILED, "live runs"),
    ],
)
def test_one_map_from_grpc_status_to_message_and_exit_code(
    code: grpc.StatusCode, details: str, exit_code: int, says: str
) -> None:
    error = rpc_error(FakeRpcError(code, details), "lab:50050", "controller", timeout=30)
    assert error.code == exit_code
    assert says in str(error)


def test_http1_port_is_named_as_not_a_tunelab_daemon() -> None:
    details = "failed to connect to all addresses; Trying to connect an http1.x server"
    error = rpc_error(FakeRpcError(grpc.StatusCode.UNAVAILABLE, details), "h:8000", "agent")
    assert error.code == EXIT_UNAVAILABLE and "not a tunelab agent" in str(error)


def test_piped_logs_end_a_line_at_every_redraw_and_keep_a_split_crlf_one_line_end() -> None:
    piped = PipedLog(terminal=False)
    out = piped.convert(b"shards 1/3\rshards 2/3\r") + piped.convert(b"\nshards 3/3\r\nready\n")
    assert out == b"shards 1/3\nshards 2/3\nshards 3/3\nready\n"
    assert PipedLog(terminal=True).convert(b"a\rb") == b"a\rb"


def test_an_attempt_without_a_message_shows_its_state_alone() -> None:
    experiment = controller_pb2.Experiment(
        id="x-1",
        name="n",
        state=controller_pb2.EXPERIMENT_STATE_RUNNING,
        attempts=[controller_pb2.Attempt(host="h", state=controller_pb2.ATTEMPT_STATE_DISPATCHING)],
    )
    assert describe(experiment) == ("x-1", "n", "RUNNING", "h", "DISPATCHING")
