"""The watch webhook against real local HTTP servers: one that answers, one that hangs, one that
fails twice then succeeds. The scheduling turn's call never waits; the URL is never logged."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from tests.support.webhook_receiver import Receiver
from tunelab.controller.config import ConfigError, ControllerConfig
from tunelab.controller.store.watch_models import OccurrenceRow, WatchRow
from tunelab.controller.watches.webhook import MAX_TEXT, VerdictWebhook, verdict_text

SECRET_PATH = "/services/T000/B000/s3cr3tk3y"
VERDICT: dict[str, Any] = {
    "verdict": "regression",
    "baseline": 1,
    "reason": "",
    "metrics": [
        {
            "metric": "output_throughput",
            "change_pct": -18.2,
            "interval": [-21.0, -15.1],
            "launches": [3, 3],
            "verdict": "regression",
            "missing": "",
        },
    ],
    "changes": [{"field": "engine", "before": "sglang 0.5.2", "after": "sglang 0.5.3"}],
}


@pytest.fixture
def receivers() -> Iterator[list[Receiver]]:
    made: list[Receiver] = []
    yield made
    for receiver in made:
        receiver.close()


def wait_until(check: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert check()


def call(webhook: VerdictWebhook, number: int = 5) -> None:
    """The scheduling turn's call."""
    watch = WatchRow("nightly", {}, "", "active", 0.0, 0.0)
    webhook(watch, OccurrenceRow("nightly", number, "g", 0.0, 0.0), VERDICT)


def test_a_verdict_is_posted_as_slack_json(receivers: list[Receiver]) -> None:
    receiver = Receiver([200], SECRET_PATH)
    receivers.append(receiver)
    webhook = VerdictWebhook(receiver.url, timeout=5.0)
    webhook.start()
    try:
        call(webhook)
        receiver.wait_requests(1)
        wait_until(lambda: webhook.delivered == 1)
    finally:
        webhook.close()
    assert receiver.paths == [SECRET_PATH]
    assert list(receiver.bodies[0]) == ["text"]
    text = receiver.bodies[0]["text"]
    assert text.splitlines()[0] == "tunelab watch nightly #5: regression against #1"
    assert "output_throughput \u221218 % [\u221221, \u221215] (regression, 3 vs 3 launches)" in text
    assert text.endswith("changed since the baseline: sglang 0.5.2 \u2192 0.5.3")


def test_a_failing_receiver_gets_it_on_the_third_try_with_back_off(
    receivers: list[Receiver],
) -> None:
    receiver = Receiver([500, 503, 200], SECRET_PATH)
    receivers.append(receiver)
    webhook = VerdictWebhook(receiver.url, timeout=5.0, attempts=4, backoff=0.2)
    webhook.start()
    with structlog.testing.capture_logs() as logs:
        try:
            call(webhook)
            wait_until(lambda: webhook.delivered == 1)
        finally:
            webhook.close()
    assert len(receiver.bodies) == 3 and receiver.bodies[0] == receiver.bodies[2]
    assert webhook.dropped == 0 and logs == []


def test_a_hanging_receiver_never_blocks_the_turn_and_is_given_up(
    receivers: list[Receiver],
) -> None:
    receiver = Receiver(["hang", "hang", "hang", "hang"], SECRET_PATH)
    receivers.append(receiver)
    webhook = VerdictWebhook(receiver.url, timeout=2.0, attempts=2, backoff=0.1)
    webhook.start()
    with structlog.testing.capture_logs() as logs:
        try:
            call(webhook, 5)
            receiver.wait_requests(1)  # the poster now waits on a receiver that never answers
            call(webhook, 6)  # ...and the turn's call returns all the same
            assert len(receiver.bodies) == 1 and not receiver.release.is_set()
            wait_until(lambda: webhook.dropped == 2)
        finally:
            webhook.close()
    assert len(receiver.bodies) == 4  # two messages, two tries each
    failed = [e for e in logs if e["event"] == "watch_webhook_failed"]
    assert [(e["watch"], e["occurrence"], e["error"]) for e in failed] == [
        ("nightly", 5, "TimeoutError"),
        ("nightly", 6, "TimeoutError"),
    ]
    assert SECRET_PATH not in json.dumps(logs, default=str) + repr(webhook)


def test_a_refusing_receiver_is_not_retried(receivers: list[Receiver]) -> None:
    receiver = Receiver([404], SECRET_PATH)
    receivers.append(receiver)
    webhook = VerdictWebhook(receiver.url, timeout=5.0, attempts=4, backoff=0.1)
    webhook.start()
    try:
        call(webhook)
        wait_until(lambda: webhook.dropped == 1)
    finally:
        webhook.close()
    assert len(receiver.bodies) == 1


def test_a_full_queue_drops_and_a_long_text_is_cut() -> None:
    webhook = VerdictWebhook("http://127.0.0.1:9/x", max_queued=1)  # never started
    call(webhook, 1)
    call(webhook, 2)
    assert webhook.dropped == 1
    long = {**VERDICT, "metrics": VERDICT["metrics"] * 100}
    text = verdict_text("nightly", 3, long)
    assert len(text) == MAX_TEXT and text.endswith("\u2026")


def test_the_url_is_checked_and_hidden_in_the_config_log() -> None:
    url = f"https://hooks.example.com{SECRET_PATH}"
    config = ControllerConfig(db=":memory:", watch_webhook_url=url).validate()
    assert config.redacted()["watch_webhook_url"] == "(hidden)"
    assert SECRET_PATH not in json.dumps(config.redacted())
    with pytest.raises(ConfigError, match="watch_webhook_url: must be an http") as caught:
        ControllerConfig(db=":memory:", watch_webhook_url="ftp://x/" + SECRET_PATH).validate()
    assert SECRET_PATH not in str(caught.value)
