"""The noise profile: pooled by degrees of freedom, a prior for the next search, its line."""

from __future__ import annotations

import pytest

from tunelab.analysis import noise
from tunelab.analysis.noise import ProfileKey
from tunelab.analysis.variance import Components, Prior, cv_to_var

KEY = ProfileKey("h100x8", "vllm 0.11.0", "glm-5")


def test_searches_pool_by_their_degrees_of_freedom() -> None:
    first = noise.remember(None, KEY, Components(0.0004, 0.0025, 2, 20, 4, 24))
    assert first is not None and first.searches == 1
    # a second search with 6 launch degrees of freedom and between 0.0008:
    # (2 x 0.0004 + 6 x 0.0008) / 8 = 0.0007 ; within (20 x 0.0025 + 40 x 0.0016) / 60 = 0.0019
    second = noise.remember(first, KEY, Components(0.0008, 0.0016, 6, 40, 8, 48))
    assert second is not None
    assert second.between == pytest.approx(0.0007)
    assert second.within == pytest.approx(0.0019)
    assert (second.df_between, second.df_within, second.searches) == (8, 60, 2)
    found = noise.prior(second)
    assert found == Prior(second.between, second.within, 8)


def test_a_search_without_a_second_launch_adds_nothing() -> None:
    assert noise.remember(None, KEY, Components(0.0, 0.0025, 0, 20, 2, 22)) is None


def test_a_search_judged_with_the_prior_adds_only_its_own_part() -> None:
    p = Prior(0.0001, 0.0025, 20.0)
    # the fitted between pooled the prior: (20 x 0.0001 + 4 x own) / 24 = 0.0006 -> own 0.0031
    c = Components(0.0006, 0.0025, 4, 30, 6, 36, prior=p)
    found = noise.remember(None, KEY, c)
    assert found is not None and found.between == pytest.approx(0.0031)


def test_the_declared_noise_and_the_line() -> None:
    p = noise.declared(0.01, 0.05)
    assert p.between == pytest.approx(cv_to_var(0.01)) and p.df == noise.DECLARED_DF
    c = Components(cv_to_var(0.004), cv_to_var(0.06), 3, 30, 5, 35, prior=p)
    assert noise.line(c, 3) == "launch noise 0.4% (this search and 3 earlier), within 6.0%"
    own = Components(cv_to_var(0.12), cv_to_var(0.06), 3, 30, 5, 35)
    assert "contradicts the profile of 3 earlier" in noise.line(own, 3, contradicted=True)
