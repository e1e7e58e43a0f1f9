"""Integration: ``tunelab controller migrate / export / import`` as processes, moving the
committed old database's history SQLite → PostgreSQL → SQLite; ``--db postgresql://`` is a
URL (never a folder named ``postgresql:``) and its password stays out of the log."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.controller_proc import ControllerProcess
from tests.support.daemon_proc import REPO
from tests.support.postgres import PostgresServer
from tunelab.controller.config import ConfigError, load_config
from tunelab.controller.store import SqliteStore
from tunelab.controller.store.core import SqlStore
from tunelab.controller.store.postgres import PostgresStore
from tunelab.controller.store.schema import load_migrations
from tunelab.v1 import controller_pb2

OLD_DB = REPO / "tests" / "fixtures" / "store" / "controller-f58540c.db"


LATEST = load_migrations()[-1].version


def tunelab(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tunelab.cli", "controller", *args],
        cwd=cwd, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def snapshot(store: SqlStore) -> dict[str, list[tuple[object, ...]]]:
    out = {}
    for table, order in (("hosts", "name"), ("experiments", "seq"), ("attempts", "id")):
        rows = store._query(f"SELECT * FROM {table} ORDER BY {order}")  # noqa: S608
        out[table] = [tuple(dict(r).values()) for r in rows]
    out["events"] = [
        tuple(dict(r).values())
        for r in store._query("SELECT id, at, kind, ref, to_state FROM events ORDER BY id")
    ]
    return out


def test_history_moves_sqlite_to_postgresql_and_back(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    old = tmp_path / "old.db"
    shutil.copyfile(OLD_DB, old)
    migrated = tunelab("migrate", "--db", str(old))
    assert migrated.returncode == 0, migrated.stderr
    assert migrated.stdout.strip() == f"{old}: schema version {LATEST} (upgraded from version 0)"
    assert "already current" in tunelab("migrate", "--db", str(old)).stdout
    url = postgres.new_database()
    dump = tmp_path / "dump.jsonl"
    assert tunelab("export", "--db", str(old), "--out", str(dump)).returncode == 0
    assert b"fixture-agent-token-a" not in dump.read_bytes()  # tokens are not exported
    loaded = tunelab("import", "--db", url, str(dump))
    assert loaded.returncode == 0, loaded.stderr
    assert "2 hosts, 4 experiments, 2 attempts" in loaded.stdout
    again = tunelab("import", "--db", url, str(dump))
    assert again.returncode == 2 and "import into an empty store" in again.stderr
    source, pg = SqliteStore(old), PostgresStore(url)
    assert snapshot(pg) == snapshot(source)
    back = tmp_path / "back.db"
    dump2 = tmp_path / "dump2.jsonl"
    assert tunelab("export", "--db", url, "--out", str(dump2)).returncode == 0
    assert tunelab("import", "--db", str(back), str(dump2)).returncode == 0
    assert snapshot(SqliteStore(back)) == snapshot(source)
    fresh = source.list_experiments()[0]
    fresh.id, fresh.name = "x-after-import", "after-import"
    pg.insert_experiments([fresh])  # the identity column moved past the imported rows
    assert pg.get_experiment("x-after-import").seq > 4  # type: ignore[union-attr]


def test_db_urls_are_urls_and_their_passwords_stay_out_of_the_log(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    url = postgres.new_database().replace("tunelab@", "tunelab:s3cr3t-pw@")  # trust auth
    config = load_config(None, {"db": url}, env={})
    assert config.db == url and config.redacted()["db"] == url.replace("s3cr3t-pw", "***")
    try:
        load_config(None, {"db": "mysql://x/y"}, env={})
        raise AssertionError("mysql:// accepted")
    except ConfigError as exc:
        assert "db: unsupported database URL mysql://" in str(exc)
    # the last --db wins: the URL given after the harness's own file path
    secrets = ["--secrets-file", str(tmp_path / "s")]
    controller = ControllerProcess(tmp_path, ["--db", url, *secrets]).start()
    try:
        stub = controller.stub()
        text = (REPO / "examples" / "demo-ablation.yaml").read_text()
        reply = stub.SubmitExperiments(controller_pb2.SubmitExperimentsRequest(spec_yaml=text))
        assert len(reply.experiments) > 1
    finally:
        controller.terminate()
    assert not (REPO / "postgresql:").exists() and not (tmp_path / "postgresql:").exists()
    assert "s3cr3t-pw" not in controller.log()
    assert len(PostgresStore(url).list_experiments()) == len(reply.experiments)
