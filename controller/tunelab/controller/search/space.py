"""``search:`` in an experiment spec: the space, objective, SLOs, load, budget and strategy,
validated into a frozen :class:`SearchSpec` (docs/search.md documents every key).

A parameter is a dotted spec path (as in ``matrix:``) with a list of values, an integer range
``{int: [lo, hi], log: true}`` or a float range ``{float: [lo, hi]}``. The space's first point
(each list's first value, each range's low end) is the default the answer is compared with.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tunelab.analysis.metrics import LATENCIES, UnknownMetric, lookup
from tunelab.controller.spec.errors import SpecIssue
from tunelab.controller.spec.schema import Checker

SEARCH_KEYS = {"space", "objective", "slo", "load", "budget", "strategy", "eta", "parallel",
               "seed", "grid_points", "implied_oom", "margin", "noise"}  # fmt: skip
STRATEGIES = ("grid", "random", "successive-halving", "tpe")
# the search's objectives and SLOs are metrics of the one catalogue (tunelab.analysis.metrics):
# an objective is a throughput, goodput, tokens per joule or a latency; an SLO a latency limit
OBJECTIVE_UNITS = ("tok/s", "req/s", "tok/J", "ms")
SLO_KEYS = tuple(m.aliases[0] for m in LATENCIES)  # as the search spells them: tpot_p99_ms
MAX_TRIALS = 10_000
# a space's size bounds the work of validating it (2 renders per axis value): more axes than a
# search can explore are refused before any is rendered (issue 36.2)
MAX_AXES = 64
MAX_AXIS_VALUES = 256
# the TPE sampler's per-ask seeds are seed * SEED_STRIDE + ask, kept inside numpy's 2**32 - 1
SEED_STRIDE = 1_000_003
MAX_SEED = 2**32 - 1
CONFIRM_LAUNCHES = 6  # the race's default: launches per contender at the incumbent's load
MAX_CONFIRM = 100
MARGIN = 0.02  # two configurations within +-2 % of each other tie: either serves
MAX_FIND = 100_000
# flags whose larger values spread the model over more GPUs or move memory off them: an OOM at
# a value says nothing of larger ones (any flag ending in "parallel-size" is one too)
MEMORY_RELIEVING_FLAGS = frozenset(
    {"--tp", "--pp", "--dp", "--ep", "--cp", "--tp-size", "--pp-size", "--dp-size", "--ep-size",
     "--moe-ep-size", "--cpu-offload-gb", "--swap-space", "--nnodes", "--num-gpus"}
)  # fmt: skip


@dataclass(frozen=True)
class Param:
    """One axis: ``values`` for a list, else a range of ``kind`` int or float."""

    path: str
    kind: str  # "choice", "int", "float"
    values: tuple[Any, ...] = ()
    low: float = 0.0
    high: float = 0.0
    log: bool = False

    @property
    def default(self) -> Any:
        if self.kind == "choice":
            return self.values[0]
        return int(self.low) if self.kind == "int" else self.low

    @property
    def ordered_int(self) -> bool:
        """An integer axis, where "larger" means something (the implied-OOM skip)."""
        if self.kind == "int":
            return True
        return self.kind == "choice" and all(
            isinstance(v, int) and not isinstance(v, bool) for v in self.values
        )

    def grid(self, points: int) -> tuple[Any, ...]:
        """The values a grid visits: a list's own, a range's ``points`` spread over it."""
        if self.kind == "choice":
            return self.values
        n = max(2, points)
        if self.log:
            lo, hi = math.log(self.low), math.log(self.high)
            raw = [math.exp(lo + (hi - lo) * i / (n - 1)) for i in range(n)]
        else:
            raw = [self.low + (self.high - self.low) * i / (n - 1) for i in range(n)]
        if self.kind == "int":
            return tuple(dict.fromkeys(round(v) for v in raw))
        return tuple(dict.fromkeys(round(v, 6) for v in raw))  # a narrow range: one point once

    def to_dict(self) -> dict[str, Any]:
        if self.kind == "choice":
            return {"path": self.path, "values": list(self.values)}
        return {"path": self.path, self.kind: [self.low, self.high], "log": self.log}


def ask_seed(seed: int, asked: int) -> int:
    """The seed of a sampler built for the ``asked``-th proposal: deterministic in the search's
    seed and the history, and inside numpy's range (0 .. 2**32 - 1) for every seed accepted."""
    return (seed * SEED_STRIDE + asked) % (MAX_SEED + 1)


def default_oom_axis(param: Param) -> bool:
    """Whether an OOM at a value of ``param`` implies OOM at its larger values (the others
    equal) when the spec names no ``implied_oom``: an integer axis, unless a larger value
    relieves each GPU's memory (more parallelism, more offload, more GPUs or nodes)."""
    if not param.ordered_int:
        return False
    flag = param.path.rsplit(".", 1)[-1]
    return not (flag.endswith("parallel-size") or flag in MEMORY_RELIEVING_FLAGS)


@dataclass(frozen=True)
class Load:
    """``find`` (bisection to the largest load meeting every SLO) or a fixed list."""

    axis: str  # "concurrency" or "rate"
    find: bool
    maximum: float = 0.0
    values: tuple[float, ...] = ()
    plateau: float = 0.0  # find: stop where two doublings in a row each gain less than this

    def to_dict(self) -> dict[str, Any]:
        if self.find:
            found = {self.axis: "find", "max": self.maximum}
            return {**found, "plateau": self.plateau} if self.plateau else found
        return {self.axis: list(self.values)}


@dataclass(frozen=True)
class SearchSpec:
    space: tuple[Param, ...]
    objective: str
    maximize: bool
    slo: dict[str, float]
    load: Load
    strategy: str
    max_trials: int
    max_seconds: float = 0.0  # 0: no wall-clock budget
    eta: int = 3
    parallel: int = 4
    seed: int = 0
    grid_points: int = 4
    implied_oom: tuple[str, ...] | None = None  # None: the default rule (default_oom_axis)
    confirm_launches: int = CONFIRM_LAUNCHES  # the race: launches per contender (0: no race)
    confirm_seconds: float = 0.0  # the race: GPU-seconds it may spend (0: launches only)
    margin: float = MARGIN  # the race's tie margin, relative
    noise: tuple[float, float] | None = None  # search.noise: (launch CV, within CV), declared
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def default_params(self) -> dict[str, Any]:
        return {p.path: p.default for p in self.space}

    @property
    def oom_axes(self) -> tuple[str, ...]:
        """The axes along which an OOM implies OOM at larger values (the others equal)."""
        if self.implied_oom is not None:
            return self.implied_oom
        return tuple(p.path for p in self.space if default_oom_axis(p))

    def to_dict(self) -> dict[str, Any]:
        return {
            "space": [p.to_dict() for p in self.space],
            "objective": {("maximize" if self.maximize else "minimize"): self.objective},
            "slo": dict(self.slo),
            "load": self.load.to_dict(),
            "strategy": self.strategy,
            "budget": {
                "trials": self.max_trials,
                "duration_seconds": self.max_seconds,
                "confirm_launches": self.confirm_launches,
                "confirm_gpu_seconds": self.confirm_seconds,
            },
            "margin": self.margin,
            "noise": None
            if self.noise is None
            else {"launch": self.noise[0], "within": self.noise[1]},
            "eta": self.eta,
            "parallel": self.parallel,
            "seed": self.seed,
            "grid_points": self.grid_points,
            "implied_oom": None if self.implied_oom is None else list(self.implied_oom),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SearchSpec:
        space = []
        for p in data["space"]:
            if "values" in p:
                space.append(Param(p["path"], "choice", tuple(p["values"])))
            else:
                kind = "int" if "int" in p else "float"
                space.append(Param(p["path"], kind, (), p[kind][0], p[kind][1], p["log"]))
        ((direction, objective),) = data["objective"].items()
        load = data["load"]
        axis = "concurrency" if "concurrency" in load else "rate"
        find = load[axis] == "find"
        return cls(
            space=tuple(space),
            objective=objective,
            maximize=direction == "maximize",
            slo=dict(data["slo"]),
            load=Load(
                axis,
                find,
                load.get("max", 0.0),
                () if find else tuple(load[axis]),
                load.get("plateau", 0.0),
            ),
            strategy=data["strategy"],
            max_trials=data["budget"]["trials"],
            max_seconds=data["budget"]["duration_seconds"],
            eta=data["eta"],
            parallel=data["parallel"],
            seed=data["seed"],
            grid_points=data["grid_points"],
            # absent in searches stored before the key existed: the default rule
            implied_oom=None if data.get("implied_oom") is None else tuple(data["implied_oom"]),
            # absent in searches stored before the race existed: the defaults
            confirm_launches=data["budget"].get("confirm_launches", CONFIRM_LAUNCHES),
            confirm_seconds=data["budget"].get("confirm_gpu_seconds", 0.0),
            margin=data.get("margin", MARGIN),
            noise=None
            if data.get("noise") is None
            else (data["noise"]["launch"], data["noise"]["within"]),
        )


def _param(check: Checker, path: str, raw: Any) -> Param | None:
    where = f"search.space.{path}"
    if isinstance(raw, list):
        if not raw:
            check.fail(where, "must be a non-empty list of values")
            return None
        if len(raw) > MAX_AXIS_VALUES:
            check.fail(where, f"lists {len(raw)} values; at most {MAX_AXIS_VALUES} per axis")
            return None
        if len({repr(v) for v in raw}) != len(raw):
            check.fail(where, "lists a value twice")
        return Param(path, "choice", tuple(raw))
    if not isinstance(raw, Mapping):
        check.fail(where, "must be a list of values, {int: [lo, hi]} or {float: [lo, hi]}")
        return None
    given = check.mapping(raw, where, {"int", "float", "log"})
    kinds = [k for k in ("int", "float") if k in given]
    if len(kinds) != 1:
        check.fail(where, "give exactly one of int: [lo, hi] or float: [lo, hi]")
        return None
    kind = kinds[0]
    bounds = given[kind]
    if not isinstance(bounds, list) or len(bounds) != 2:
        check.fail(f"{where}.{kind}", "must be [low, high]")
        return None
    read = check.integer if kind == "int" else check.number
    low, high = (read(b, f"{where}.{kind}[{i}]") for i, b in enumerate(bounds))
    log = check.boolean(given.get("log", False), f"{where}.log")
    if not low < high:
        check.fail(f"{where}.{kind}", f"low must be below high, got [{low}, {high}]")
    if log and low <= 0:
        check.fail(f"{where}.log", "a log range must start above 0")
    return Param(path, kind, (), float(low), float(high), log)


def _implied_oom(check: Checker, raw: Any, params: list[Param]) -> tuple[str, ...]:
    """``search.implied_oom``: the integer axes of the space along which an OOM is implied."""
    if isinstance(raw, str) or not isinstance(raw, list):
        check.fail("search.implied_oom", "must be a list of paths of the space ([] for none)")
        return ()
    axes = {p.path: p for p in params}
    out: list[str] = []
    for i, path in enumerate(raw):
        where = f"search.implied_oom[{i}]"
        if not isinstance(path, str) or path not in axes:
            check.fail(where, f"{path!r} is not a path of search.space")
        elif not axes[path].ordered_int:
            check.fail(where, f"{path} is not an integer axis (an int range or a list of ints)")
        elif path in out:
            check.fail(where, f"lists {path} twice")
        else:
            out.append(path)
    return tuple(out)


def _confirm(check: Checker, raw: Any) -> tuple[int, float]:
    """``search.budget.confirm``: launches per contender of the race (``6``), a GPU time
    (``2h``: the race launches as the allocation says until it is spent), or
    ``{launches: 6, gpu_time: 2h}`` (either may be given)."""
    where = "search.budget.confirm"
    if isinstance(raw, str) and not raw.strip().isdigit():
        refused = len(check.issues)
        seconds = check.duration(raw, where)
        if seconds <= 0 and len(check.issues) == refused:
            check.fail(where, f"a GPU time must be above 0, got {raw!r}")
        return MAX_CONFIRM, seconds
    if not isinstance(raw, Mapping):
        launches = check.integer(raw, where, 0)
        if launches > MAX_CONFIRM:
            check.fail(where, f"must be <= {MAX_CONFIRM}, got {launches}")
        return launches, 0.0
    given = check.mapping(raw, where, {"launches", "gpu_time"})
    if not given:
        check.fail(where, "give launches: N and/or gpu_time: DURATION")
    launches = check.integer(given.get("launches", MAX_CONFIRM), f"{where}.launches", 0)
    if launches > MAX_CONFIRM:
        check.fail(f"{where}.launches", f"must be <= {MAX_CONFIRM}, got {launches}")
    seconds = check.duration(given["gpu_time"], f"{where}.gpu_time") if "gpu_time" in given else 0.0
    return launches, seconds


def _noise(check: Checker, raw: Any) -> tuple[float, float] | None:
    """``search.noise: {launch: 1%, within: 5%}``: the variance components declared (each a CV),
    in place of the remembered noise profile (tunelab.analysis.noise)."""
    given = check.mapping(raw, "search.noise", {"launch", "within"})
    if set(given) != {"launch", "within"}:
        check.fail("search.noise", "give launch: CV and within: CV (e.g. launch: 1%, within: 5%)")
        return None
    launch = check.fraction(given["launch"], "search.noise.launch", 1.0, zero=True)
    within = check.fraction(given["within"], "search.noise.within", 1.0)
    return None if launch is None or within is None else (launch, within)


def _margin(check: Checker, raw: Any) -> float:
    """``search.margin``: the tie margin, a fraction (0.02) or a percentage ("2%")."""
    value = check.fraction(raw, "search.margin", 0.5)
    return MARGIN if value is None else value


def _load(check: Checker, raw: Any) -> Load:
    load = check.mapping(raw, "search.load", {"concurrency", "rate", "max", "plateau"})
    axes = [a for a in ("concurrency", "rate") if a in load]
    if len(axes) != 1:
        check.fail("search.load", "give concurrency or rate (find, or a list of values)")
        return Load("concurrency", False, 0.0, (1.0,))
    axis = axes[0]
    value = load[axis]
    if value == "find":
        if "max" not in load:
            check.fail("search.load.max", "is required with find (the largest load to try)")
        maximum = check.number(load.get("max", 1), "search.load.max", 1.0)
        if maximum > MAX_FIND:
            check.fail("search.load.max", f"must be <= {MAX_FIND}, got {maximum:g}")
        if axis == "concurrency" and maximum != int(maximum):
            check.fail("search.load.max", "a concurrency is an integer")
        knee = 0.0
        if "plateau" in load:
            knee = check.fraction(load["plateau"], "search.load.plateau", 1.0) or 0.0
        return Load(axis, True, maximum, (), knee)
    for key in ("max", "plateau"):
        if key in load:
            check.fail(f"search.load.{key}", "goes with find only")
    values = value if isinstance(value, list) else [value]
    if not values:
        check.fail(f"search.load.{axis}", "must be find or a non-empty list")
    read = check.integer if axis == "concurrency" else check.number
    out = tuple(float(read(v, f"search.load.{axis}[{i}]", 1)) for i, v in enumerate(values))
    if axis == "rate" and len(out) > 1:
        check.fail("search.load.rate", "one fixed rate per trial (or rate: find)")
    return Load(axis, False, 0.0, out)


def parse_search(raw: Any, prefix: str = "") -> tuple[SearchSpec | None, list[SpecIssue]]:
    """Validate a ``search:`` mapping; returns (spec, issues): spec is None when issues."""
    check = Checker(prefix)
    doc = check.mapping(raw, "search", SEARCH_KEYS)
    if not isinstance(raw, Mapping):
        return None, check.issues
    for key in ("space", "objective", "load", "budget"):
        if key not in doc:
            check.fail(f"search.{key}", "is required")
    space_raw = doc.get("space", {})
    params: list[Param] = []
    if not isinstance(space_raw, Mapping) or not space_raw:
        check.fail("search.space", "must map dotted field paths to values or ranges")
    elif len(space_raw) > MAX_AXES:
        check.fail("search.space", f"has {len(space_raw)} axes; at most {MAX_AXES}")
    else:
        for path, values in space_raw.items():
            if str(path).split(".")[0] not in ("server", "benchmark"):
                check.fail(f"search.space.{path}", "must start with server. or benchmark.")
                continue
            param = _param(check, str(path), values)
            if param is not None:
                params.append(param)
    objective, maximize = "output_throughput", True
    given = check.mapping(doc.get("objective", {}), "search.objective", {"maximize", "minimize"})
    if len(given) != 1:
        check.fail("search.objective", "give maximize: METRIC or minimize: METRIC")
    else:
        ((direction, name),) = given.items()
        objective, maximize = (
            check.string(name, f"search.objective.{direction}"),
            (direction == "maximize"),
        )
        _objective(check, objective, maximize, f"search.objective.{direction}")
    slo_raw = check.mapping(doc.get("slo", {}), "search.slo", set(SLO_KEYS))
    slo = {k: check.number(v, f"search.slo.{k}", 0.0) for k, v in slo_raw.items()}
    for key, limit in slo.items():
        check.slo_limit(limit, f"search.slo.{key}")
    load = _load(check, doc.get("load", {}))
    if load.find and not slo:
        check.fail("search.load", "find needs an slo: the largest load that meets it is found")
    budget = check.mapping(
        doc.get("budget", {}), "search.budget", {"trials", "duration", "confirm"}
    )
    if "trials" not in budget:
        check.fail("search.budget.trials", "is required (the most trials to launch)")
    trials = check.integer(budget.get("trials", 1), "search.budget.trials", 1)
    if trials > MAX_TRIALS:
        check.fail("search.budget.trials", f"must be <= {MAX_TRIALS}, got {trials}")
    seconds = (
        check.duration(budget["duration"], "search.budget.duration")
        if "duration" in budget
        else 0.0
    )
    confirm_launches, confirm_seconds = _confirm(check, budget.get("confirm", CONFIRM_LAUNCHES))
    margin = _margin(check, doc.get("margin", MARGIN))
    noise = _noise(check, doc["noise"]) if "noise" in doc else None
    strategy = check.string(doc.get("strategy", "grid"), "search.strategy")
    if strategy not in STRATEGIES:
        check.fail("search.strategy", f"must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if strategy == "grid" and any(p.kind != "choice" for p in params) and "grid_points" not in doc:
        pass  # ranges are spread over grid_points values (default 4)
    eta = check.integer(doc.get("eta", 3), "search.eta", 2)
    parallel = check.integer(doc.get("parallel", 4), "search.parallel", 1)
    seed = check.integer(doc.get("seed", 0), "search.seed", 0)
    if seed > MAX_SEED:
        check.fail("search.seed", f"must be <= {MAX_SEED}, got {seed}")
    grid_points = check.integer(doc.get("grid_points", 4), "search.grid_points", 2)
    implied = _implied_oom(check, doc["implied_oom"], params) if "implied_oom" in doc else None
    if check.issues:
        return None, check.issues
    spec = SearchSpec(
        space=tuple(params),
        objective=objective,
        maximize=maximize,
        slo=slo,
        load=load,
        strategy=strategy,
        max_trials=trials,
        max_seconds=seconds,
        eta=min(eta, 100),
        parallel=min(parallel, 1024),
        seed=seed,
        grid_points=min(grid_points, 100),
        implied_oom=implied,
        confirm_launches=confirm_launches,
        confirm_seconds=confirm_seconds,
        margin=margin,
        noise=noise,
    )
    return spec, []


def _objective(check: Checker, name: str, maximize: bool, path: str) -> None:
    """An objective the catalogue knows, of a kind a search optimises, asked for in the
    direction the catalogue says is better."""
    try:
        metric = lookup(name)
    except UnknownMetric as exc:
        check.fail(path, str(exc))
        return
    if metric.unit not in OBJECTIVE_UNITS:
        check.fail(
            path, f"{name} is not a search objective (a throughput, goodput, tok/J or a latency)"
        )
    elif metric.higher_is_better != maximize:
        better = "maximize" if metric.higher_is_better else "minimize"
        check.fail(path, f"{name} is better {metric.direction}: {better} it")
