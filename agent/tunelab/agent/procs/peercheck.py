"""Who is at the other end of a monitor socket (issue 23.2): the agent talks to a monitor only
after checking the socket file's owner and the connected peer's uid and pid (``SO_PEERCRED``,
what the kernel says, not what the peer says) against what it launched.

The monitor runs as the agent's uid, so the socket file and the peer must both be that uid. The
peer's *pid* proves nothing here: the kernel records the credentials of the process that called
``listen()``, and the agent binds and listens on the socket itself before it spawns the monitor
(so a restarted agent can always connect), so the pid is an agent's, possibly a dead one. Root
can always pass these checks (see docs/security.md)."""

from __future__ import annotations

import os
import socket
import stat
import struct

_UCRED = struct.Struct("3i")  # pid, uid, gid


class UntrustedMonitor(OSError):
    """The socket or its peer is not the monitor this agent launched; nothing it says is used."""


def check_socket_file(path: str, uid: int | None = None) -> None:
    """The socket file itself: a socket (not a symlink to one), owned by ``uid``."""
    owner = os.geteuid() if uid is None else uid
    info = os.lstat(path)
    if not stat.S_ISSOCK(info.st_mode):
        raise UntrustedMonitor(f"{path} is not a socket")
    if info.st_uid != owner:
        raise UntrustedMonitor(f"{path} is owned by uid {info.st_uid}, not {owner}")


def peer(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a connected unix socket."""
    pid, uid, _ = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    return pid, uid


def check_peer(sock: socket.socket, uid: int | None = None) -> None:
    """The socket was set up (``listen()``) by a process of ``uid``: the agent's own."""
    owner = os.geteuid() if uid is None else uid
    pid, peer_uid = peer(sock)
    if peer_uid != owner:
        raise UntrustedMonitor(
            f"monitor socket was set up by pid {pid} running as uid {peer_uid}, not {owner}"
        )
