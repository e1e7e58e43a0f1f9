"""The one sanitiser (issue 45.6): a hostile engine version (``ESC]52`` clipboard write,
``ESC]0`` title, ``<!channel>``, a forged line, 1 MB long) reached terminals and Slack raw."""

from __future__ import annotations

from typing import Any

from tunelab.analysis.report.provenance import provenance_lines, provenance_summary
from tunelab.common.redaction import REDACTED, Redactor
from tunelab.common.sanitize import printable, slack_text
from tunelab.controller.watches.webhook import MAX_TEXT, verdict_text

HOSTILE = (
    "0.5.3\x1b]52;c;cHduZWQ=\x07\x1b]0;owned\x07"
    "\n2026-12-07 INFO forged line <!channel> @here\u202e"
)


def test_control_characters_and_line_breaks_never_pass() -> None:
    text = printable(HOSTILE, 200)
    assert text.isprintable() and "\n" not in text and "\u202e" not in text
    assert text.startswith("0.5.3]52;c;cHduZWQ=]0;owned 2026-12-07 INFO forged line")
    assert printable("x" * 1_000_000, 64) == "x" * 63 + "…"


def test_slack_text_escapes_mentions_and_links() -> None:
    text = slack_text(f"line one\n{HOSTILE}", 500)
    assert "<" not in text and ">" not in text and "@here" not in text
    assert "&lt;!channel&gt;" in text and text.count("\n") == 2 and "\x1b" not in text


def test_a_hostile_version_in_provenance_is_shown_printable_and_bounded() -> None:
    prov = {"engine": {"name": "vllm", "version": HOSTILE + "x" * 1_000_000}}
    summary = provenance_summary(prov)
    assert summary["engine"].isprintable() and len(summary["engine"]) <= 256
    assert all(line.isprintable() for line in provenance_lines(prov))


def test_the_webhook_text_carries_no_raw_version() -> None:
    verdict = {
        "verdict": "regression",
        "baseline": 1,
        "metrics": [{"metric": "output_throughput", "launches": [3, 3], "verdict": "regression",
                     "change_pct": -18.0, "interval": [-21.0, -15.0]}],
        "changes": [{"field": "engine", "before": "vllm 0.5.2", "after": "vllm " + HOSTILE}],
    }  # fmt: skip
    text = verdict_text("w", 5, verdict)
    assert "\x1b" not in text and "<!channel>" not in text and "@here" not in text
    assert len(text.splitlines()) == 2 and len(text) <= MAX_TEXT


def test_secret_query_parameters_are_redacted_by_shape() -> None:
    redactor = Redactor()
    url = "http://gw/v1?model=m&api_key=AKIA123456&token=tok-987654;secret=s3cr3t-1#frag"
    assert redactor.text(url) == (
        f"http://gw/v1?model=m&api_key={REDACTED}&token={REDACTED};secret={REDACTED}#frag"
    )
    assert redactor.text("http://gw/?max_tokens=5") == "http://gw/?max_tokens=5"
    learned = Redactor.for_document({"env": {"BASE": "http://gw/?access_token=zz-123456"}})
    assert learned.text("the log said zz-123456") == f"the log said {REDACTED}"


def test_show_prints_what_an_agent_said_printable() -> None:
    from tunelab.cli.show_view import render_show

    attempt = {
        "number": 1, "id": "a-1", "gpus": [], "host": "h", "state": "FAILED",
        "message": f"server exited: {HOSTILE}", "result": None, "gpu_summary": None,
        "provenance": {"engine": {"name": "vllm", "version": HOSTILE}},
    }  # fmt: skip
    data: dict[str, Any] = {
        "id": "x-1", "name": "s/e1", "state": "FAILED", "group": "g-1", "varied": {},
        "host_selector": "any", "spec": None, "message": HOSTILE, "attempts": [attempt],
    }  # fmt: skip
    text = render_show(data, lambda doc: [])
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert not any(line.startswith("2026-12-07 INFO forged") for line in text.splitlines())


def test_watch_show_json_redacts_query_secrets_of_verdicts_judged_before() -> None:
    from tunelab.controller.store.watch_models import OccurrenceRow
    from tunelab.controller.watches.document import occurrence_document

    argv = ["vllm", "serve", "m", "--api-base", "http://gw/v1?model=m&api_key=AKIA123456"]
    verdict = {"verdict": "no change", "provenance": {"argv": argv},
               "changes": [{"field": "argv", "before": "-", "after": " ".join(argv)}]}  # fmt: skip
    doc = occurrence_document(OccurrenceRow("w", 2, "g", 0.0, 0.0, verdict, 1.0))
    assert "AKIA123456" not in str(doc) and f"api_key={REDACTED}" in str(doc)
