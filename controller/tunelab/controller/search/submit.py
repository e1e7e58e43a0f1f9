"""A spec file with ``search:``: validated whole before anything is stored (the base document,
the search section, the default point and each value of the space on its own, each checked as
the agent will check it), then kept as one search row; the driver queues its trials."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tunelab.controller.search.space import SearchSpec, parse_search
from tunelab.controller.search.trials import check_trial, trial_document, with_field
from tunelab.controller.spec.errors import SpecError, SpecIssue
from tunelab.controller.spec.expand import parse_spec_text
from tunelab.controller.spec.limits import DEFAULT_LIMITS, SpecLimits


@dataclass(frozen=True)
class SearchSubmission:
    name: str
    base: dict[str, Any]
    spec: SearchSpec
    first: dict[str, Any]  # the default point's normalized spec


# CPU seconds (this thread's) one submission may spend checking a search's points: the caps on
# axes and values keep a valid spec far below it; this bounds whatever they let through
CPU_BUDGET = 5.0


def _probe_changes(spec: SearchSpec) -> list[tuple[str, Any]]:
    """Each value of each axis other than its default (a range's far end), checked on its own."""
    changes = []
    for p in spec.space:
        values = p.values if p.kind == "choice" else p.grid(2)
        changes += [(p.path, v) for v in values[1:]]
    return changes


def _check_points(
    base: Mapping[str, Any], spec: SearchSpec, issues: list[SpecIssue], cpu_budget: float
) -> dict[str, Any]:
    """Check the default point, then each other axis value on the default's rendered document
    (one render per value, no whole-document copies); returns the default's normalized spec.
    Work grows with the spec, and stops at ``cpu_budget`` CPU seconds with a SpecIssue."""
    started = time.thread_time()
    seen: set[tuple[str, str]] = set()

    def keep(problems: list[SpecIssue]) -> None:
        for problem in problems:
            if (problem.path, problem.problem) not in seen:
                seen.add((problem.path, problem.problem))
                issues.append(problem)

    try:
        default = trial_document(base, spec, spec.default_params, 0)
    except ValueError as exc:
        issues.append(SpecIssue("search.space", str(exc)))
        return {}
    first, problems = check_trial(default)
    keep(problems)
    for path, value in _probe_changes(spec):
        if time.thread_time() - started > cpu_budget:
            issues.append(
                SpecIssue(
                    "search.space",
                    f"checking its values took over {cpu_budget:g} CPU-s; give fewer axes "
                    "or values",
                )
            )
            break
        try:
            keep(check_trial(with_field(default, path, value))[1])
        except ValueError as exc:
            keep([SpecIssue("search.space", str(exc))])
    return first


def _base_issues(base: Mapping[str, Any], raw_search: Any) -> list[SpecIssue]:
    """The base's unknown keys (its typos) when the ``search:`` section could not be read: what
    else the base lacks may be the search's to set (its load sets the concurrency), and an
    issue on a path the space sets is the space's values to decide."""
    space = raw_search.get("space") if isinstance(raw_search, Mapping) else None
    axes = [str(a) for a in space] if isinstance(space, Mapping) else []

    def set_by_space(path: str) -> bool:
        return any(a == path or a.startswith(f"{path}.") or path.startswith(f"{a}.") for a in axes)

    _, found = check_trial(base)
    return [i for i in found if i.problem.startswith("unknown key") and not set_by_space(i.path)]


def search_from_text(
    text: str,
    source: str = "",
    limits: SpecLimits = DEFAULT_LIMITS,
    cpu_budget: float = CPU_BUDGET,
) -> SearchSubmission | None:
    """The search a spec text asks for, or None when it has no ``search:`` (SpecError when it
    is not valid)."""
    docs = parse_spec_text(text, source, limits)
    with_search = [d for d in docs if isinstance(d, Mapping) and "search" in d]
    if not with_search:
        return None
    if len(docs) != 1:
        raise SpecError([SpecIssue("search", "a search is the only document of its file")], source)
    raw = with_search[0]
    for other in ("matrix", "ablation"):
        if other in raw:
            raise SpecError([SpecIssue(other, "use search or matrix/ablation, not both")], source)
    spec, issues = parse_search(raw["search"])
    base = {k: v for k, v in raw.items() if k != "search"}
    if spec is None:  # the base's own mistakes too: a user fixes both at once (issue 37.7)
        raise SpecError(issues + _base_issues(base, raw["search"]), source)
    first = _check_points(base, spec, issues, cpu_budget)
    if issues:
        raise SpecError(issues, source)
    return SearchSubmission(str(base.get("name", "")), base, spec, first)
