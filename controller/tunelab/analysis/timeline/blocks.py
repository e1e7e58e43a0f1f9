"""Blocks: the one definition of within-launch replicates (DESIGN.md, "Evidence and cost").

A block is a run of consecutive timeline windows at one load point after its warm-up: only
windows wholly inside the point's measured span count, and only whole blocks (a partial block
at the end is left out, so every block has the same length). Their throughputs are the
within-launch samples that the cost-to-decide layer weighs against between-launch noise;
``tunelab.analysis`` uses this function and no other cut of the windows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tunelab.analysis.timeline.model import Timeline

DEFAULT_BLOCK_SECONDS = 10.0


@dataclass(frozen=True)
class Block:
    """``windows`` consecutive windows of one point's measured span."""

    point_index: int
    first_window: int
    windows: int
    start_s: float  # from the timeline's start
    duration_s: float
    completed: int  # requests that completed in it
    output_tokens: float
    errors: int

    @property
    def output_throughput(self) -> float:
        """Output tokens per second over the block."""
        return self.output_tokens / self.duration_s if self.duration_s > 0 else 0.0


def measured_windows(timeline: Timeline, point_index: int) -> range:
    """The windows wholly inside the point's measured span (after its warm-up)."""
    span = next((p for p in timeline.points if p.index == point_index), None)
    if span is None:
        return range(0)
    first = math.ceil(span.measure_s / timeline.step - 1e-9)
    end = math.floor(span.end_s / timeline.step + 1e-9)
    return range(max(0, first), min(timeline.windows, max(first, end)))


def blocks(
    timeline: Timeline, point_index: int, block_seconds: float = DEFAULT_BLOCK_SECONDS
) -> list[Block]:
    """The point's measured span cut into whole blocks of ``block_seconds`` (rounded to whole
    windows, at least one window each). Empty when the point has no whole block."""
    if block_seconds <= 0:
        raise ValueError("block_seconds must be > 0")
    size = max(1, round(block_seconds / timeline.step))
    span = measured_windows(timeline, point_index)
    completed = timeline.get("client.completed")
    tokens = timeline.get("client.output_tokens")
    errors = timeline.get("client.errors")
    out = []
    for first in range(span.start, span.stop - size + 1, size):
        cut = range(first, first + size)
        out.append(
            Block(
                point_index=point_index,
                first_window=first,
                windows=size,
                start_s=timeline.t(first),
                duration_s=size * timeline.step,
                completed=int(sum(completed[w] or 0 for w in cut)),
                output_tokens=float(sum(tokens[w] or 0 for w in cut)),
                errors=int(sum(errors[w] or 0 for w in cut)),
            )
        )
    return out
