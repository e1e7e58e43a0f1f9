"""The one record book (servers and runs): checked transitions, events, versions, persistence and
quarantine; a misspelt field is refused by the type checker and at run time, never kept in memory
and left out of the file (issue 22: ``exitcode=3`` once was); the file is written outside the
records' lock, and a later state is never overwritten by an earlier one (issue 34)."""

from __future__ import annotations

import json
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mypy import api as mypy_api

from tunelab.agent.quarantine import QuarantineList
from tunelab.agent.recordbook import RecordBook
from tunelab.agent.servers.record import MAX_EVENTS, ServerEvent, ServerRecord
from tunelab.agent.servers.spec import ServerSpec
from tunelab.agent.servers.states import ServerState, TransitionError, check_transition
from tunelab.agent.statewriter import DurableWriter

Book = RecordBook[ServerRecord, ServerState, ServerEvent]


def make_book(
    tmp_path: Path, writer: DurableWriter, path_of: Callable[[str], Path] | None = None
) -> Book:
    return RecordBook(
        kind="server",
        id_field="server_id",
        path_of=path_of or (lambda key: tmp_path / key / "state.json"),
        check=check_transition,
        event=ServerEvent,
        max_events=MAX_EVENTS,
        changed=threading.Condition(threading.RLock()),
        writer=writer,
        quarantined=QuarantineList(),
        clock=lambda: 1000.0,
    )


@pytest.fixture
def book(tmp_path: Path) -> Iterator[Book]:
    writer = DurableWriter()
    yield make_book(tmp_path, writer)
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


class SlowDisk(DurableWriter):
    """A disk that takes as long as the test says: each write waits for ``go``."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.go = threading.Event()

    def write(self, path: Path, data: Any) -> bool:
        self.entered.set()
        self.go.wait(60)
        return super().write(path, data)


def test_a_slow_disk_does_not_hold_the_records_lock(tmp_path: Path) -> None:
    """A reader (a Get, a watcher) takes the lock while a change's file is still being written:
    the old book wrote under the lock, so a stalled disk stalled every RPC of every record."""
    disk = SlowDisk()
    book = make_book(tmp_path, disk)
    book.add("s1", record(tmp_path))
    change = threading.Thread(
        target=book.transition,
        args=("s1", ServerState.STARTING, "spawned", {"pid": 42, "create_time": 9.0}),
    )
    change.start()
    try:
        assert disk.entered.wait(60)
        acquired = book.changed.acquire(timeout=20)
        assert acquired, "the file write held the records' lock"
        try:
            assert (book["s1"].state, book["s1"].pid) == (ServerState.STARTING, 42)
        finally:
            book.changed.release()
    finally:
        disk.go.set()
        change.join(60)
    assert on_disk(tmp_path)["pid"] == 42 and on_disk(tmp_path)["state"] == "STARTING"


def test_a_later_state_is_never_overwritten_by_an_earlier_one(tmp_path: Path) -> None:
    """The first change's thread is held after it let the lock go and before it writes (where it
    asks for the file's path); a second change is made and written meanwhile. The first one's
    snapshot, older than the file, is then dropped."""
    asked: list[str] = []
    held, resume = threading.Event(), threading.Event()

    def path_of(key: str) -> Path:
        asked.append(key)
        if len(asked) == 1:
            held.set()
            resume.wait(60)
        return tmp_path / key / "state.json"

    writer = DurableWriter()
    book = make_book(tmp_path, writer, path_of)
    book.add("s1", record(tmp_path))
    first = threading.Thread(target=book.update, args=("s1", {"pid": 1}), kwargs={"persist": True})
    first.start()
    try:
        assert held.wait(60)
        second = threading.Thread(
            target=book.update, args=("s1", {"pid": 2}), kwargs={"persist": True}
        )
        second.start()
        second.join(20)
        assert not second.is_alive(), "the first change's write held the records' lock"
        assert on_disk(tmp_path)["pid"] == 2
    finally:
        resume.set()
        first.join(60)
    assert on_disk(tmp_path)["pid"] == 2 and book["s1"].pid == 2
    writer.close()


def test_changes_made_under_locked_are_written_once_it_lets_go(book: Book, tmp_path: Path) -> None:
    """An owner changing a record together with its own state holds ``locked()``: the files wait
    for the end of its outermost hold, and the last state of each record is what lands."""
    book.add("s1", record(tmp_path))
    book.add("s2", record(tmp_path, "s2"))
    with book.locked():
        book.transition("s1", ServerState.STARTING, "spawned", {"pid": 42, "create_time": 9.0})
        with book.locked():
            book.update("s1", {"pid": 43}, persist=True)
            book.update("s2", {"pid": 7}, persist=True)
        assert not (tmp_path / "s1" / "state.json").exists()
    assert on_disk(tmp_path)["pid"] == 43 and on_disk(tmp_path)["state"] == "STARTING"
    assert on_disk(tmp_path, "s2")["pid"] == 7


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
