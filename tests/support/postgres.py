"""A real PostgreSQL server for the tests, in a temporary data directory (Debian's
``postgresql`` package: binaries under /usr/lib/postgresql/*/bin). It refuses to run as root, so
as root it runs as ``nobody``. One server per test session; each test gets a fresh database."""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg

from tests.support.ports import free_port

_counter = itertools.count()


def pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


class PostgresServer:
    def __init__(self) -> None:
        binaries = pg_bin()
        if binaries is None:
            raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql)")
        self.bin = binaries
        self.root = Path(tempfile.mkdtemp(prefix="tunelab-pg-"))
        self.root.chmod(0o755)  # nobody must reach its data directory
        self.data = self.root / "data"
        self.port = free_port()
        self.user = "tunelab"
        self._as: list[str] = []
        if os.geteuid() == 0:
            self._as = ["runuser", "-u", "nobody", "--"]
            shutil.chown(self.root, "nobody")

    def _run(self, *argv: str) -> None:
        subprocess.run([*self._as, *argv], check=True, capture_output=True, timeout=120)

    def start(self) -> PostgresServer:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", self.user,
                  "--auth=trust", "--no-sync", "-E", "UTF8")  # fmt: skip
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port}"
            f" -c unix_socket_directories={self.root} -c fsync=off -c synchronous_commit=off"
            " -c full_page_writes=off -c max_connections=200"
        )
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "log"),
                  "-o", options, "-w", "-t", "60", "start")  # fmt: skip
        return self

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh, empty database; returns its URL."""
        name = f"t{os.getpid()}_{next(_counter)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
