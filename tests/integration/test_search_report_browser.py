"""The report of a finished search, opened in a real headless Chromium with the network cut:
the answer, objective against each parameter, the Pareto front with the SLO line, progress
against trials and GPU-hours — every chart drawn, no console error."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.browser import load_page
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
    for text in ("best (trial", "--max-num-seqs=64", "Pareto front", "SLO 50 ms",
                 "best output_throughput so far", "GPU-hours", "server argv"):  # fmt: skip
        assert text in dom, text
