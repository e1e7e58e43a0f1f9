"""The report of a finished search, opened in a real headless Chromium with the network cut:
the answer, objective against each parameter, the Pareto front with the SLO line, progress
against trials and GPU-hours — every chart drawn, no console error."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import tests.unit.controller.test_search_driver as driver_tests
from tests.support.browser import load_page, screenshot
from tests.unit.controller.test_search_driver import BASE, SEARCH, submit, until_done, with_hosts
from tunelab.analysis.compare import compare
from tunelab.analysis.report import write_search_report
from tunelab.controller.search.driver import SearchDriver
from tunelab.controller.store import SqliteStore


def test_search_report_loads_offline_and_draws_every_chart(tmp_path: Path) -> None:
    store = with_hosts(SqliteStore(tmp_path / "c.db"))
    submit(store, BASE + SEARCH.replace("STRATEGY", "grid"))
    search = until_done(store, SearchDriver(store, lambda: 1.0))
    rows = store.list_experiments(group="g-1", limit=1000)
    attempts = store.attempts_for_many([r.id for r in rows])
    compare_doc = compare([(r, attempts[r.id]) for r in rows])
    page = tmp_path / "search.html"
    write_search_report(search, compare_doc, page, "g-1")

    dom, log = load_page(page, tmp_path / "profile")
    body = re.search(r"<body ([^>]*)>", dom)
    assert body is not None, dom[:300]
    attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', body.group(1)))
    assert attrs["data-errors"] == "[]", attrs
    # one chart per parameter, the Pareto front, two progress charts
    assert int(attrs["data-charts"]) == 5, attrs
    assert attrs["data-charts-rendered"] == attrs["data-charts"], attrs
    assert "CONSOLE" not in log and "Uncaught" not in log, log[-2000:]
    for text in ("best (trial", "--max-num-seqs=64", "Pareto front", "p99 TPOT ≤ 50 ms",
                 "best output_throughput so far", "GPU-hours", "server argv"):  # fmt: skip
        assert text in dom, text


SHOT = Path("/tmp/tunelab-shots/search-report.png")  # kept to look at when that folder exists
# measured in the page by the browser: lines of text in each trials-table cell, and legend or
# label text that runs past its chart's right edge
LAYOUT_SCRIPT = """<script>
window.addEventListener('load', function () {
  var lines = 0;
  document.querySelectorAll('table.trials td:not(:last-child)').forEach(function (td) {
    var range = document.createRange(); range.selectNodeContents(td);
    var tops = {}; Array.prototype.forEach.call(range.getClientRects(), function (r) {
      tops[Math.round(r.top)] = 1; });
    lines = Math.max(lines, Object.keys(tops).length); });
  var cut = [];
  document.querySelectorAll('figure.chart svg').forEach(function (svg) {
    var width = svg.viewBox.baseVal.width;
    svg.querySelectorAll('text').forEach(function (t) {
      var box = t.getBBox(); if (box.x + box.width > width + 0.5) { cut.push(t.textContent); } });
  });
  document.body.setAttribute('data-cell-lines', String(lines));
  document.body.setAttribute('data-cut-text', JSON.stringify(cut));
});
</script>"""


def test_search_report_is_readable_and_draws_every_slo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 37.6 in a real browser: the trials table's cells stay on one line, no legend or
    label runs past its chart, the SLO reads ``p99 TPOT ≤ 50 ms``, and a TTFT SLO gets its own
    chart with its line beside the TPOT one."""
    plain = driver_tests.surface

    def with_ttft(flags: dict[str, Any], concurrency: int) -> dict[str, float]:
        return {**plain(flags, concurrency), "p99_ttft_ms": 40.0 + 3.0 * concurrency}

    monkeypatch.setattr(driver_tests, "surface", with_ttft)
    store = with_hosts(SqliteStore(tmp_path / "c.db"))
    spec = SEARCH.replace("STRATEGY", "grid").replace(
        "slo: {tpot_p99_ms: 50}", "slo: {tpot_p99_ms: 50, ttft_p99_ms: 150}"
    )
    submit(store, BASE + spec)
    search = until_done(store, SearchDriver(store, lambda: 1.0))
    rows = store.list_experiments(group="g-1", limit=1000)
    attempts = store.attempts_for_many([r.id for r in rows])
    compare_doc = compare([(r, attempts[r.id]) for r in rows])
    page = tmp_path / "search.html"
    write_search_report(search, compare_doc, page, "g-1")
    page.write_text(page.read_text().replace("</body>", LAYOUT_SCRIPT + "</body>"))

    dom, log = load_page(page, tmp_path / "profile")
    body = re.search(r"<body ([^>]*)>", dom)
    assert body is not None, dom[:300]
    attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', body.group(1)))
    assert attrs["data-errors"] == "[]", attrs
    assert "Uncaught" not in log, log[-2000:]
    assert attrs["data-cell-lines"] == "1", attrs
    assert attrs["data-cut-text"] == "[]", attrs
    # two parameters, a chart per SLO, two progress charts
    assert int(attrs["data-charts"]) == 6 == int(attrs["data-charts-rendered"]), attrs
    for text in ("p99 TPOT ≤ 50 ms, p99 TTFT ≤ 150 ms", "throughput vs p99 TTFT",
                 "p99 TTFT ≤ 150 ms", "--max-num-seqs</th>"):  # fmt: skip
        assert text in dom, text
    assert "{&#x27;tpot_p99_ms" not in dom  # not the dict
    screenshot(page, SHOT if SHOT.parent.is_dir() else tmp_path / "search.png", tmp_path / "shot")
