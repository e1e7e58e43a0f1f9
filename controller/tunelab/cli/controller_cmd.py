"""``tunelab controller serve``: the controller daemon; ``migrate``, ``export`` and ``import``:
its database, upgraded explicitly or moved between SQLite and PostgreSQL."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tunelab.cli.common import EXIT_OK, EXIT_USAGE, CliError
from tunelab.common.serving import run_daemon_command


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = sub.add_parser("controller", help="run the controller daemon")
    gsub = group.add_subparsers(dest="controller_command", required=True, metavar="SUBCOMMAND")
    p = gsub.add_parser("serve", help="serve the experiment queue")
    p.add_argument("--config", type=Path, help="TOML file ([controller] table)")
    p.add_argument("--listen", help="gRPC address (default 127.0.0.1:50050)")
    p.add_argument("--db", help="SQLite database file, or postgresql://USER@HOST/DB")
    p.add_argument("--secrets-file", help="host tokens (default: <db>.secrets)")
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
    p.add_argument(
        "--mlflow-tracking-uri",
        help="export every finished attempt to this MLflow server (needs tunelab[mlflow])",
    )
    p.add_argument("--mlflow-experiment", help="MLflow experiment to export into (tunelab)")
    p.add_argument("--log-level", help="debug, info, warning or error")
    p.set_defaults(handler=serve_command)

    m = gsub.add_parser("migrate", help="upgrade the database schema now (serve also does it)")
    e = gsub.add_parser("export", help="write the database's rows as JSON lines (no tokens)")
    e.add_argument("--out", type=Path, help="file to write (default: standard output)")
    i = gsub.add_parser("import", help="load an export into an empty database")
    i.add_argument("file", type=Path, help="a file written by tunelab controller export")
    for sub_parser, handler in ((m, migrate_command), (e, export_command), (i, import_command)):
        sub_parser.add_argument("--config", type=Path, help="TOML file ([controller] table)")
        sub_parser.add_argument("--db", help="SQLite database file, or postgresql://USER@HOST/DB")
        sub_parser.set_defaults(handler=handler)


def serve_command(args: argparse.Namespace) -> int:
    from tunelab.controller.config import load_config
    from tunelab.controller.daemon import serve

    overrides = {
        "listen": args.listen,
        "db": args.db,
        "secrets_file": args.secrets_file,
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
        "mlflow_tracking_uri": args.mlflow_tracking_uri,
        "mlflow_experiment": args.mlflow_experiment,
        "log_level": args.log_level,
    }
    return run_daemon_command(
        "tunelab controller", lambda: load_config(args.config, overrides), serve
    )


def _open(args: argparse.Namespace) -> Any:
    from tunelab.controller.config import ConfigError, load_config
    from tunelab.controller.store import StoreError
    from tunelab.controller.store.factory import open_store

    try:
        config = load_config(args.config, {"db": args.db})
        return open_store(config.db, config.secrets_path())
    except (ConfigError, StoreError) as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def migrate_command(args: argparse.Namespace) -> int:
    store = _open(args)
    try:
        before, after = store.migrated_from, store.schema_version
        change = f"upgraded from version {before}" if before != after else "already current"
        print(f"{store.where}: schema version {after} ({change})")
    finally:
        store.close()
    return EXIT_OK


def export_command(args: argparse.Namespace) -> int:
    from tunelab.controller.store.transfer import export_lines

    store = _open(args)
    try:
        out = args.out.open("w") if args.out else sys.stdout
        try:
            for line in export_lines(store):
                out.write(line + "\n")
        finally:
            if args.out:
                out.close()
    finally:
        store.close()
    return EXIT_OK


def import_command(args: argparse.Namespace) -> int:
    from tunelab.controller.store import StoreError
    from tunelab.controller.store.transfer import import_lines

    store = _open(args)
    try:
        with args.file.open() as lines:
            counts = import_lines(store, lines)
    except (ValueError, StoreError, OSError) as exc:
        raise CliError(f"import refused, nothing written: {exc}", EXIT_USAGE) from None
    finally:
        store.close()
    summary = ", ".join(f"{n} {table}" for table, n in counts.items())
    print(f"{summary} imported into {store.where}")
    return EXIT_OK
