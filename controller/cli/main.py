"""``tunelab``: the laptop CLI and the controller daemon.

Each command group lives in its own module with a ``register(subparsers)`` function that adds
its parsers and sets ``handler`` on them.
"""

from __future__ import annotations

import argparse
import sys

from controller.cli import (
    audit_cmd,
    bench_cmd,
    controller_cmd,
    experiments_cmd,
    hosts_cmd,
    server_cmd,
)
from controller.cli.common import EXIT_USAGE, CliError

COMMAND_MODULES = [server_cmd, audit_cmd, controller_cmd, hosts_cmd, experiments_cmd, bench_cmd]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tunelab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
