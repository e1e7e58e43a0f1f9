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
    lines = [f"7f00-7f01 rw-s 00000000 00:1a {_inode(m)} {m}" for m in maps]
    (d / "maps").write_text("\n".join(lines) + "\n")
    for i, target in enumerate(fds):
        os.symlink(target, d / "fd" / str(i))


def _inode(path: str) -> int:
    """The inode a real maps line shows for the file (123 for one that is not there)."""
    try:
        return os.lstat(path).st_ino
    except OSError:
        return 123


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


NOBODY = 65534


def test_a_file_not_owned_by_the_servers_uid_is_never_removed(tmp_path: Path) -> None:
    # issue 23: a server running as nobody got the root agent to delete a 0644 root file it opened
    shm, proc = tmp_path / "shm", tmp_path / "proc"
    shm.mkdir()
    shm.chmod(0o1777)
    tracker = LeftoverTracker(time.time() - 1, shm_dir=shm, proc=proc)
    roots = shm / "psm_roots"
    roots.write_bytes(b"x")
    fake_proc(proc, 500, [], [str(roots)])
    os.chown(proc / "500", NOBODY, NOBODY)  # the process runs as nobody
    tracker.scan([500])
    assert tracker.remove() == [] and roots.exists()


def test_a_file_named_like_a_deleted_mapping_does_not_name_another(tmp_path: Path) -> None:
    # issue 23: its own file named "X (deleted)" made the agent delete X, a file it never opened
    shm, proc = tmp_path / "shm", tmp_path / "proc"
    shm.mkdir()
    tracker = LeftoverTracker(time.time() - 1, shm_dir=shm, proc=proc)
    victim = shm / "psm_victim"
    victim.write_bytes(b"never opened by the server")
    own = shm / "psm_victim (deleted)"
    own.write_bytes(b"the server's own")
    fake_proc(proc, 501, [str(own)], [])
    tracker.scan([501])
    assert tracker.remove() == [str(own)]
    assert victim.exists()


def test_a_forged_proc_net_unix_line_names_no_socket(tmp_path: Path) -> None:
    # issue 23: a newline in the server's own socket path forged a /proc/net/unix line
    proc = tmp_path / "proc"
    (tmp_path / "shm").mkdir()
    tracker = LeftoverTracker(time.time() - 1, shm_dir=tmp_path / "shm", proc=proc)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    victim_path = private / "victim.sock"
    victim = socket.socket(socket.AF_UNIX)
    victim.bind(str(victim_path))
    own_path = tmp_path / "own.sock"
    own = socket.socket(socket.AF_UNIX)
    own.bind(str(own_path))
    inode = 4711  # the sockfs inode of the server's socket
    forged = f"{own_path}\n0000: 00000002 00000000 00010000 0001 01 {inode} {victim_path}"
    fake_proc(proc, 502, [], [f"socket:[{inode}]"])
    net_unix(proc, [(inode, forged)])
    tracker.scan([502])
    assert tracker.remove() == []
    assert victim_path.exists() and own_path.exists()
    victim.close()
    own.close()


def test_a_folder_swapped_for_a_symlink_is_never_followed(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (tmp_path / "shm").mkdir()
    tracker = LeftoverTracker(time.time() - 1, shm_dir=tmp_path / "shm", proc=proc)
    folder = tmp_path / "ipc"
    folder.mkdir()
    sock_path = folder / "s.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock_path))
    fake_proc(proc, 503, [], ["socket:[4712]"])
    net_unix(proc, [(4712, str(sock_path))])
    tracker.scan([503])
    assert list(tracker.tracked) == [str(sock_path)]
    moved = tmp_path / "elsewhere"
    folder.rename(moved)
    folder.symlink_to(moved)  # the same socket, now reached through a symlink
    assert tracker.remove() == []
    assert (moved / "s.sock").exists()
    server.close()


def test_a_file_that_existed_at_adoption_is_never_removed(tmp_path: Path) -> None:
    shm, proc = tmp_path / "shm", tmp_path / "proc"
    shm.mkdir()
    before = shm / "psm_from_before"
    before.write_bytes(b"x")
    # an adoption (snapshot=False) of a server that "started" before the file was made
    tracker = LeftoverTracker(time.time() - 3600, shm_dir=shm, proc=proc, snapshot=False)
    fake_proc(proc, 504, [str(before)], [])
    tracker.scan([504])
    assert tracker.remove() == [] and before.exists()
