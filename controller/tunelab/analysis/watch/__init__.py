"""How a watch judges (docs/watch-judging.md): one occurrence against the baseline, the history's
change points, what changed in provenance, and the watch's history page.

Plain data in, plain data out: the watch daemon code hands in occurrences (one value per
successful launch per metric) and stores the JSON-serialisable dicts that come back. The
statistics are :mod:`tunelab.analysis.intervals`'; this module only applies them.

The verdict rule, per metric (the watch's metrics are one family, corrected by Benjamini-Hochberg;
the interval is printed at the family's false-coverage-rate confidence):

* **regression**: the adjusted p <= alpha, the interval lies wholly on the worse side of zero and
  the point estimate is past the margin on that side;
* **improvement**: the same on the better side;
* **no change**: the interval lies wholly inside +-margin;
* **undecided**: anything else (too few launches, or an interval that reaches past the margin
  without excluding zero); ``missing`` says about how many more launches would decide.

The occurrence is a regression if any metric regresses, else an improvement if any improves, else
no change if every metric is no change, else undecided.
"""

from __future__ import annotations

from tunelab.analysis.watch.changes import change_points
from tunelab.analysis.watch.judge import (
    IMPROVEMENT,
    METRICS_HIGHER_BETTER,
    NO_CHANGE,
    REGRESSION,
    UNDECIDED,
    Occurrence,
    judge_occurrence,
)
from tunelab.analysis.watch.page import history_page
from tunelab.analysis.watch.provenance import MASK, provenance_changes, verdict_line

__all__ = [
    "IMPROVEMENT",
    "MASK",
    "METRICS_HIGHER_BETTER",
    "NO_CHANGE",
    "REGRESSION",
    "UNDECIDED",
    "Occurrence",
    "change_points",
    "history_page",
    "judge_occurrence",
    "provenance_changes",
    "verdict_line",
]
