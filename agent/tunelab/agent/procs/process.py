"""A process as the agent names it: pid + create time.

Everything the agent runs lives under a monitor (:mod:`monitor`), which walks and stops its
tree; nothing here starts or stops a process tree.

A pid alone is never trusted: after a restart or a long stop, the kernel may have handed it to a
stranger. Every signal goes through :func:`identity.signal_exact` (pidfd, then the create time
checked, then the signal); never to a bare group number, never to pid <= 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import psutil

from tunelab.agent.procs import identity


@dataclass(frozen=True, order=True)
class ProcessId:
    """A process as the kernel cannot reuse: pid plus its create time (psutil's, in seconds)."""

    pid: int
    create_time: float

    @classmethod
    def of(cls, pid: int) -> ProcessId | None:
        stat = identity.read_stat(pid)
        return None if stat is None or stat.state == "Z" else cls(pid, stat.create_time)

    def process(self) -> psutil.Process | None:
        """The live process with this identity, or None (gone, zombie, or pid reused).

        The create time is compared as :func:`identity.matches` does, with one boot time per
        process: psutil reads /proc/stat's ``btime`` afresh each call, a whole second that moves
        by one when the wall clock is slewed, so two psutil readings of one process can differ
        by a second."""
        if not identity.matches(self.pid, self.create_time):
            return None
        try:
            proc = psutil.Process(self.pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            return proc
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return None
        except psutil.AccessDenied:
            return None

    def alive(self) -> bool:
        return self.process() is not None

    def signal(self, sig: int) -> bool:
        """Send ``sig`` if this exact process still lives; True if it was sent."""
        return identity.signal_exact(self.pid, self.create_time, sig)
