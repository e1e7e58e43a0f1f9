"""``tunelab``: the laptop CLI and the controller daemon.

Each command group lives in its own module with a ``register(subparsers)`` function that adds
its parsers and sets ``handler`` on them; a module imports what its handlers need inside them,
so ``tunelab --help`` loads neither the load generator nor the controller's domain code.
"""

from __future__ import annotations

import argparse
import sys

from tunelab.cli import (
    audit_cmd,
    bench_cmd,
    controller_cmd,
    experiments_cmd,
    hosts_cmd,
    server_cmd,
)
from tunelab.cli.common import EXIT_OK, EXIT_USAGE, CliError
from tunelab.common import __version__

DESCRIPTION = "tunelab: queue, run and compare inference-server experiments on GPU hosts."
COMMAND_MODULES = [server_cmd, audit_cmd, controller_cmd, hosts_cmd, experiments_cmd, bench_cmd]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tunelab", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"tunelab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # a bare `tunelab`: the overview, not an error
        parser.print_help()
        return EXIT_OK
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        code: int = handler(args)
    except CliError as exc:
        print(f"tunelab: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    raise SystemExit(main())
