"""Provenance kept with each attempt (real SQLite file), and the spec's roofline section."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from tunelab.controller.spec import SpecError, expand_text
from tunelab.controller.store import SqliteStore

OLD_RELEASE_DB = Path(__file__).resolve().parents[2] / "fixtures/store/controller-f58540c.db"
SPEC = """
name: sim
server: {command: [sim, --port, "{port}"], ready: {model: m}}
benchmark: {concurrency: [1], requests: 5}
"""


def test_a_database_from_before_provenance_gains_the_column(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    shutil.copy(OLD_RELEASE_DB, path)
    with sqlite3.connect(path) as conn:
        before = {r[1] for r in conn.execute("PRAGMA table_info(attempts)")}
    assert "provenance_json" not in before
    store = SqliteStore(path)
    columns = {r["name"] for r in store._query("PRAGMA table_info(attempts)")}
    assert "provenance_json" in columns
    store.close()
    SqliteStore(path).close()  # and opening it again changes nothing


def test_roofline_section_of_a_spec() -> None:
    [e] = expand_text(SPEC + "roofline: {weight_bytes: 13476839424, tp: 2}\n")
    assert e.spec["roofline"] == {"weight_bytes": 13476839424.0, "tp": 2.0}
    [plain] = expand_text(SPEC)
    assert "roofline" not in plain.spec  # specs without it are unchanged
    with pytest.raises(SpecError) as caught:
        expand_text(SPEC + "roofline: {weights: 1, tp: two}\n")
    text = str(caught.value)
    assert "roofline.weights: unknown key" in text and "roofline.tp: must be a number" in text
