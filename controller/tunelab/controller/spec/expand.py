"""From a spec file to queue entries: documents, matrix (cartesian product), ablation (baseline
plus each change alone) and repeat (separate launches). Each result is one experiment."""

from __future__ import annotations

import copy
import itertools
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tunelab.controller.spec.errors import SpecError, SpecIssue
from tunelab.controller.spec.limits import (
    DEFAULT_LIMITS,
    SpecLimits,
    check_expansion,
    load_documents,
)
from tunelab.controller.spec.render import run_spec_issue
from tunelab.controller.spec.schema import check_experiment

MAX_ISSUES = 50  # a spec with 10,000 bad variants reports the first few, not every one
VARIABLE_ROOTS = ("server", "benchmark", "host", "max_duration", "priority", "max_attempts")


@dataclass(frozen=True)
class ExpandedExperiment:
    """One queue entry: a fully validated spec and what makes it differ from its baseline."""

    name: str
    spec: dict[str, Any]
    varied: dict[str, str] = field(default_factory=dict)
    repeat_index: int = 1

    @property
    def priority(self) -> int:
        return int(self.spec["priority"])

    @property
    def host(self) -> dict[str, Any]:
        return dict(self.spec["host"])

    @property
    def max_attempts(self) -> int:
        return int(self.spec["max_attempts"])


def parse_spec_text(text: str, source: str = "", limits: SpecLimits = DEFAULT_LIMITS) -> list[Any]:
    """The experiment documents in a YAML text: a mapping, a list of them, or several ``---``;
    refused when the text or what it expands to passes ``limits`` (nothing is expanded yet)."""
    flat: list[Any] = []
    for doc in load_documents(text, limits, source):
        if doc is not None:
            flat.extend(doc if isinstance(doc, list) else [doc])
    if not flat:
        raise SpecError([SpecIssue("", "no experiment in the file")], source)
    check_expansion(flat, limits, source)
    return flat


def split_path(path: str) -> list[str]:
    """``server.flags.--a.b`` → ``["server", "flags", "--a.b"]``: map keys may hold dots."""
    parts = path.split(".")
    if (
        len(parts) >= 3
        and parts[0] in ("server", "benchmark")
        and parts[1] in ("flags", "env", "slo")
    ):
        return [parts[0], parts[1], ".".join(parts[2:])]
    return parts


def apply_change(doc: Mapping[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of a raw document with one dotted field set (flags/env keys created as needed)."""
    out = copy.deepcopy(dict(doc))
    node: dict[str, Any] = out
    parts = split_path(path)
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = {}
            node[part] = child
        if not isinstance(child, dict):
            raise ValueError(f"{part} is not a mapping")
        node = child
    node[parts[-1]] = value
    return out


def change_label(path: str, value: Any) -> str:
    parts = split_path(path)
    key = parts[-1] if len(parts) == 3 and parts[1] == "flags" else path
    if value is True and len(parts) == 3 and parts[1] == "flags":
        return key
    if value is None:
        return f"no {key}"
    return f"{key}={value}"


def _variants(
    raw: Mapping[str, Any], prefix: str, issues: list[SpecIssue]
) -> list[tuple[str, dict[str, Any]]]:
    """(label, {path: value}) for each variant; the baseline has an empty change set."""
    matrix, ablation = raw.get("matrix"), raw.get("ablation")
    if matrix is not None and ablation is not None:
        issues.append(SpecIssue(f"{prefix}matrix", "use matrix or ablation, not both"))
        return []
    if matrix is not None:
        if not isinstance(matrix, Mapping) or not matrix:
            issues.append(
                SpecIssue(f"{prefix}matrix", "must map dotted field paths to lists of values")
            )
            return []
        axes = []
        for path, values in matrix.items():
            if str(path).split(".")[0] not in VARIABLE_ROOTS:
                issues.append(
                    SpecIssue(f"{prefix}matrix.{path}", f"must start with one of {VARIABLE_ROOTS}")
                )
            if not isinstance(values, list) or not values:
                issues.append(
                    SpecIssue(f"{prefix}matrix.{path}", "must be a non-empty list of values")
                )
                return []
            axes.append([(str(path), v) for v in values])
        combos = []
        for combo in itertools.product(*axes):
            changes = dict(combo)
            combos.append((",".join(change_label(p, v) for p, v in combo), changes))
        return combos
    if ablation is not None:
        if not isinstance(ablation, list) or not ablation:
            issues.append(
                SpecIssue(f"{prefix}ablation", "must be a non-empty list of {field: value}")
            )
            return []
        out: list[tuple[str, dict[str, Any]]] = [("baseline", {})]
        for i, entry in enumerate(ablation):
            if not isinstance(entry, Mapping) or not entry:
                issues.append(
                    SpecIssue(f"{prefix}ablation[{i}]", "must map dotted field paths to a value")
                )
                continue
            for path in entry:
                if str(path).split(".")[0] not in VARIABLE_ROOTS:
                    issues.append(
                        SpecIssue(
                            f"{prefix}ablation[{i}].{path}",
                            f"must start with one of {VARIABLE_ROOTS}",
                        )
                    )
            out.append((",".join(change_label(str(p), v) for p, v in entry.items()), dict(entry)))
        return out
    return [("", {})]


def _value_text(value: Any) -> str:
    """A changed value as the spec would spell it (true, null, 2048)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _single_changes(raw: Mapping[str, Any]) -> list[tuple[str, str, Any]]:
    """(where, path, value) for each change the matrix or ablation makes, once each."""
    found: dict[tuple[str, str, str], tuple[str, str, Any]] = {}
    matrix, ablation = raw.get("matrix"), raw.get("ablation")
    if isinstance(matrix, Mapping):
        for path, values in matrix.items():
            for value in values if isinstance(values, list) else []:
                found.setdefault(("matrix", str(path), repr(value)), ("matrix", str(path), value))
    if isinstance(ablation, list):
        for i, entry in enumerate(ablation):
            for path, value in entry.items() if isinstance(entry, Mapping) else []:
                where = f"ablation[{i}]"
                found.setdefault((where, str(path), repr(value)), (where, str(path), value))
    return list(found.values())


def _change_issues(
    base: Mapping[str, Any], raw: Mapping[str, Any], prefix: str, known: list[SpecIssue]
) -> list[SpecIssue]:
    """Problems each change brings on its own, reported once per field, next to the base's.

    Checking every variant instead reports a bad key once per variant that holds it, and only
    after the base is valid.
    """
    seen = {(i.path, i.problem) for i in known}
    issues: list[SpecIssue] = []
    for where, path, value in _single_changes(raw):
        if str(path).split(".")[0] not in VARIABLE_ROOTS:
            continue  # _variants reports the path itself
        try:
            doc = apply_change(base, path, value)
        except ValueError as exc:
            found = [SpecIssue(path, str(exc))]
        else:
            found = check_experiment(doc, prefix)[1]
        for issue in found:
            if (issue.path, issue.problem) in seen:
                continue
            seen.add((issue.path, issue.problem))
            issues.append(SpecIssue(f"{prefix}{where}.{path}", str(issue)))
    return issues


def expand_document(raw: Any, prefix: str = "") -> tuple[list[ExpandedExperiment], list[SpecIssue]]:
    """Validate one document and every variant of it; returns (experiments, issues)."""
    base_spec, issues = check_experiment(raw, prefix)
    if not isinstance(raw, Mapping):
        return [], issues
    base = {k: v for k, v in raw.items() if k not in ("matrix", "ablation")}
    variants = _variants(raw, prefix, issues)
    issues.extend(_change_issues(base, raw, prefix, issues))
    if issues:
        return [], issues
    blocks: list[list[ExpandedExperiment]] = []
    for label, changes in variants:
        doc = base
        try:
            for path, value in changes.items():
                doc = apply_change(doc, path, value)
        except ValueError as exc:
            issues.append(SpecIssue(f"{prefix}{label}", str(exc)))
            continue
        spec, variant_issues = check_experiment(
            doc, f"{prefix}variant {label!r}: " if label else prefix
        )
        if variant_issues:
            issues.extend(variant_issues)
            continue
        varied = {path: _value_text(v) for path, v in changes.items()}
        name = f"{base_spec['name']}/{label}" if label else base_spec["name"]
        repeats = spec["repeat"]
        blocks.append(
            [
                ExpandedExperiment(name + (f"#{i}" if repeats > 1 else ""), spec, varied, i)
                for i in range(1, repeats + 1)
            ]
        )
    return interleaved(blocks), issues


def interleaved(blocks: list[list[ExpandedExperiment]]) -> list[ExpandedExperiment]:
    """The variants' repeats in queue order, round by round, every other round reversed
    (A B C, C B A, A B C ...): a drift of the machine over the queue falls on every variant
    alike, instead of on whichever variant's block ran last. Names and repeat indexes are the
    variants' own; only the order changes."""
    out: list[ExpandedExperiment] = []
    for round_index in range(max((len(b) for b in blocks), default=0)):
        ordered = blocks if round_index % 2 == 0 else blocks[::-1]
        out.extend(b[round_index] for b in ordered if round_index < len(b))
    return out


def expand_text(
    text: str, source: str = "", limits: SpecLimits = DEFAULT_LIMITS
) -> list[ExpandedExperiment]:
    """Every experiment in a spec file, or SpecError listing every problem (nothing partial).
    Each experiment is also rendered to the RunSpec an agent will get and checked with the
    agent's own rules, so a spec accepted here is never refused at dispatch."""
    docs = parse_spec_text(text, source, limits)
    experiments: list[ExpandedExperiment] = []
    issues: list[SpecIssue] = []
    for i, doc in enumerate(docs):
        found, problems = expand_document(doc, f"[{i}]." if len(docs) > 1 else "")
        experiments.extend(found)
        issues.extend(problems)
    if issues:
        raise SpecError(issues, source)
    counts = Counter(e.name for e in experiments)
    duplicates = sorted(n for n, c in counts.items() if c > 1)
    if duplicates:
        raise SpecError(
            [SpecIssue("name", f"expands to duplicate experiment names: {duplicates}")], source
        )
    checked: set[int] = set()
    for e in experiments:
        if id(e.spec) in checked:  # repeats share one spec
            continue
        checked.add(id(e.spec))
        issue = run_spec_issue(e.spec)
        if issue is not None:
            issues.append(SpecIssue(f"{e.name}: {issue.path}", issue.problem))
            if len(issues) >= MAX_ISSUES:
                break
    if issues:
        raise SpecError(issues, source)
    return experiments
