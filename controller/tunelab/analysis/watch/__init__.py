"""How a watch judges (docs/watch-judging.md): one occurrence against the baseline through the
one pairwise rule (``tunelab.analysis.judge.judge_pair``, directions from the metric catalogue),
the history's change points, each metric's state, what changed in provenance, and the watch's
history page.

Plain data in, plain data out: the watch daemon code hands in occurrences (one value per
successful launch per metric) and stores the JSON-serialisable dicts that come back.
"""

from __future__ import annotations

from tunelab.analysis.watch.changes import change_points, marks
from tunelab.analysis.watch.judge import (
    IMPROVEMENT,
    NO_CHANGE,
    REGRESSION,
    UNDECIDED,
    Occurrence,
    judge_occurrence,
)
from tunelab.analysis.watch.page import history_page
from tunelab.analysis.watch.provenance import MASK, provenance_changes, verdict_line
from tunelab.analysis.watch.state import MetricState, Observation, step

__all__ = [
    "IMPROVEMENT",
    "MASK",
    "NO_CHANGE",
    "REGRESSION",
    "UNDECIDED",
    "MetricState",
    "Observation",
    "Occurrence",
    "change_points",
    "history_page",
    "judge_occurrence",
    "marks",
    "provenance_changes",
    "step",
    "verdict_line",
]
