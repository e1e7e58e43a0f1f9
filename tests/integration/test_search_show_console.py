"""``tunelab search show`` through the real console script against a real controller and agent
(issue 37.6): its lines fit 100 columns and the SLOs read ``p99 TPOT ≤ 25 ms``."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.integration.test_cli_first_hour import Lab
from tests.integration.test_first_hour_round3 import parked_search


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    lab = Lab(tmp_path_factory.mktemp("search-show"))
    try:
        yield lab
    finally:
        lab.controller.terminate()
        lab.agent.terminate()


def test_search_show_fits_100_columns_and_says_the_slos(lab: Lab) -> None:
    submitted = lab.run("submit", str(parked_search(lab, "narrow")), "--json")
    assert submitted.returncode == 0, submitted.stderr
    group = json.loads(submitted.stdout)["search_group"]
    shown = lab.run("search", "show", group, COLUMNS="100")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert not [line for line in lines if len(line) > 100], shown.stdout
    assert "maximize output_throughput under p99 TPOT ≤ 25 ms, p99 TTFT ≤ 150 ms" in shown.stdout
    assert "parameters: --max-num-batched-tokens --max-num-seqs" in shown.stdout
    assert "tpot_p99_ms" not in shown.stdout
    cancelled = lab.run("search", "cancel", group)
    assert cancelled.returncode == 0, cancelled.stderr
