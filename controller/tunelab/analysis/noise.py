"""The noise profile: variance components remembered per host class x engine (version) x model.

A search ends with its race's components (``variance.Components``); :func:`remember` pools them
into the profile of its key, each part weighted by its degrees of freedom (so ten launches of
one search weigh more than two of another, and the profile's degrees of freedom are what the
next search may lean on, ``Prior.df``). The next search on the same key starts from
:func:`prior` (its first rounds are planned and judged with it, checked against its own
launches: ``variance.fit``); ``search.noise:`` (:func:`declared`) overrides it. :func:`line`
says it beside the answer: "launch noise 0.4 % (this search and 3 earlier), within 6 %".
"""

from __future__ import annotations

from dataclasses import dataclass

from tunelab.analysis.variance import Components, Prior, cv_to_var

DECLARED_DF = 10.0  # search.noise: weighs as ten launch degrees of freedom
MAX_PRIOR_DF = 50.0  # a profile never outweighs a search's own data by more than this


@dataclass(frozen=True)
class ProfileKey:
    host_class: str
    engine: str  # with its version: "vllm 0.11.0"
    model: str


@dataclass(frozen=True)
class NoiseProfile:
    """Pooled log-scale variances and the degrees of freedom behind each."""

    key: ProfileKey
    between: float
    within: float
    df_between: float
    df_within: float
    searches: int  # how many searches (and watch occurrences) it pools


def remember(old: NoiseProfile | None, key: ProfileKey, c: Components) -> NoiseProfile | None:
    """The profile with one more search's components pooled in; the old one unchanged when the
    search has no launch degree of freedom to add (one launch each), None without either."""
    if c.df_between <= 0:
        return old
    if old is None:
        return NoiseProfile(key, _own_between(c), c.within, c.df_between, c.df_within, 1)
    df_b = old.df_between + c.df_between
    df_w = old.df_within + c.df_within
    between = (old.df_between * old.between + c.df_between * _own_between(c)) / df_b
    within = (old.df_within * old.within + c.df_within * c.within) / df_w if df_w else old.within
    return NoiseProfile(key, between, within, df_b, df_w, old.searches + 1)


def _own_between(c: Components) -> float:
    """A search's own between variance (a fitted one pooled a prior in: take it back out)."""
    if c.prior is None:
        return c.between
    total = c.prior.df + c.df_between
    return max(0.0, (total * c.between - c.prior.df * c.prior.between) / c.df_between)


def prior(profile: NoiseProfile | None) -> Prior | None:
    if profile is None or profile.df_between <= 0:
        return None
    return Prior(profile.between, profile.within, min(profile.df_between, MAX_PRIOR_DF))


def declared(launch_cv: float, within_cv: float) -> Prior:
    """``search.noise: {launch: 1%, within: 5%}``: a stated prior of ``DECLARED_DF``."""
    return Prior(cv_to_var(launch_cv), cv_to_var(within_cv), DECLARED_DF)


def line(c: Components, earlier: int, contradicted: bool = False) -> str:
    """The noise beside the answer."""
    if c.prior is None and not contradicted:
        source = "this search"
    elif contradicted:
        source = f"this search; it contradicts the profile of {earlier} earlier, left out"
    else:
        source = f"this search and {earlier} earlier"
    return f"launch noise {c.launch_cv:.1%} ({source}), within {c.within_cv:.1%}"
