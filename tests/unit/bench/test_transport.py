"""Read marks: body bytes are timed by the read that delivered them, not by when they are parsed."""

from __future__ import annotations

import collections

from tunelab.bench.transport import Marks, timed_pieces


def test_pieces_split_at_read_boundaries() -> None:
    marks: Marks = collections.deque([(10, 1.0), (25, 2.0)])
    data = bytes(range(25))
    assert list(timed_pieces(data, 0, marks, now=9.0)) == [(data[:10], 1.0), (data[10:], 2.0)]
    assert not marks


def test_a_read_returned_in_two_parts_keeps_its_time() -> None:
    marks: Marks = collections.deque([(10, 1.0), (25, 2.0)])
    data = bytes(range(25))
    first = list(timed_pieces(data[:20], 0, marks, now=9.0))
    assert first == [(data[:10], 1.0), (data[10:20], 2.0)]
    assert list(timed_pieces(data[20:], 20, marks, now=9.5)) == [(data[20:], 2.0)]


def test_without_marks_everything_is_now() -> None:
    assert list(timed_pieces(b"abc", 0, None, now=3.0)) == [(b"abc", 3.0)]
    assert list(timed_pieces(b"abc", 0, collections.deque(), now=3.0)) == [(b"abc", 3.0)]
