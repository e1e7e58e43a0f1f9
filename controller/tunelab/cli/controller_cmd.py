"""``tunelab controller serve``: the controller daemon."""

from __future__ import annotations

import argparse
from pathlib import Path

from tunelab.common.serving import run_daemon_command


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = sub.add_parser("controller", help="run the controller daemon")
    gsub = group.add_subparsers(dest="controller_command", required=True, metavar="SUBCOMMAND")
    p = gsub.add_parser("serve", help="serve the experiment queue")
    p.add_argument("--config", type=Path, help="TOML file ([controller] table)")
    p.add_argument("--listen", help="gRPC address (default 127.0.0.1:50050)")
    p.add_argument("--db", help="SQLite database file")
    p.add_argument("--token-file", help="require this bearer token from clients")
    p.add_argument("--tls-cert", help="server certificate (PEM)")
    p.add_argument("--tls-key", help="server private key (PEM)")
    p.add_argument("--tls-client-ca", help="require client certificates from this CA (mTLS)")
    p.add_argument("--metrics-listen", help="serve Prometheus /metrics here, e.g. 127.0.0.1:9474")
    p.add_argument("--agent-token-file", help="token for agents added without their own")
    p.add_argument("--lease-timeout", help="UNKNOWN this long becomes LOST (default 10m)")
    p.add_argument("--host-poll-interval", help="how often each agent is polled (default 5s)")
    p.add_argument("--attempt-poll-interval", help="how often each running attempt is checked (2s)")
    p.add_argument("--scrape-interval", help="agent /metrics scrape cadence during attempts (5s)")
    p.add_argument("--max-variants", help="experiments one submission may expand to (10000)")
    p.add_argument("--log-level", help="debug, info, warning or error")
    p.set_defaults(handler=serve_command)


def serve_command(args: argparse.Namespace) -> int:
    from tunelab.controller.config import load_config
    from tunelab.controller.daemon import serve

    overrides = {
        "listen": args.listen,
        "db": args.db,
        "token_file": args.token_file,
        "tls_cert": args.tls_cert,
        "tls_key": args.tls_key,
        "tls_client_ca": args.tls_client_ca,
        "metrics_listen": args.metrics_listen,
        "agent_token_file": args.agent_token_file,
        "lease_timeout": args.lease_timeout,
        "host_poll_interval": args.host_poll_interval,
        "attempt_poll_interval": args.attempt_poll_interval,
        "scrape_interval": args.scrape_interval,
        "max_variants": args.max_variants,
        "log_level": args.log_level,
    }
    return run_daemon_command(
        "tunelab controller", lambda: load_config(args.config, overrides), serve
    )
