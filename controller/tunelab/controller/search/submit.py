"""A spec file with ``search:``: validated whole before anything is stored (the base document,
the search section, the default point and each value of the space on its own, each checked as
the agent will check it), then kept as one search row; the driver queues its trials."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tunelab.controller.search.space import SearchSpec, parse_search
from tunelab.controller.search.trials import trial_spec
from tunelab.controller.spec.errors import SpecError, SpecIssue
from tunelab.controller.spec.expand import parse_spec_text
from tunelab.controller.spec.limits import DEFAULT_LIMITS, SpecLimits


@dataclass(frozen=True)
class SearchSubmission:
    name: str
    base: dict[str, Any]
    spec: SearchSpec
    first: dict[str, Any]  # the default point's normalized spec


def _probe_points(spec: SearchSpec) -> list[dict[str, Any]]:
    """The default point, then each value of each axis on its own (a range's two ends)."""
    points = [spec.default_params]
    for p in spec.space:
        values = p.values if p.kind == "choice" else p.grid(2)
        for v in values:
            points.append({**spec.default_params, p.path: v})
    return points


def search_from_text(
    text: str, source: str = "", limits: SpecLimits = DEFAULT_LIMITS
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
    if spec is None:
        raise SpecError(issues, source)
    base = {k: v for k, v in raw.items() if k != "search"}
    first: dict[str, Any] = {}
    seen: set[tuple[str, str]] = set()
    for point in _probe_points(spec):
        found, problems = trial_spec(base, spec, point, 0)
        if not first:
            first = found
        for problem in problems:
            if (problem.path, problem.problem) not in seen:
                seen.add((problem.path, problem.problem))
                issues.append(problem)
    if issues:
        raise SpecError(issues, source)
    return SearchSubmission(str(base.get("name", "")), base, spec, first)
