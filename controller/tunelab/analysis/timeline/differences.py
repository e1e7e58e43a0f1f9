"""When an event differs between two configurations: one sentence per kind that one side has and
the other lacks, or has far more of ("512 preempted 140 times after t=40 s; 128 never").

Works on the stored event dictionaries (``Event.to_dict``), so ``compare`` needs no timeline."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tunelab.analysis.timeline.events import KINDS

Events = Sequence[Mapping[str, Any]]


def _phrase(kind: str, events: Events) -> str:
    first = min(float(e.get("at_s") or 0.0) for e in events)
    after = f"after t={first:.0f} s"
    if kind == "kv_cache_full":
        count = sum(float((e.get("values") or {}).get("preemptions") or 0) for e in events)
        return f"preempted {count:.0f} times {after}"
    if kind == "batch_limit":
        flag = str((events[0].get("values") or {}).get("flag") or "the batch limit")
        return f"hit its batch limit ({flag}) {after}"
    if kind == "power_cap":
        return f"ran at its power cap {after}"
    if kind == "clock_throttle":
        reasons = sorted({r for e in events for r in (e.get("values") or {}).get("reasons", [])})
        return f"had its clocks throttled ({', '.join(reasons)}) {after}"
    if kind == "gpu_underused":
        return f"left the GPU underused by a limited client {after}"
    return f"changed speed within a launch {after}"


def differences(a_label: str, a: Iterable[Events], b_label: str, b: Iterable[Events]) -> list[str]:
    """Sentences for the event kinds that one configuration shows and the other never does.
    ``a`` and ``b`` hold one event list per attempt (launch) of each configuration."""
    a_all = [e for events in a for e in events]
    b_all = [e for events in b for e in events]
    out = []
    for kind in KINDS:
        mine = [e for e in a_all if e.get("kind") == kind]
        theirs = [e for e in b_all if e.get("kind") == kind]
        if mine and not theirs:
            out.append(f"{a_label} {_phrase(kind, mine)}; {b_label} never")
        elif theirs and not mine:
            out.append(f"{b_label} {_phrase(kind, theirs)}; {a_label} never")
    return out


def configuration_label(row: Mapping[str, Any]) -> str:
    """A compare row's configuration as people name it: its varied settings, else its name."""
    varied = row.get("varied") or {}
    if varied:
        return " ".join(f"{k}={v}" for k, v in sorted(varied.items()))
    return str(row.get("name") or row.get("id"))


def compare_differences(
    rows: Sequence[Mapping[str, Any]], events: Mapping[str, Sequence[Events]]
) -> list[str]:
    """For ``compare``: each configuration against the first (the baseline), over all of
    their launches. ``rows`` are compare's experiment rows; ``events`` maps an experiment id
    to its attempts' event lists (attempts without a timeline are left out)."""
    labels: dict[str, list[str]] = {}
    for row in rows:
        labels.setdefault(configuration_label(row), []).append(str(row["id"]))
    if len(labels) < 2:
        return []
    (base, base_ids), *others = labels.items()
    base_events = [e for i in base_ids for e in events.get(i, [])]
    out = []
    for label, ids in others:
        mine = [e for i in ids for e in events.get(i, [])]
        if mine or base_events:
            out += differences(label, mine, base, base_events)
    return out
