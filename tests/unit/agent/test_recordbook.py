"""The one record book (servers and runs): checked transitions, events, versions, persistence and
quarantine; a misspelt field is refused by the type checker and at run time, never kept in memory
and left out of the file (issue 22: ``exitcode=3`` once was)."""

from __future__ import annotations

import json
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from mypy import api as mypy_api

from tunelab.agent.quarantine import QuarantineList
from tunelab.agent.recordbook import RecordBook
from tunelab.agent.servers.record import MAX_EVENTS, ServerEvent, ServerRecord
from tunelab.agent.servers.spec import ServerSpec
from tunelab.agent.servers.states import ServerState, TransitionError, check_transition
from tunelab.agent.statewriter import DurableWriter

Book = RecordBook[ServerRecord, ServerState, ServerEvent]


@pytest.fixture
def book(tmp_path: Path) -> Iterator[Book]:
    writer = DurableWriter()
    quarantined = QuarantineList()
    yield RecordBook(
        kind="server",
        id_field="server_id",
        path_of=lambda key: tmp_path / key / "state.json",
        check=check_transition,
        event=ServerEvent,
        max_events=MAX_EVENTS,
        changed=threading.Condition(threading.RLock()),
        writer=writer,
        quarantined=quarantined,
        clock=lambda: 1000.0,
    )
    writer.close()


def record(tmp_path: Path, key: str = "s1") -> ServerRecord:
    (tmp_path / key).mkdir(exist_ok=True)
    return ServerRecord(id=key, spec=ServerSpec(argv=("true",), port=8000))


def on_disk(tmp_path: Path, key: str = "s1") -> dict[str, object]:
    data: dict[str, object] = json.loads((tmp_path / key / "state.json").read_text())
    return data


def test_a_transition_is_checked_recorded_versioned_and_persisted(
    book: Book, tmp_path: Path
) -> None:
    book.add("s1", record(tmp_path))
    after = book.transition("s1", ServerState.STARTING, "spawned", {"pid": 42, "create_time": 9.0})

    assert (after.state, after.pid, after.version) == (ServerState.STARTING, 42, 1)
    assert [(e.at, e.state, e.message) for e in after.events] == [
        (1000.0, ServerState.STARTING, "spawned")
    ]
    assert on_disk(tmp_path)["pid"] == 42 and on_disk(tmp_path)["state"] == "STARTING"
    with pytest.raises(TransitionError):
        book.transition("s1", ServerState.PENDING, "back", {})
    assert book["s1"].state is ServerState.STARTING and book["s1"].version == 1


def test_a_misspelt_field_is_refused_at_run_time_before_anything_changed(
    book: Book, tmp_path: Path
) -> None:
    book.add("s1", record(tmp_path))
    with pytest.raises(TypeError, match="exitcode"):
        book.transition("s1", ServerState.FAILED, "exited", {"exitcode": 3})
    with pytest.raises(TypeError, match="exitcode"):
        book.update("s1", {"exitcode": 3}, persist=True)

    kept = book["s1"]
    assert kept.state is ServerState.PENDING and kept.version == 0 and kept.events == []
    assert not (tmp_path / "s1" / "state.json").exists()


def test_an_unreadable_file_is_quarantined_not_loaded(book: Book, tmp_path: Path) -> None:
    folder = tmp_path / "s2"
    folder.mkdir()
    (folder / "state.json").write_text('{"id": "other", "spec": {}}')

    assert book.load(folder / "state.json", ServerRecord.from_dict, lambda r: r.id) is None
    assert not (folder / "state.json").exists()  # renamed aside, kept for a person to read


SNIPPET = """
from tunelab.agent.servers.registry import ServerRegistry
from tunelab.agent.servers.states import ServerState


def misspelt(registry: ServerRegistry) -> None:
    registry.transition("x", ServerState.FAILED, "exited", exitcode=3)
"""


def test_a_misspelt_field_fails_type_checking(tmp_path: Path) -> None:
    snippet = tmp_path / "snippet.py"
    snippet.write_text(SNIPPET)
    cache = tempfile.mkdtemp(dir=tmp_path)
    out, _, status = mypy_api.run(
        ["--strict", "--follow-imports=silent", "--cache-dir", cache, str(snippet)]
    )
    assert status == 1
    assert 'Unexpected keyword argument "exitcode"' in out and 'did you mean "exit_code"' in out
