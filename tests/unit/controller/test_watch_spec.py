"""A watch spec: validated with the spec machinery (the field named on error), its schedule
(durations down to 2 s, 5-field cron lines in UTC), and a missed slot run once."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tunelab.controller.spec.errors import SpecError
from tunelab.controller.watches.spec import WatchSpec, watch_from_text

BASE = """
name: nightly
server:
  command: [sim]
  flags: {--port: "{port}"}
  port: auto
  ready: {model: m}
benchmark: {requests: 10, input_len: 8, output_len: 8, concurrency: [8]}
"""


def spec_text(watch: str) -> str:
    return BASE + "watch:\n" + "".join(f"  {line}\n" for line in watch.strip().splitlines())


def test_a_watch_spec_is_read_with_its_defaults_and_launches_become_repeat() -> None:
    found = watch_from_text(spec_text("every: 5s\nmetrics: [output_throughput, p99_ttft_ms]"))
    assert found is not None
    assert found.name == "nightly"
    assert found.spec.period == 5.0 and found.spec.cron == ""
    assert (found.spec.launches, found.spec.baseline, found.spec.margin) == (3, "first", 0.02)
    assert found.spec.metrics == ("output_throughput", "p99_ttft_ms")
    assert [e.name for e in found.experiments] == ["nightly#1", "nightly#2", "nightly#3"]
    assert "repeat: 3" in found.base_yaml and "watch" not in found.base_yaml
    assert WatchSpec.from_dict(found.spec.to_dict()) == found.spec


@pytest.mark.parametrize(("every", "seconds"), [("5 s", 5.0), ("6 h", 21600.0), ("90 s", 90.0)])
def test_a_duration_with_a_space_is_that_duration_not_a_cron_line(
    every: str, seconds: float
) -> None:
    """Issue 46: ``every: 5 s`` was read as a cron line of 2 fields."""
    found = watch_from_text(spec_text(f"every: {every}\nmetrics: [output_throughput]"))
    assert found is not None
    assert found.spec.period == seconds and found.spec.cron == ""
    assert found.spec.every == every.replace(" ", "")


def test_a_spec_without_watch_is_none() -> None:
    assert watch_from_text(BASE) is None


@pytest.mark.parametrize(
    ("watch", "field", "words"),
    [
        ("every: 1s\nmetrics: [output_throughput]", "watch.every", "between 2s"),
        ("every: often\nmetrics: [output_throughput]", "watch.every", "cron"),
        ("every: '0 3 * *'\nmetrics: [output_throughput]", "watch.every", "5 fields"),
        ("every: 5 parsecs\nmetrics: [output_throughput]", "watch.every", "neither a duration"),
        ("every: '0 25 * * *'\nmetrics: [output_throughput]", "watch.every", "cron"),
        ("every: 5s\nmetrics: [speed]", "watch.metrics[0]", "unknown metric"),
        ("every: 5s\nmetrics: []", "watch.metrics", "non-empty"),
        ("every: 5s\nmetrics: [output_throughput]\nlaunches: 0", "watch.launches", ">= 1"),
        ("every: 5s\nmetrics: [output_throughput]\nmargin: 120%", "watch.margin", "below 100%"),
        ("every: 5s\nmetrics: [output_throughput]\nmargin: lots", "watch.margin", "percentage"),
        ("every: 5s\nmetrics: [output_throughput]\nbaseline: best", "watch.baseline", "pinned"),
        ("every: 5s\nmetrics: [output_throughput]\ncolour: red", "watch.colour", "unknown key"),
        ("metrics: [output_throughput]", "watch.every", "required"),
    ],
)
def test_a_bad_watch_names_its_field(watch: str, field: str, words: str) -> None:
    with pytest.raises(SpecError) as caught:
        watch_from_text(spec_text(watch), "w.yaml")
    assert any(i.path == field and words in i.problem for i in caught.value.issues), str(
        caught.value
    )


def test_the_experiment_document_is_checked_as_a_submission_is() -> None:
    text = spec_text("every: 5s\nmetrics: [output_throughput]").replace("requests: 10", "rqs: 1")
    with pytest.raises(SpecError, match=r"benchmark\.rqs"):
        watch_from_text(text)


def test_a_watch_runs_one_configuration() -> None:
    text = (
        spec_text("every: 5s\nmetrics: [output_throughput]")
        + "matrix: {server.flags.--x: [1, 2]}\n"
    )
    with pytest.raises(SpecError, match="matrix"):
        watch_from_text(text)


def test_pinned_and_previous_baselines_and_a_point_metric() -> None:
    found = watch_from_text(
        spec_text("every: 1h\nmetrics: [output_throughput@c8]\nbaseline: pinned 2\nmargin: 5%")
    )
    assert found is not None
    assert (found.spec.baseline, found.spec.pin, found.spec.margin) == ("pinned", 2, 0.05)
    found = watch_from_text(
        spec_text("every: 1h\nmetrics: [output_throughput]\nbaseline: previous")
    )
    assert found is not None and found.spec.baseline == "previous"


def test_a_missed_slot_runs_once_the_next_slot_is_ahead() -> None:
    spec = WatchSpec("5s", 5.0, "", 3, "first", 0, ("output_throughput",), 0.02)
    assert spec.next_due(after=100.0, anchor=100.0) == 105.0
    assert spec.next_due(after=104.9, anchor=100.0) == 105.0
    # down for 40 s (8 slots): one slot, the next one after now, not eight
    assert spec.next_due(after=141.0, anchor=100.0) == 145.0


def test_a_cron_watch_is_due_at_its_next_minute_in_utc() -> None:
    found = watch_from_text(spec_text("every: '0 3 * * *'\nmetrics: [output_throughput]"))
    assert found is not None
    assert found.spec.cron == "0 3 * * *" and found.spec.period == 86400.0
    now = datetime(2026, 12, 5, 9, 0, tzinfo=UTC).timestamp()
    due = datetime.fromtimestamp(found.spec.next_due(now, anchor=0.0), UTC)
    assert due == datetime(2026, 12, 6, 3, 0, tzinfo=UTC)
