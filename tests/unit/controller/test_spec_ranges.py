"""Issue 45.2 and the low items: values a spec gives are refused where they enter, with the
field named — a margin that overflowed the watch judge, a pinned occurrence past PostgreSQL's
INTEGER, a metric key that became a 1,000-character Prometheus label, and a 401-digit integer
that was an OverflowError (INTERNAL) in validation itself."""

from __future__ import annotations

import pytest

from tunelab.controller.spec.errors import SpecError
from tunelab.controller.spec.expand import expand_text
from tunelab.controller.watches.spec import watch_from_text


@pytest.mark.parametrize(
    ("line", "field", "said"),
    [
        ("margin: 1.0e-300", "watch.margin", "must be 0 or at least 0.1%"),
        ("baseline: pinned 123456789012345678901234567890", "watch.baseline", "N <= 2147483647"),
        ("metrics: [output_throughput@" + "c" * 1000 + "]", "watch.metrics[0]", "at most 64"),
    ],
)
def test_the_spec_refuses_what_took_the_loop_or_the_database_down(
    line: str, field: str, said: str
) -> None:
    text = f"""
name: w
server: {{command: [sim], flags: {{--port: "{{port}}"}}, port: auto, ready: {{model: m}}}}
benchmark: {{requests: 10, input_len: 8, output_len: 8, concurrency: [8]}}
watch:
  every: 5s
  metrics: [output_throughput]
  {line}
"""
    if line.startswith("metrics"):
        text = text.replace("  metrics: [output_throughput]\n", "")
    with pytest.raises(SpecError) as refused:
        watch_from_text(text)
    shown = str(refused.value)
    assert field in shown and said in shown and len(shown) < 600


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ("roofline: {weight_bytes: " + "1" + "0" * 400 + "}", "roofline.weight_bytes"),
        ("priority: " + "9" * 30, "priority"),
    ],
)
def test_a_huge_integer_in_a_spec_is_refused_with_its_field(doc: str, field: str) -> None:
    """Issue 45.2: a 401-digit integer was an OverflowError (INTERNAL) in validation, and an
    integer without a bound of its own went on to the database."""
    text = "name: x\nserver: {command: [sim], ready: {model: m}}\n" + doc + "\n"
    with pytest.raises(SpecError) as refused:
        expand_text(text)
    assert field in str(refused.value) and "digit integer" in str(refused.value)
