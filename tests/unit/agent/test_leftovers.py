"""Unit: which files a stop removes. A fake /proc and shm dir: only files the server's own
processes held, still the same inode and type, created after its start, never via a symlink."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from tunelab.agent.engines.leftovers import LeftoverTracker


def fake_proc(root: Path, pid: int, maps: list[str], fds: list[str]) -> None:
    d = root / str(pid)
    (d / "fd").mkdir(parents=True)
    lines = [f"7f00-7f01 rw-s 00000000 00:1a 123 {m}" for m in maps]
    (d / "maps").write_text("\n".join(lines) + "\n")
    for i, target in enumerate(fds):
        os.symlink(target, d / "fd" / str(i))


def net_unix(root: Path, rows: list[tuple[int, str]]) -> None:
    (root / "net").mkdir(parents=True, exist_ok=True)
    header = "Num       RefCount Protocol Flags    Type St Inode Path\n"
    body = "".join(f"0000: 00000002 00000000 00010000 0001 01 {ino} {path}\n" for ino, path in rows)
    (root / "net" / "unix").write_text(header + body)


def test_removes_only_what_the_tree_held(tmp_path: Path) -> None:
    shm, proc = tmp_path / "shm", tmp_path / "proc"
    shm.mkdir()
    before = shm / "psm_before"  # existed before the spawn: never removed, even if held
    before.write_bytes(b"x")
    tracker = LeftoverTracker(time.time() - 1, shm_dir=shm, proc=proc)
    mapped, opened, stranger = shm / "psm_mapped", shm / "sem.opened", shm / "psm_stranger"
    for f in (mapped, opened, stranger):
        f.write_bytes(b"x")
    sock_path = tmp_path / "ipc-socket"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock_path))
    inode = os.stat(sock_path).st_ino
    fake_proc(proc, 4242, [str(mapped), str(before)], [str(opened), f"socket:[{inode}]"])
    net_unix(proc, [(inode, str(sock_path)), (999, str(tmp_path / "someone-elses"))])
    tracker.scan([4242, 1, 0])  # pid <= 1 is never read
    removed = tracker.remove()
    assert sorted(removed) == sorted([str(mapped), str(opened), str(sock_path)])
    assert before.exists() and stranger.exists()
    assert not mapped.exists() and not sock_path.exists()
    server.close()


def test_a_replaced_file_or_a_symlink_is_left_alone(tmp_path: Path) -> None:
    shm, proc = tmp_path / "shm", tmp_path / "proc"
    shm.mkdir()
    tracker = LeftoverTracker(time.time() - 1, shm_dir=shm, proc=proc)
    replaced = shm / "psm_replaced"
    replaced.write_bytes(b"old")
    target = tmp_path / "precious"
    target.write_bytes(b"keep me")
    link = shm / "psm_link"
    link.symlink_to(target)
    fake_proc(proc, 77, [str(replaced), str(link)], [])
    tracker.scan([77])
    fresh = shm / "fresh"
    fresh.write_bytes(b"new file, same name")  # made while the old one exists: a new inode
    fresh.replace(replaced)
    assert tracker.remove() == []
    assert replaced.exists() and target.read_bytes() == b"keep me" and link.is_symlink()


def test_an_old_file_is_never_removed(tmp_path: Path) -> None:
    shm, proc = tmp_path / "shm", tmp_path / "proc"
    shm.mkdir()
    old = shm / "psm_old"
    old.write_bytes(b"x")
    # an adopted server (no pre-spawn snapshot) that started long after this file was made
    tracker = LeftoverTracker(time.time() + 3600, shm_dir=shm, proc=proc, snapshot=False)
    fake_proc(proc, 88, [str(old)], [])
    tracker.scan([88])
    assert tracker.remove() == [] and old.exists()


def test_files_outside_shm_and_nested_paths_are_not_tracked(tmp_path: Path) -> None:
    shm, proc = tmp_path / "shm", tmp_path / "proc"
    (shm / "sub").mkdir(parents=True)
    nested = shm / "sub" / "file"
    nested.write_bytes(b"x")
    outside = tmp_path / "outside"
    outside.write_bytes(b"x")
    tracker = LeftoverTracker(time.time() - 1, shm_dir=shm, proc=proc)
    fake_proc(proc, 99, [str(nested), str(outside)], [str(outside)])
    tracker.scan([99])
    assert tracker.remove() == [] and nested.exists() and outside.exists()
