"""The line every summary prints about prompt lengths: the server's own mean count of prompt
tokens (``usage.prompt_tokens``, each point's ``mean_input_tokens``) and whether the lengths
asked for were exact (a tokenizer) or approximate (words). Shared by ``tunelab bench``'s summary,
``tunelab show``, ``compare`` and ``search show``, so they say it in the same words."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

APPROXIMATE_NOTE = "lengths approximate: no tokenizer"


def server_mean_prompt_tokens(points: Iterable[Mapping[str, Any]]) -> float | None:
    """The mean of ``usage.prompt_tokens`` over every completed request of ``points`` (each
    point's mean weighted by its completed requests); None where the server reported none."""
    total = 0.0
    count = 0
    for point in points:
        mean = point.get("mean_input_tokens")
        done = point.get("completed") or 0
        if isinstance(mean, int | float) and isinstance(done, int) and done > 0:
            total += float(mean) * done
            count += done
    return total / count if count else None


def prompt_tokens_line(points: Iterable[Mapping[str, Any]], exact: bool | None) -> str | None:
    """``prompt tokens (server's count): mean 127.4 per request; lengths approximate: no
    tokenizer``; None when there is nothing to say (no usage and nothing known of lengths).
    ``exact`` is the result's ``dataset.lengths_exact`` (None: not known, say nothing of it)."""
    mean = server_mean_prompt_tokens(points)
    note = APPROXIMATE_NOTE if exact is False else ""
    if mean is None:
        return f"prompt tokens: the server reported none; {note}" if note else None
    line = f"prompt tokens (server's count): mean {mean:,.1f} per request"
    return f"{line}; {note}" if note else line


def lengths_exact(result: Mapping[str, Any] | None) -> bool | None:
    """A bench result's ``dataset.lengths_exact`` (None for a result without one: a command
    benchmark, or a result from before datasets were described; and for a prompt file, whose
    texts are what they are: only their counting is approximate)."""
    dataset = (result or {}).get("dataset")
    if not isinstance(dataset, Mapping) or dataset.get("name") == "file":
        return None
    if isinstance(dataset.get("lengths_exact"), bool):
        return bool(dataset["lengths_exact"])
    return None
