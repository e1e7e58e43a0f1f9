"""Capture the files an audit read into a tree that ``audit --root`` reads back the same way.

A :class:`RecordingSystem` notes every host path a real audit touches; :func:`write_tree` copies
them below a directory, recreating sysfs' relative symlinks hop by hop (so PCI paths to the root
port survive) and turning what a copy cannot hold into data under ``CAPTURE_DIR``: each
``/dev/nvidia*`` node's type and numbers (``dev-nodes.json``), what ``open()`` answered
(``dev-open.json``) and what ``cuInit`` returned (``cuda-init.json``). :func:`materialize`
makes the nodes again with ``mknod`` (root only).
"""

from __future__ import annotations

import errno
import json
import os
import posixpath
import shutil
import stat
from pathlib import Path
from typing import Any

from tunelab.agent.system import CAPTURE_DIR, System

# Character devices whose *content* the audit reads (copied as a 4-byte file, not a node).
CONTENT_DEVICES = ("/dev/cpu_dma_latency",)
MAX_LINK_HOPS = 40


class RecordingSystem(System):
    """A live System that remembers every path and directory listing it was asked for."""

    def __init__(self, root: Path | str = "/") -> None:
        super().__init__(root)
        self.touched: set[str] = set()
        self.listed: set[str] = set()

    def path(self, host_path: str) -> Path:
        self.touched.add("/" + host_path.strip("/"))
        return super().path(host_path)

    def listdir(self, host_path: str) -> list[str]:
        self.listed.add("/" + host_path.strip("/"))
        return super().listdir(host_path)

    def names(self, host_path: str) -> list[str]:
        self.listed.add("/" + host_path.strip("/"))
        return super().names(host_path)


class TreeWriter:
    """Copies host paths from ``source`` (normally ``/``) into ``dest``."""

    def __init__(self, source: Path, dest: Path) -> None:
        self.source = source
        self.dest = dest
        self.nodes: dict[str, dict[str, Any]] = {}

    def _src(self, host_path: str) -> Path:
        return self.source / host_path.lstrip("/")

    def _dst(self, host_path: str) -> Path:
        return self.dest / host_path.lstrip("/")

    def resolve(self, host_path: str, depth: int = 0) -> str | None:
        """Recreate every symlink on the way to ``host_path``; the real host path it names."""
        parts = [p for p in host_path.split("/") if p]
        current = "/"
        for index, part in enumerate(parts):
            candidate = posixpath.join(current, part)
            src = self._src(candidate)
            if not src.is_symlink():
                current = candidate
                continue
            if depth > MAX_LINK_HOPS:
                return None
            target = str(src.readlink())
            link = self._dst(candidate)
            if not link.is_symlink():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(target)
            base = target if target.startswith("/") else posixpath.join(current, target)
            rest = "/".join(parts[index + 1 :])
            return self.resolve(posixpath.normpath(posixpath.join(base, rest)), depth + 1)
        return current

    def copy(self, host_path: str) -> None:
        real = self.resolve(host_path)
        if real is None:
            return
        src = self._src(real)
        try:
            info = src.lstat()
        except OSError:
            return
        dst = self._dst(real)
        if stat.S_ISDIR(info.st_mode):
            dst.mkdir(parents=True, exist_ok=True)
        elif stat.S_ISREG(info.st_mode) or real in CONTENT_DEVICES:
            try:
                data = src.read_bytes()
            except OSError:
                return  # unreadable here too: the fixture will not have it either
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(data)
        elif stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
            kind = "c" if stat.S_ISCHR(info.st_mode) else "b"
            self.nodes[real] = {
                "type": kind,
                "major": os.major(info.st_rdev),
                "minor": os.minor(info.st_rdev),
                "mode": oct(stat.S_IMODE(info.st_mode)),
            }
            dst.parent.mkdir(parents=True, exist_ok=True)

    def copy_listing(self, host_dir: str) -> None:
        """Directory entries the audit listed: sub-directories and links, nvidia /dev nodes."""
        real = self.resolve(host_dir)
        if real is None:
            return
        try:
            names = sorted(entry.name for entry in self._src(real).iterdir())
        except OSError:
            return
        self._dst(real).mkdir(parents=True, exist_ok=True)
        for name in names:
            child = posixpath.join(real, name)
            src = self._src(child)
            if real == "/dev" and not name.startswith("nvidia"):
                continue
            if src.is_symlink() or src.is_dir() or real.startswith("/dev"):
                self.copy(child)


def write_tree(
    system: RecordingSystem, dest: Path, records: dict[str, object] | None = None
) -> dict[str, Any]:
    """Copy what ``system`` touched into ``dest``; returns the capture's manifest.

    ``records`` are written as JSON under ``CAPTURE_DIR`` by name: answers that are not files,
    such as the cuInit probe's (``cudaprobe.RECORD``).
    """
    writer = TreeWriter(system.root, dest)
    for path in sorted(system.touched):
        writer.copy(path)
    for path in sorted(system.listed):
        writer.copy_listing(path)
    meta = dest / CAPTURE_DIR
    meta.mkdir(parents=True, exist_ok=True)
    opened: dict[str, str | int] = {}
    live = System(system.root)
    for node in sorted(writer.nodes):
        if node.startswith("/dev/nvidia"):
            code = live.open_device(node)
            opened[node] = errno.errorcode.get(code, code) if code else 0
    (meta / "dev-nodes.json").write_text(json.dumps(writer.nodes, indent=2, sort_keys=True) + "\n")
    (meta / "dev-open.json").write_text(json.dumps(opened, indent=2, sort_keys=True) + "\n")
    for name, record in (records or {}).items():
        (meta / name).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return {"files": len(system.touched), "listed": len(system.listed), "nodes": len(writer.nodes)}


def materialize(fixture: Path, dest: Path) -> Path:
    """Copy a captured tree to ``dest`` and make its device nodes (PermissionError: not root)."""
    shutil.copytree(fixture, dest, symlinks=True, dirs_exist_ok=True)
    make_nodes(dest)
    return dest


def make_nodes(root: Path) -> None:
    """``mknod`` every node recorded in ``CAPTURE_DIR/dev-nodes.json`` under ``root``."""
    record = root / CAPTURE_DIR / "dev-nodes.json"
    nodes = json.loads(record.read_text()) if record.exists() else {}
    for host_path, node in nodes.items():
        target = root / host_path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists() or target.is_symlink():
            target.unlink()
        kind = stat.S_IFCHR if node["type"] == "c" else stat.S_IFBLK
        os.mknod(target, kind | int(node["mode"], 8), os.makedev(node["major"], node["minor"]))
