"""Unit: byte-offset log reading used by StreamLogs."""

from __future__ import annotations

import os
from pathlib import Path

from tunelab.agent.logfiles import last_lines, read_log_chunks, tail_offset


def test_tail_offset_counts_lines_from_the_end(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(b"one\ntwo\nthree\n")
    assert tail_offset(log, 1) == len(b"one\ntwo\n")
    assert tail_offset(log, 2) == len(b"one\n")
    assert tail_offset(log, 10) == 0
    log.write_bytes(b"one\ntwo")  # no trailing newline: "two" is the last line
    assert tail_offset(log, 1) == 4
    assert tail_offset(tmp_path / "missing.log", 3) == 0


def test_tail_offset_across_block_boundaries(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    lines = [f"line {i:05d}\n".encode() for i in range(5000)]
    log.write_bytes(b"".join(lines))
    offset = tail_offset(log, 1234)
    assert log.read_bytes()[offset:] == b"".join(lines[-1234:])


def test_last_lines_reduces_tqdm_redraws(tmp_path: Path) -> None:
    log = tmp_path / "b.log"
    log.write_bytes(b"start\nLoading 1/3\rLoading 2/3\rLoading 3/3\nboom\n")
    assert last_lines(log, 2) == ["Loading 3/3", "boom"]


def test_chunks_resume_at_offset_and_end_with_eof_when_finished(tmp_path: Path) -> None:
    log = tmp_path / "c.log"
    log.write_bytes(b"x" * 70000 + b"tail")
    chunks = list(
        read_log_chunks(
            log, 5, follow=True, finished=lambda: True, cancelled=lambda: False, wait=lambda s: None
        )
    )
    offsets = [c[0] for c in chunks]
    assert offsets[0] == 5 and offsets[1] == 5 + 65536
    assert b"".join(c[1] for c in chunks) == log.read_bytes()[5:]
    assert chunks[-1] == (70004, b"", True)


def test_follow_waits_until_the_owner_finishes(tmp_path: Path) -> None:
    log = tmp_path / "d.log"
    log.write_bytes(b"a")
    state = {"waits": 0}

    def wait(seconds: float) -> None:
        state["waits"] += 1
        with log.open("ab") as f:
            f.write(b"b")

    chunks = list(
        read_log_chunks(
            log,
            0,
            follow=True,
            finished=lambda: state["waits"] >= 2,
            cancelled=lambda: False,
            wait=wait,
        )
    )
    assert b"".join(c[1] for c in chunks) == b"abb"
    assert chunks[-1][2] is True


def test_a_symlink_or_fifo_in_place_of_a_log_reads_as_no_log(tmp_path: Path) -> None:
    """A server's user can write its log folder: a link planted as the log must never make the
    root agent read (and stream) somebody else's file, and a FIFO must not block it."""
    secret = tmp_path / "root-only"
    secret.write_bytes(b"root secret\n")
    link = tmp_path / "server.log"
    link.symlink_to(secret)
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    for planted in (link, fifo):
        assert last_lines(planted, 5) == []
        assert tail_offset(planted, 3) == 0
        chunks = list(
            read_log_chunks(
                planted, 0, follow=False, finished=lambda: True, cancelled=lambda: False,
                wait=lambda s: None,
            )
        )  # fmt: skip
        assert chunks == [(0, b"", True)]
