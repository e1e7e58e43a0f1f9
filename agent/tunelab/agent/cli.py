"""``tunelab-agent``: the daemon (``serve``) and the host audit (``audit``)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

from tunelab.agent.audit.cli import add_audit_parser
from tunelab.agent.runonce import add_run_once_parser
from tunelab.common import __version__
from tunelab.common.serving import run_daemon_command


def _serve_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("serve", help="run the agent daemon")
    p.add_argument("--config", type=Path, help="TOML file ([agent] table)")
    p.add_argument("--listen", help="gRPC address (default 127.0.0.1:50051)")
    p.add_argument(
        "--state-dir", help="servers' state and logs (default /var/lib/tunelab-agent as root)"
    )
    p.add_argument("--token-file", help="require 'authorization: Bearer <token>' on every RPC")
    p.add_argument("--tls-cert", help="server certificate (PEM)")
    p.add_argument("--tls-key", help="server private key (PEM)")
    p.add_argument("--tls-client-ca", help="require client certificates signed by this CA (mTLS)")
    p.add_argument("--metrics-listen", help="serve Prometheus /metrics here, e.g. 127.0.0.1:9473")
    p.add_argument(
        "--nvml-snapshot", help="answer GPU queries from a captured NVML snapshot (tests, demo)"
    )
    p.add_argument("--sysfs-root", help="read sysfs/procfs under this root (default /)")
    p.add_argument("--log-level", help="debug, info, warning or error")
    p.add_argument("--no-reflection", action="store_true", help="disable gRPC server reflection")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tunelab-agent", description="tunelab-agent: the daemon (serve) and the host audit."
    )
    parser.add_argument("--version", action="version", version=f"tunelab-agent {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _serve_parser(sub)
    add_audit_parser(sub)
    add_run_once_parser(sub)
    return parser


def _serve(args: argparse.Namespace) -> int:
    from tunelab.agent.config import load_config
    from tunelab.agent.daemon import serve

    overrides = {
        "listen": args.listen,
        "state_dir": args.state_dir,
        "token_file": args.token_file,
        "tls_cert": args.tls_cert,
        "tls_key": args.tls_key,
        "tls_client_ca": args.tls_client_ca,
        "metrics_listen": args.metrics_listen,
        "nvml_snapshot": args.nvml_snapshot,
        "sysfs_root": args.sysfs_root,
        "log_level": args.log_level,
        "reflection": False if args.no_reflection else None,
    }
    return run_daemon_command("tunelab-agent", lambda: load_config(args.config, overrides), serve)


EXIT_PIPE = 141  # 128 + SIGPIPE, as a shell reports `yes | head`


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # `tunelab-agent audit --json | head`: the reader has what it wanted
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PIPE


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # a bare `tunelab-agent`: the overview, not an error
        parser.print_help()
        return 0
    if args.command == "serve":
        return _serve(args)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.error(f"unknown command {args.command}")
    result: int = handler(args)
    sys.stdout.flush()  # inside main's try: a closed pipe is EPIPE here, not at exit
    return result


if __name__ == "__main__":
    raise SystemExit(main())
