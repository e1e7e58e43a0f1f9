"""``tunelab``: the laptop CLI and the controller daemon.

Each command group lives in its own module whose ``register`` function adds its parsers and sets
``handler`` on them; a module imports what its handlers need inside them, so ``tunelab --help``
loads neither the load generator nor the controller's domain code.

``main`` is the one top-level handler: a ``CliError`` prints its line and exits with its code
(``tunelab.cli.common`` has the table); anything else is a bug, printed as one line naming the
file that holds the trace (``--debug`` prints the trace instead); a closed pipe (``| head``) is
silent.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

from tunelab.cli import (
    audit_cmd,
    bench_cmd,
    controller_cmd,
    experiments_cmd,
    export_cmd,
    hosts_cmd,
    profile_cmd,
    search_cmd,
    server_cmd,
    watches_cmd,
)
from tunelab.cli.common import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, CliError
from tunelab.common import __version__
from tunelab.common.textwidth import error_line

DESCRIPTION = "tunelab: queue, run and compare inference-server experiments on GPU hosts."
EPILOG = (
    "exit codes: 0 ok, 1 the work failed, 2 usage or invalid input, "
    "3 cannot connect or not authorised, 4 not found"
)
COMMAND_MODULES = [
    server_cmd,
    audit_cmd,
    controller_cmd,
    hosts_cmd,
    experiments_cmd,
    search_cmd,
    export_cmd,
    bench_cmd,
    profile_cmd,
    watches_cmd,
]
EXIT_PIPE = 141  # 128 + SIGPIPE, what a shell reports for `yes | head`
LOG_LIMIT = 1 << 20  # the trace file is rotated past 1 MiB


def _add_debug(parser: argparse.ArgumentParser, top: bool) -> None:
    parser.add_argument(
        "--debug",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="print the full trace of an unexpected error (also $TUNELAB_DEBUG=1)",
    )


def _leaves(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every parser below ``parser`` that takes options (subcommands of subcommands too)."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                found.append(child)
                found.extend(_leaves(child))
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tunelab", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"tunelab {__version__}")
    _add_debug(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(sub)
    for child in _leaves(parser):
        _add_debug(child, top=False)
    return parser


def trace_log_path() -> Path:
    """Where unexpected errors are written: ``$XDG_STATE_HOME/tunelab/cli.log``."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "tunelab" / "cli.log"


def _write_trace(argv: list[str]) -> Path | None:
    path = trace_log_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.stat().st_size > LOG_LIMIT:
            path.replace(path.with_suffix(".log.1"))
        with path.open("a", encoding="utf-8") as out:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            out.write(f"--- {stamp} tunelab {__version__}: tunelab {' '.join(argv)}\n")
            out.write(traceback.format_exc())
    except OSError:
        return None
    return path


def _silence_stdout() -> None:
    """After EPIPE: point stdout at /dev/null so the interpreter's final flush stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _new_line() -> None:
    """After Ctrl-C on a terminal: end the progress line (and the echoed ``^C``) so the message
    that follows stands on its own line."""
    try:
        if sys.stderr.isatty():
            sys.stderr.write("\n")
    except (OSError, ValueError):
        pass


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.command is None:  # a bare `tunelab`: the overview, not an error
        parser.print_help()
        return EXIT_OK
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    code: int = handler(args)
    sys.stdout.flush()
    return code


def main(argv: list[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args_list or bool(os.environ.get("TUNELAB_DEBUG"))
    try:
        parser = build_parser()
        return _run(parser, parser.parse_args(args_list))
    except CliError as exc:
        if exc.code == EXIT_INTERRUPTED:
            _new_line()
        print(error_line(f"tunelab: {exc}"), file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        _new_line()
        print("tunelab: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `tunelab ... | head`: the reader has all it wanted
        _silence_stdout()
        return EXIT_PIPE
    except Exception as exc:  # the last line of defence: a bug, reported as one line + its trace
        if debug:
            traceback.print_exc()
        where = _write_trace(args_list)
        hint = f"the trace is in {where}" if where else "the trace could not be saved"
        print(
            error_line(
                f"tunelab: unexpected error ({type(exc).__name__}: {exc}); this is a bug: "
                f"{hint} (--debug prints it)"
            ),
            file=sys.stderr,
        )
        return EXIT_FAILED


if __name__ == "__main__":
    raise SystemExit(main())
