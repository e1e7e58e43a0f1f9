"""The report page: what it holds, built from a compare document (the browser test is in
tests/integration/test_report_browser.py)."""

from __future__ import annotations

import re

from tests.unit.controller.test_compare_view import document
from tunelab.analysis.report import render_report
from tunelab.analysis.report.svg import nice_ticks, pareto_front


def test_ticks_cover_the_data() -> None:
    assert nice_ticks(0, 527.6) == [0, 200, 400, 600]  # the line to 527 is not cut at 400
    assert nice_ticks(0, 400) == [0, 100, 200, 300, 400]
    assert nice_ticks(-0.5, 1.0, 6)[0] <= -0.5


def test_pareto_front_keeps_the_points_nothing_beats_on_both() -> None:
    points = [(100, 10), (200, 12), (150, 15), (300, 30), (250, 30), (120, 9)]
    assert pareto_front(points) == [(120, 9), (200, 12), (300, 30)]


def test_the_page_is_self_contained_and_has_every_section() -> None:
    doc = document()
    doc["experiments"][0].update(
        state="FAILED_STARTUP", message="server FAILED: CUDA out of memory"
    )
    html = render_report(doc, "g-1")
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", html)
    assert "@import" not in html and "url(" not in html
    for heading in ("Throughput and latency", "Effects", "GPU power", "Provenance", "Failures"):
        assert f"<h2>{heading}" in html
    assert "CUDA out of memory" in html and "FAILED_STARTUP" in html
    assert "runs differ in driver" in html  # the compare warning
    assert html.count('<figure class="chart"') >= 6
