"""State writes that fail are kept and retried; quarantined files and pending writes on /metrics."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from prometheus_client.registry import CollectorRegistry

from tunelab.agent.quarantine import QuarantineList, StateHealthCollector
from tunelab.agent.statefile import quarantine, read_json
from tunelab.agent.statewriter import DurableWriter


def test_a_failed_write_is_kept_newest_first_and_lands_once_the_disk_takes_it(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "servers"
    blocker.write_text("a file where a folder should be: every write below fails")
    target = blocker / "s" / "state.json"
    writer = DurableWriter(retry_interval=3600)  # the test drives the retries itself
    try:
        assert not writer.write(target, {"v": 1})
        assert not writer.write(target, {"v": 2})
        assert writer.pending() == 1 and writer.flush() == 1

        blocker.unlink()  # the disk takes writes again

        assert writer.flush() == 0 and writer.pending() == 0
        assert read_json(target) == {"v": 2}  # the newest document, not the first
    finally:
        writer.close()


def test_quarantine_keeps_the_file_and_says_why(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("{trunc")
    kept = quarantine(path, "ValueError: truncated")
    path.write_text("x")
    again = quarantine(path, "second")  # the same second: a name of its own, nothing lost
    assert not path.exists() and kept.read_text() == "{trunc" and again != kept
    assert Path(f"{kept}.why").read_text() == "ValueError: truncated\n"


def test_the_collector_reports_quarantined_files_and_pending_writes(tmp_path: Path) -> None:
    listed = QuarantineList()
    listed.add(tmp_path / "a" / "state.json", "garbage", None)
    listed.add(tmp_path / "b" / "state.json", "empty", tmp_path / "b" / "kept")
    registry = CollectorRegistry()
    registry.register(StateHealthCollector(listed.count, lambda: 3))

    assert registry.get_sample_value("tunelab_agent_state_files_quarantined") == 2
    assert registry.get_sample_value("tunelab_agent_state_writes_pending") == 3
    assert [i.reason for i in listed.items()] == ["garbage", "empty"]


def test_read_json_refuses_a_link_and_a_fifo_without_blocking(tmp_path: Path) -> None:
    """A state or result file is read only as a regular file: a planted link is ELOOP, and a
    FIFO (which a blocking open would wait on forever) is EINVAL at once."""
    target = tmp_path / "root-only.json"
    target.write_text('{"secret": 1}')
    link = tmp_path / "state.json"
    link.symlink_to(target)
    fifo = tmp_path / "result.json"
    os.mkfifo(fifo)
    with pytest.raises(OSError) as linked:
        read_json(link)
    assert linked.value.errno == errno.ELOOP
    with pytest.raises(OSError) as piped:
        read_json(fifo)
    assert piped.value.errno == errno.EINVAL and "not a regular file" in str(piped.value)
    with pytest.raises(ValueError, match="larger than 8 bytes"):
        read_json(target, max_bytes=8)
    assert read_json(target, max_bytes=13) == {"secret": 1}
