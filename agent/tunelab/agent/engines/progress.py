"""Load progress from tqdm-style log lines.

Engines print checkpoint loading through tqdm, e.g. SGLang's
``Loading safetensors checkpoint shards:  54% Completed | 45/83 [00:14<00:13,  3.13it/s]`` or
HF's ``Loading checkpoint shards:  50%|█████     | 2/4 [00:01<00:01,  1.50it/s]``. tqdm redraws
with ``\\r``, so a "line" is anything between ``\\r`` or ``\\n`` (split by
``tunelab.agent.engines.watch.EngineWatch``, which feeds each one here).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PROGRESS = re.compile(
    r"(?P<label>[^\r\n|]*?):?\s*(?P<pct>\d{1,3})%[^|\r\n]*\|[^\r\n]*?"
    r"(?P<done>\d+)/(?P<total>\d+)\s*"
    r"\[(?P<elapsed>[\d:]+)<(?P<remaining>[\d:?]+)"
    r"(?:,\s*(?P<rate>[\d.]+|\?)\s*(?P<unit>[^\]\s]*/s|s/[^\]\s]*))?"
)
_TIMESTAMP_PREFIX = re.compile(r"^\[[^\]]*\]\s*")


@dataclass(frozen=True)
class LoadProgress:
    label: str
    done: int
    total: int
    rate_per_second: float  # items per second; 0 when unknown
    eta_seconds: float  # -1 when unknown
    updated_at: float = 0.0
    phase: str = ""  # the start-up phase the bar belongs to (an engines.Phase value)

    @property
    def ratio(self) -> float:
        return self.done / self.total if self.total else 0.0


def _clock_seconds(text: str) -> float:
    if "?" in text:
        return -1.0
    seconds = 0.0
    for part in text.split(":"):
        seconds = seconds * 60 + int(part)
    return seconds


def parse_progress_line(line: str, now: float = 0.0) -> LoadProgress | None:
    """The progress on one tqdm line, or None when the line is not one."""
    match = _PROGRESS.search(line)
    if match is None:
        return None
    done, total = int(match["done"]), int(match["total"])
    if total <= 0 or done > total:
        return None
    rate = 0.0
    if match["rate"] and match["rate"] != "?":
        value = float(match["rate"])
        rate = 1.0 / value if match["unit"].startswith("s/") and value > 0 else value
    eta = _clock_seconds(match["remaining"])
    if eta < 0 and rate > 0:
        eta = (total - done) / rate
    label = _TIMESTAMP_PREFIX.sub("", match["label"]).strip(" :")
    return LoadProgress(label, done, total, rate, eta, now)


def same_progress(a: LoadProgress, b: LoadProgress | None) -> bool:
    """The same bar state (a tqdm redraw with nothing new is not a change)."""
    return b is not None and (a.label, a.done, a.total, a.eta_seconds) == (
        b.label,
        b.done,
        b.total,
        b.eta_seconds,
    )
