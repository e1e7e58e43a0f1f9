"""Host classes: a search compares trials only among hosts of one class (DESIGN.md, "Answers").

A class is what makes the same configuration measure differently by construction: the GPU
model and how many, and (where the attempt recorded it) the driver. At submission the
controller knows each host's GPUs from its last poll (``hosts ls``); a search whose selector
matches hosts of more than one class is refused with the classes and their hosts, since its
ranking would rank hosts. Each trial keeps the host it ran on and that host's class as its
attempt's provenance recorded it (the GPUs the server saw, the driver), shown by ``search
show``; trials of several classes in one search (a host added or changed mid-search) are a
warning on the answer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tunelab.controller.scheduler import matches
from tunelab.controller.spec.errors import SpecIssue
from tunelab.controller.store.models import AttemptRow, HostRow
from tunelab.controller.store.search_models import TrialRow

NO_GPU = "no GPU"


def gpus_text(names: Iterable[str]) -> str:
    """``"1x NVIDIA H200"``, ``"2x NVIDIA H100, 1x NVIDIA A10"``, or ``"no GPU"``."""
    counts = Counter(n or "unknown GPU" for n in names)
    return ", ".join(f"{c}x {n}" for n, c in sorted(counts.items())) or NO_GPU


def of_host(host: HostRow) -> str:
    """A registered host's class from its last poll: its GPUs by model."""
    return gpus_text(str(g.get("name") or "") for g in host.gpus)


def of_attempt(attempt: AttemptRow) -> str:
    """The class of the host an attempt ran on, from its provenance: the GPUs its server saw
    and the driver; ``""`` when it recorded none."""
    prov = attempt.provenance
    if not isinstance(prov, Mapping):
        return ""
    gpus = prov.get("gpus")
    names = [str(g.get("name") or "") for g in gpus if isinstance(g, Mapping)] if gpus else []
    system = prov.get("system")
    driver = system.get("driver_version") if isinstance(system, Mapping) else None
    return gpus_text(names) + (f", driver {driver}" if names and driver else "")


def mixed_pool(selector: Mapping[str, Any], hosts: Sequence[HostRow]) -> SpecIssue | None:
    """The refusal of a search whose selector matches hosts of more than one class, else None.
    Only hosts that answered a poll have a known class; the others are left out."""
    classes: dict[str, list[str]] = {}
    for h in hosts:
        if h.agent_instance_id and matches(selector, h):
            classes.setdefault(of_host(h), []).append(h.name)
    if len(classes) < 2:
        return None
    listed = "; ".join(f"{c}: {', '.join(sorted(names))}" for c, names in sorted(classes.items()))
    return SpecIssue(
        "host",
        f"matches hosts of {len(classes)} classes ({listed}); a search compares trials on one "
        "class of host only: narrow host (a name, or labels) to one class and submit one "
        "search per class",
    )


def warning(trials: Sequence[TrialRow]) -> str:
    """The answer's warning when its trials ran on hosts of several classes, else ``""``."""
    classes: dict[str, list[int]] = {}
    for t in trials:
        found = t.details.get("host_class")
        if isinstance(found, str) and found:
            classes.setdefault(found, []).append(t.number)
    if len(classes) < 2:
        return ""
    listed = "; ".join(f"{c} (trials {', '.join(map(str, n))})" for c, n in classes.items())
    return (
        f"hosts: the trials ran on {len(classes)} classes of host ({listed}); a difference "
        "between them may be the host's"
    )
