"""The SSE parser on byte streams as servers send them: no sockets, explicit arrival times."""

from __future__ import annotations

import json

import pytest

from tunelab.bench.stream import LiveCounters, RequestRecord, StreamFailure, StreamParser


def event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chunk(text: str, tokens: int | None = None, finish: str | None = None) -> bytes:
    body: dict[str, object] = {
        "choices": [{"index": 0, "text": text, "finish_reason": finish}],
    }
    if tokens is not None:
        body["usage"] = {"prompt_tokens": 3, "completion_tokens": tokens}
    return event(body)


def chat(delta: dict[str, object], tokens: int | None = None) -> bytes:
    body: dict[str, object] = {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    if tokens is not None:
        body["usage"] = {"prompt_tokens": 3, "completion_tokens": tokens}
    return event(body)


def parse(parts: list[tuple[float, bytes]], chat_api: bool = False) -> RequestRecord:
    rec = RequestRecord(0, False, 3, 10)
    rec.start = 0.0
    parser = StreamParser(rec, chat_api, LiveCounters())
    for now, data in parts:
        parser.feed(data, now)
    parser.finish()
    return rec


def test_continuous_usage_counts_tokens_per_chunk_even_when_split_across_reads() -> None:
    c1, c2, c3 = chunk(" a b", 2), chunk(" c", 3), chunk(" d e f", 6, "length")
    rec = parse(
        [(0.1, c1[:20]), (0.2, c1[20:] + c2[:10]), (0.3, c2[10:] + c3 + b"data: [DONE]\n\n")]
    )
    assert rec.chunk_times == [0.2, 0.3, 0.3]  # an event is timed when its last byte arrives
    assert rec.chunk_tokens == [2, 1, 3] and rec.output_tokens == 6
    assert rec.token_source == "usage_continuous" and rec.finish_reason == "length"


def test_role_only_chat_chunk_is_not_a_token() -> None:
    rec = parse(
        [
            (0.01, chat({"role": "assistant", "content": ""}, 0)),
            (0.30, chat({"content": " hi"}, 1)),
            (0.40, chat({"reasoning_content": " hmm"}, 2)),
            (0.41, event({"choices": [], "usage": {"completion_tokens": 2, "prompt_tokens": 9}})),
            (0.41, b"data: [DONE]\n\n"),
        ],
        chat_api=True,
    )
    assert rec.chunk_times == [0.30, 0.40] and rec.ttft == 0.30
    assert rec.prompt_tokens == 9 and rec.output_tokens == 2


def test_final_usage_only_and_no_usage() -> None:
    final = event({"choices": [], "usage": {"completion_tokens": 4, "prompt_tokens": 3}})
    rec = parse([(0.1, chunk(" ab")), (0.2, chunk(" cd", None, "stop")), (0.2, final)])
    assert rec.token_source == "usage_final" and rec.output_tokens == 4
    assert rec.chunk_tokens == [None, None]  # 4 tokens in 2 chunks: split unknown
    rec = parse([(0.1, chunk(" a")), (0.2, chunk(" b", None, "stop"))])
    assert rec.token_source == "chunks" and rec.output_tokens == 2 and rec.chunk_tokens == [1, 1]


def test_comments_and_crlf_are_ignored() -> None:
    data = b": ping\r\n\r\n" + chunk(" a", 1).replace(b"\n", b"\r\n") + b"data: [DONE]\r\n\r\n"
    rec = parse([(0.5, data)])
    assert rec.output_tokens == 1 and rec.chunk_times == [0.5]


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (b'data: {"choices": [\n\n', "malformed_stream"),
        (b"garbage line\n\n", "malformed_stream"),
        (b"data: [1, 2]\n\n", "malformed_stream"),
        (event({"error": {"message": "overloaded"}}), "stream_error"),
    ],
)
def test_bad_streams_raise_with_their_kind(data: bytes, kind: str) -> None:
    rec = RequestRecord(0, False, 3, 10)
    parser = StreamParser(rec, False, LiveCounters())
    with pytest.raises(StreamFailure) as err:
        parser.feed(chunk(" a", 1) + data, 0.1)
    assert err.value.kind == kind


def test_a_stream_that_just_stops_is_incomplete_and_one_without_tokens_is_empty() -> None:
    rec = RequestRecord(0, False, 3, 10)
    parser = StreamParser(rec, False, LiveCounters())
    parser.feed(chunk(" a", 1), 0.1)
    with pytest.raises(StreamFailure) as err:
        parser.finish()
    assert err.value.kind == "incomplete"
    parser = StreamParser(RequestRecord(0, False, 3, 10), False, LiveCounters())
    parser.feed(b"data: [DONE]\n\n", 0.1)
    with pytest.raises(StreamFailure) as err:
        parser.finish()
    assert err.value.kind == "no_output"


def test_live_counter_counts_tokens_as_they_stream() -> None:
    live = LiveCounters()
    parser = StreamParser(RequestRecord(0, False, 3, 10), False, live)
    parser.feed(chunk(" a b c d", 4) + chunk(" e f g h", 8), 0.1)
    assert live.output_tokens == 8


@pytest.mark.parametrize(
    ("usage", "field"),
    [
        ({"completion_tokens": 10**200}, "usage.completion_tokens: a 201-digit number"),
        ({"completion_tokens": 2, "prompt_tokens": -5}, "usage.prompt_tokens: -5"),
    ],
)
def test_a_token_count_out_of_range_fails_the_request_with_the_field_named(
    usage: dict[str, int], field: str
) -> None:
    """Issue 45.2: a server reporting 10**200 tokens once took every watch tick down
    (OverflowError in the statistics); the count is refused where it enters."""
    parser = StreamParser(RequestRecord(0, False, 3, 10), False, LiveCounters())
    final = json.dumps({"choices": [], "usage": usage}).encode()
    parser.feed(chunk(" a", 1) + b"data: " + final + b"\n\ndata: [DONE]\n\n", 0.1)
    with pytest.raises(StreamFailure) as err:
        parser.finish()
    assert err.value.kind == "bad_usage" and field in str(err.value)
    continuous = StreamParser(RequestRecord(0, False, 3, 10), False, LiveCounters())
    with pytest.raises(StreamFailure) as err:
        continuous.feed(chunk(" a", 10**200), 0.1)
    assert err.value.kind == "bad_usage"
