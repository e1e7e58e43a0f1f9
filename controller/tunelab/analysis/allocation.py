"""Where a race spends GPU time: more blocks on a running launch, or a new launch.

A contender's mean is known to ``between / n + within / (n m)`` (n launches of m blocks,
variance components from ``variance``). A block costs little and shrinks only the within part;
a launch costs its load (minutes for a large model on 8 GPUs) and shrinks both. For a fixed
budget the variance is smallest at the nested-design optimum

    m* = sqrt(launch cost / block cost x within / between)

blocks per launch (Cochran, *Sampling Techniques*, two-stage sampling): negligible launch noise
and expensive launches give long launches; large launch noise and cheap launches, many short
ones.

Each round, per contender, :func:`plan_round` takes the step that shrinks the half-width of its
contrast with the reference (the best; the best itself against its closest challenger) the most
per GPU-second: extend its running launch by ``CHUNK`` blocks, or a new launch of ``m*`` blocks.
The half-width counts the degrees of freedom as the judge will (``variance.degrees``): while
blocks may not count as launches, only a new launch adds one, so a race with no prior and
little launch evidence launches; with a prior that shows launch noise negligible, it extends.
New launches are ordered A B B A ... (:func:`interleave`), so a drift of the machine falls on
both sides alike. :func:`needed` runs the same rule forward to say what an undecided race
would need, in GPU-seconds and launches.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from tunelab.analysis.intervals import CONFIDENCE, t_quantile
from tunelab.analysis.variance import Components, Prior, degrees, spread

MIN_BLOCKS = 3  # a launch measures at least this many blocks (a spread within it)
MAX_BLOCKS = 30  # ... and at most this many in one step
CHUNK = 3  # blocks added to a running launch in one step
MAX_PLANNED_STEPS = 200  # plan() looks this many steps ahead at most


@dataclass(frozen=True)
class Costs:
    """GPU-seconds (wall seconds where no GPU is allocated): a launch's load (load seconds x
    GPUs) and one block's measurement."""

    launch: float
    block: float

    def __post_init__(self) -> None:
        if self.launch < 0 or self.block <= 0:
            raise ValueError(f"costs must be launch >= 0 and block > 0, got {self}")


@dataclass(frozen=True)
class Side:
    """A contender: the blocks of each of its launches, and whether its last launch is up."""

    config: str
    blocks: tuple[int, ...] = ()
    running: bool = False


@dataclass(frozen=True)
class Step:
    config: str
    extend: bool  # True: more blocks on the running launch; False: a new launch
    blocks: int

    def cost(self, costs: Costs) -> float:
        return self.blocks * costs.block + (0.0 if self.extend else costs.launch)


def optimal_blocks(c: Components, costs: Costs) -> int:
    """The nested-design optimum, within ``[MIN_BLOCKS, MAX_BLOCKS]``."""
    if c.between <= 0.0:
        return MAX_BLOCKS
    m = math.sqrt(costs.launch / costs.block * c.within / c.between)
    return max(MIN_BLOCKS, min(MAX_BLOCKS, round(m)))


def planning(c: Components, guess: Prior) -> Components:
    """The components to plan with: the fitted ones, with ``guess``'s between variance while
    no launch evidence stands behind it (one launch each and no prior: between reads 0, which
    would plan endless blocks)."""
    if c.df_launch > 0:
        return c
    return dataclasses.replace(c, between=guess.between)


def half_width(
    c: Components, a: Sequence[int], b: Sequence[int], confidence: float = CONFIDENCE
) -> float:
    """The log half-width of the contrast of two contenders with these launches, at the
    components; infinite while it cannot be judged (no launch degree of freedom)."""
    x, y = spread(a, c.between, c.within), spread(b, c.between, c.within)
    if x is None or y is None:
        return math.inf
    var = x.var + y.var
    df = degrees(c, x.d_between + y.d_between, x.d_within + y.d_within, var)
    if df < 1.0:
        return math.inf
    return t_quantile(0.5 + confidence / 2.0, df) * math.sqrt(var)


def _after(c: Components, side: Side, step: Step) -> tuple[Components, tuple[int, ...]]:
    if step.extend:
        return c, (*side.blocks[:-1], side.blocks[-1] + step.blocks)
    more = dataclasses.replace(c, df_between=c.df_between + 1 if side.blocks else c.df_between)
    return more, (*side.blocks, step.blocks)


def choose(
    c: Components,
    side: Side,
    other: Side,
    costs: Costs,
    confidence: float = CONFIDENCE,
) -> Step:
    """One contender's step against ``other``: the most shrinkage of the contrast's half-width
    per GPU-second, among more blocks on its running launch and a new launch of the optimum's
    length or of the shortest (a first launch is of the optimum's length)."""
    m = optimal_blocks(c, costs)
    launch = Step(side.config, False, m)
    if not side.blocks:
        return launch
    # a launch of the optimum's length, or a short one: at a between variance estimated 0 from
    # few launches the optimum is long, yet only another launch adds a degree of freedom
    options = [launch, Step(side.config, False, MIN_BLOCKS)]
    if side.running and side.blocks[-1] + CHUNK <= MAX_BLOCKS:
        options.insert(0, Step(side.config, True, CHUNK))
    now = half_width(c, side.blocks, other.blocks, confidence)
    best, gain = launch, -math.inf
    for step in options:
        after, blocks = _after(c, side, step)
        h = half_width(after, blocks, other.blocks, confidence)
        # nothing judged yet: whichever makes it judgeable, narrowest
        rate = -h if math.isinf(now) else (now - h) / step.cost(costs)
        if rate > gain:
            best, gain = step, rate
    return best


def plan_round(
    c: Components,
    sides: Sequence[Side],
    reference: str,
    costs: Costs,
    confidence: float = CONFIDENCE,
) -> list[Step]:
    """Each contender's step this round: a challenger's against the reference, the
    reference's against its widest contrast (the one furthest from decided)."""
    by = {s.config: s for s in sides}
    ref = by[reference]
    steps = []
    for side in sides:
        if side.config == reference:
            others = [s for s in sides if s.config != reference]
            if not others:
                continue
            widest = max(others, key=lambda o: half_width(c, ref.blocks, o.blocks, confidence))
            steps.append(choose(c, ref, widest, costs, confidence))
        else:
            steps.append(choose(c, side, ref, costs, confidence))
    return steps


def interleave(steps: Sequence[Step], round_number: int) -> list[Step]:
    """Extensions first (their server is up), then the new launches, reversed every other
    round: A B | B A | A B ... so each side's launches meet both ends of a drift."""
    ext = [s for s in steps if s.extend]
    new = [s for s in steps if not s.extend]
    return ext + (new[::-1] if round_number % 2 else new)


def plan(
    c: Components,
    sides: Sequence[Side],
    reference: str,
    target: float,
    costs: Costs,
    confidence: float = CONFIDENCE,
    budget: float = math.inf,
) -> tuple[list[Step], bool]:
    """The steps, by this allocation at these components, until the reference's widest
    contrast has a log half-width within ``target`` (at least one round; a side's later steps
    extend the launch its earlier ones made, so each side's steps run back to back), and
    whether the forecast reaches the target within ``budget`` GPU-seconds and
    ``MAX_PLANNED_STEPS`` steps."""
    by = {s.config: s for s in sides}
    steps: list[Step] = []
    spent = 0.0
    while len(steps) < MAX_PLANNED_STEPS:
        ref = by[reference]
        widest = max(
            (
                half_width(c, ref.blocks, s.blocks, confidence)
                for k, s in by.items()
                if k != reference
            ),
            default=0.0,
        )
        if steps and widest <= target:
            return steps, True
        for step in plan_round(c, list(by.values()), reference, costs, confidence):
            if spent + step.cost(costs) > budget:
                # the last step, cut to the blocks the budget still pays for
                room = budget - spent - (0.0 if step.extend else costs.launch)
                fit = math.floor(room / costs.block + 1e-9)
                if fit >= (1 if step.extend else MIN_BLOCKS):
                    steps.append(dataclasses.replace(step, blocks=min(fit, step.blocks)))
                return steps, False
            side = by[step.config]
            c, blocks = _after(c, side, step)
            by[step.config] = Side(side.config, blocks, True)
            steps.append(step)
            spent += step.cost(costs)
    return steps, False


def needed(
    c: Components,
    a: Side,
    b: Side,
    target: float,
    costs: Costs,
    confidence: float = CONFIDENCE,
) -> tuple[float, int] | None:
    """GPU-seconds and new launches that would bring the contrast's log half-width within
    ``target``; (0, 0) when it is; None when not within reach at this noise."""
    if half_width(c, a.blocks, b.blocks, confidence) <= target:
        return 0.0, 0
    steps, reached = plan(c, [a, b], a.config, target, costs, confidence)
    if not reached:
        return None
    return sum(s.cost(costs) for s in steps), sum(not s.extend for s in steps)
