"""Provenance kept with each attempt (real SQLite file), and the spec's roofline section."""

from __future__ import annotations

import sqlite3
from importlib import resources
from pathlib import Path

import pytest

from tunelab.controller.spec import SpecError, expand_text
from tunelab.controller.store import SqliteStore

SPEC = """
name: sim
server: {command: [sim], ready: {model: m}}
benchmark: {concurrency: [1], requests: 5}
"""


def test_a_database_from_before_provenance_gains_the_column(tmp_path: Path) -> None:
    schema = resources.files("tunelab.controller.store").joinpath("schema.sql").read_text()
    old = schema.replace(",\n    provenance_json TEXT\n", "\n")
    assert old != schema
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(old)
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
