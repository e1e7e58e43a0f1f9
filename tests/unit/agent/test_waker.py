"""The supervisor's Waker: an event that a READY server's watch thread waits on together with the
leader's pidfd, so it sleeps until something happens instead of polling (issue 22 item 9)."""

from __future__ import annotations

import os

from tunelab.agent.servers.supervisor import Waker


def test_set_wakes_a_wait_and_clear_rearms_it() -> None:
    waker = Waker()
    try:
        assert not waker.wait(0)
        waker.set()
        waker.set()
        assert waker.wait(0) and waker.wait(0)  # stays set until cleared
        waker.clear()
        assert not waker.wait(0)
    finally:
        waker.close()


def test_a_readable_fd_ends_the_wait_without_setting_it() -> None:
    waker = Waker()
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"x")  # stands in for a pidfd that turned readable (leader exited)
        assert waker.wait(60, read_end) is False  # returned at once: the fd, not the timeout
    finally:
        waker.close()
        os.close(read_end)
        os.close(write_end)


def test_set_after_close_is_a_no_op_never_a_write_to_a_reused_fd() -> None:
    waker = Waker()
    waker.close()
    waker.set()
    waker.close()
