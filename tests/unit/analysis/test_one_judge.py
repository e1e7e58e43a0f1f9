"""The layering rule of issue 43.3: one module turns an interval into a verdict word, the one
judge (analysis/judge.py). Every other module of the product hands its estimate to
``judge_pair``; a comparison of an interval's bound (``lo``, ``hi``, ``interval[...]``) against a
margin or 0 or 1 anywhere else is a second rule, and fails this test."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import tunelab.analysis

PRODUCT = Path(tunelab.analysis.__file__).resolve().parents[1]  # controller/tunelab
JUDGE = PRODUCT / "analysis" / "judge.py"
# modules still on their own rule, to move onto judge_pair: none (the watch's occurrence verdict
# went onto judge_pair with issue 43.5)
PENDING: set[str] = set()
BOUNDS = {"lo", "hi", "nlo", "nhi"}
LIMITS = {"margin", "min_effect"}


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _name(node.operand)
    if isinstance(node, ast.Subscript):
        inner = _name(node.value)
        return None if inner is None else f"{inner}[]"
    return None


def _bound(node: ast.AST) -> bool:
    name = _name(node) or ""
    return name in BOUNDS or (name.endswith("[]") and "interval" in name)


def _limit(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and not isinstance(node.value, bool):
        return node.value in (0, 1)
    name = _name(node) or ""
    return name in LIMITS or name.endswith(("margin", "min_effect"))


def second_rules(source: str) -> list[str]:
    """Comparisons of an interval's bound against a margin, 0 or 1 in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        for a, b in itertools.pairwise(sides):
            if (_bound(a) and _limit(b)) or (_limit(a) and _bound(b)):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_scan_finds_a_second_rule() -> None:
    assert second_rules("if -margin <= lo and hi <= margin:\n    v = 'tie'\n")
    assert second_rules("better = found.interval[0] > 0\n")
    assert not second_rules("if n <= margin_launches: pass\nok = lo < hi\n")


def test_no_module_but_the_judge_turns_an_interval_into_a_verdict() -> None:
    offenders = {}
    for path in sorted(PRODUCT.rglob("*.py")):
        relative = path.relative_to(PRODUCT).as_posix()
        if path == JUDGE or relative in PENDING:
            continue
        found = second_rules(path.read_text(encoding="utf-8"))
        if found:
            offenders[relative] = found
    assert not offenders, offenders


def test_every_verdict_maker_calls_the_judge() -> None:
    makers = ("analysis/effects.py", "analysis/race.py", "analysis/drift.py",
              "analysis/watch/judge.py")  # fmt: skip
    for relative in makers:
        source = (PRODUCT / relative).read_text(encoding="utf-8")
        assert "judge_pair(" in source, relative
    answer = (PRODUCT / "controller" / "search" / "answer.py").read_text(encoding="utf-8")
    assert "st.effect" in answer and "race.versus(" in answer  # the race's judgements
