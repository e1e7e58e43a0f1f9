"""One meaning for a number (issue 43.6): a margin, an effect size, a plateau or a CV reads "5%"
and 0.05 alike, in a spec and on the command line; a value that only makes sense in another
unit (a margin of 5, an SLO of 0.025 ms) is refused with the unit named; an objective the
catalogue does not know is refused with the catalogue's names."""

from __future__ import annotations

import argparse

import pytest

from tests.unit.controller.test_search_spec import BASE, FULL
from tunelab.cli.experiments_cmd import _percent
from tunelab.controller.search.submit import search_from_text
from tunelab.controller.spec.errors import SpecError
from tunelab.controller.spec.schema import read_fraction


def test_five_percent_is_written_two_ways_with_one_meaning() -> None:
    assert read_fraction("5%", 0.5) == read_fraction(0.05, 0.5) == read_fraction("0.05", 0.5)
    assert read_fraction("5%", 0.5) == pytest.approx(0.05)


def test_the_cli_reads_a_share_as_the_spec_does() -> None:
    """The bug: ``compare --min-effect 0.05`` was 0.05 % (the CLI divided every number by 100)
    while ``search.margin: 0.05`` is 5 %."""
    assert _percent("0.05") == pytest.approx(0.05)
    assert _percent("5%") == pytest.approx(0.05)
    with pytest.raises(argparse.ArgumentTypeError, match="500%"):
        _percent("5")


def test_a_bare_number_of_one_or_more_is_refused_with_the_unit_named() -> None:
    with pytest.raises(ValueError, match=r"fraction of 500%: write a percentage as 5% or 0\.05"):
        read_fraction(5, 0.5)


def failures(change: str, bad: str) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as caught:
        search_from_text(BASE + FULL.replace(change, bad) + "  margin: 2%\n")
    return [(i.path, i.problem) for i in caught.value.issues]


def test_a_search_margin_of_5_names_the_unit() -> None:
    with pytest.raises(SpecError) as caught:
        search_from_text(BASE + FULL + "  margin: 5\n")
    assert any(i.path == "search.margin" and "500%" in i.problem for i in caught.value.issues), (
        caught.value
    )


def test_an_slo_in_seconds_is_refused_in_milliseconds() -> None:
    found = failures("tpot_p99_ms: 50", "tpot_p99_ms: 0.025")
    assert any(
        path == "search.slo.tpot_p99_ms" and "milliseconds" in problem and "written 25" in problem
        for path, problem in found
    ), found


def test_an_unknown_objective_lists_the_catalogue() -> None:
    found = failures("maximize: output_throughput", "maximize: output_throughtput")
    assert any(
        path == "search.objective.maximize"
        and "did you mean output_throughput" in problem
        and "p99_tpot_ms" in problem
        for path, problem in found
    ), found


def test_an_objective_asked_the_wrong_way_is_refused() -> None:
    found = failures("maximize: output_throughput", "maximize: ttft_p99_ms")
    assert any("better lower: minimize it" in problem for _, problem in found), found
