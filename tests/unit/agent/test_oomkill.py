"""Unit: reading the OOM killer's word from kernel log records."""

from __future__ import annotations

from pathlib import Path

from tunelab.agent.engines.oomkill import oom_killed, parse_record


def test_both_kernel_phrasings_name_the_pid() -> None:
    killed = (
        b"3,1234,5000000,-;Out of memory: Killed process 4242 (python3) total-vm:1000kB, "
        b"anon-rss:900kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:10kB oom_score_adj:0"
    )
    assert parse_record(killed) == (5000000, {4242})
    summary = (
        b"6,1233,4999000,-;oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,"
        b"mems_allowed=0,global_oom,task_memcg=/,task=python3,pid=4243,uid=0"
    )
    assert parse_record(summary) == (4999000, {4243})
    assert parse_record(b"6,1,10,-;eth0: link up") == (10, set())
    assert parse_record(b"garbage") == (-1, set())


def test_an_unreadable_kernel_log_says_nothing(tmp_path: Path) -> None:
    assert oom_killed([4242], 0.0, kmsg=tmp_path / "no-kmsg") == ()
    assert oom_killed([1, 0], 0.0) == ()  # never asks about pid <= 1
