"""A watch's history page opened in a real headless Chromium: no console error, every chart
drawn, the change point and the provenance change on the page."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.browser import load_page, screenshot
from tests.unit.controller.test_watch_judge import history
from tunelab.analysis.watch import history_page


def test_history_page_loads_without_errors_and_draws_every_chart(tmp_path: Path) -> None:
    occs, judgements = history()
    page = tmp_path / "watch.html"
    page.write_text(
        history_page("nightly", occs, judgements, 0, ["output_throughput", "median_ttft_ms"])
    )

    dom, log = load_page(page, tmp_path / "profile")
    body = re.search(r"<body ([^>]*)>", dom)
    assert body is not None, dom[:300]
    attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', body.group(1)))
    assert attrs["data-errors"] == "[]", attrs
    assert attrs["data-charts"] == attrs["data-charts-rendered"] == "2", attrs
    assert "CONSOLE" not in log and "Uncaught" not in log, log[-2000:]
    assert 'class="change-point"' in dom and "sglang 0.5.2 → 0.5.3" in dom
    shot = tmp_path / "watch.png"
    screenshot(page, shot, tmp_path / "profile", height=1400)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
