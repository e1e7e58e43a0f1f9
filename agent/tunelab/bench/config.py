"""What one benchmark sweep does: a frozen, validated :class:`BenchConfig`.

It travels to the bench process as JSON (``to_dict`` / ``from_dict``). Validation names the field
that is wrong, in the proto's spelling (``concurrency[2]``); the agent's wire layer prefixes
``benchmark.`` and turns it into its own ``InvalidSpec`` (this package imports no daemon).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tunelab.v1 import run_pb2

APIS = ("completions", "chat")
PRESETS = ("", "decode")
FIND_AXES = ("concurrency", "rate")
# the point fields a load search may bound (its SLOs): latencies in ms, lower is better
FIND_SLO_FIELDS = ("p99_ttft_ms", "median_ttft_ms", "p99_tpot_ms", "median_tpot_ms",
                   "p99_itl_ms", "median_itl_ms", "p99_e2el_ms", "median_e2el_ms")  # fmt: skip
DECODE_OUTPUT_LEN = 512
DECODE_INPUT_LEN = 32
DECODE_REQUESTS = 3


class BenchConfigError(ValueError):
    """A setting is wrong; ``field`` is its name as in the BuiltinBenchmark message."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


@dataclass(frozen=True)
class Point:
    """One sweep point: a closed loop at ``concurrency`` or an open loop at ``request_rate``."""

    index: int
    concurrency: int  # 0 for an open loop
    request_rate: float  # 0 for a closed loop
    requests: int  # 0 when bounded by duration
    duration_seconds: float


@dataclass(frozen=True)
class BenchConfig:
    url: str
    model: str = ""  # empty: the first id of GET /v1/models (as vLLM and guidellm do)
    api: str = "completions"
    concurrency: tuple[int, ...] = ()
    request_rate: float = 0.0
    burstiness: float = 1.0
    requests: int = 0  # per point; 0 with no duration = 5 x concurrency (at least 10)
    duration_seconds: float = 0.0
    input_len: int = 0
    output_len: int = 0
    range_ratio: float = 0.0
    warmup: int = 0
    ignore_eos: bool = True
    temperature: float = 0.0
    send_temperature: bool = True  # False: leave it to the server's default (vLLM's bench)
    tokenizer: str = ""  # a tokenizer.json (or its folder): prompts of exact token length
    save_detailed: bool = False  # per-request arrays in the result, as vllm's --save-detailed
    slo_ttft_ms: float = 0.0
    slo_tpot_ms: float = 0.0
    seed: int = 0
    preset: str = ""
    label: str = ""
    request_timeout_s: float = 600.0  # a request fails as "timeout" after this long without a byte
    continuous_usage: bool = True  # ask for per-chunk usage (vLLM/SGLang continuous_usage_stats)
    # load search: "" (the sweep above), "concurrency" or "rate": find the largest load up to
    # find_max whose point meets every find_slo (point field -> upper limit), loadsearch.py
    find_axis: str = ""
    find_max: float = 0.0
    find_slo: dict[str, float] = field(default_factory=dict)
    # self-check: the client marks a point saturated when its event loop runs late (mean or p99)
    # or its single thread uses more than this share of a core
    max_mean_loop_lag_ms: float = 2.0
    max_loop_lag_ms: float = 20.0
    max_client_cpu: float = 0.85
    # ...and starved when it waited for a CPU (run queue) more than this share of the time
    max_client_runqueue: float = 0.05

    def __post_init__(self) -> None:
        object.__setattr__(self, "concurrency", tuple(self.concurrency))

    # construction -----------------------------------------------------------------------------
    def with_preset(self) -> BenchConfig:
        """Fill what the preset implies (``decode``: one stream, long output) and validate."""
        cfg = self
        if cfg.preset == "decode":
            cfg = replace(
                cfg,
                concurrency=(1,),
                request_rate=0.0,
                input_len=cfg.input_len or DECODE_INPUT_LEN,
                output_len=cfg.output_len or DECODE_OUTPUT_LEN,
                requests=cfg.requests or (0 if cfg.duration_seconds else DECODE_REQUESTS),
                warmup=cfg.warmup or 1,
            )
        cfg.validate()
        return cfg

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["concurrency"] = list(self.concurrency)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise BenchConfigError(unknown[0], "unknown setting")
        values = dict(data)
        values["concurrency"] = tuple(values.get("concurrency", ()))
        return cls(**values).with_preset()

    @classmethod
    def from_builtin_pb(cls, pb: run_pb2.BuiltinBenchmark, default_url: str) -> BenchConfig:
        """The proto's settings with defaults filled; raises :class:`BenchConfigError`."""
        return cls(
            url=pb.url or default_url,
            model=pb.model,
            api=pb.api or "completions",
            concurrency=tuple(pb.concurrency),
            request_rate=pb.request_rate,
            burstiness=pb.burstiness or 1.0,
            requests=pb.requests,
            duration_seconds=pb.duration_seconds,
            input_len=pb.input_len,
            output_len=pb.output_len,
            range_ratio=pb.range_ratio,
            warmup=pb.warmup,
            ignore_eos=pb.ignore_eos if pb.HasField("ignore_eos") else True,
            temperature=pb.temperature if pb.HasField("temperature") else 0.0,
            slo_ttft_ms=pb.slo_ttft_ms,
            slo_tpot_ms=pb.slo_tpot_ms,
            seed=pb.seed,
            preset=pb.preset,
            find_axis=pb.find_axis,
            find_max=pb.find_max,
            find_slo=dict(pb.find_slo),
        ).with_preset()

    # checks -----------------------------------------------------------------------------------
    def validate(self) -> None:
        def check(ok: bool, field: str, problem: str) -> None:
            if not ok:
                raise BenchConfigError(field, problem)

        check(self.url.startswith(("http://", "https://")), "url", "must be an http(s) URL")
        check(not any(c.isspace() for c in self.model), "model", "must not contain whitespace")
        check(self.api in APIS, "api", f"must be one of {', '.join(APIS)}")
        check(self.preset in PRESETS, "preset", "must be empty or 'decode'")
        for i, c in enumerate(self.concurrency):
            check(1 <= c <= 100_000, f"concurrency[{i}]", f"must be between 1 and 100000, got {c}")
        rate_ok = math.isfinite(self.request_rate) and self.request_rate >= 0
        check(rate_ok, "request_rate", "must be a finite number >= 0")
        if self.find_axis:
            check(self.find_axis in FIND_AXES, "find_axis", "must be concurrency or rate")
            check(
                not self.concurrency and not self.request_rate,
                "find_axis",
                "a load search sets its own loads: leave concurrency and request_rate empty",
            )
            check(1 <= self.find_max <= 100_000, "find_max", "must be between 1 and 100000")
            check(bool(self.find_slo), "find_slo", "a load search needs at least one SLO")
            for name, limit in self.find_slo.items():
                check(name in FIND_SLO_FIELDS, f"find_slo.{name}", "unknown point field")
                check(math.isfinite(limit) and limit > 0, f"find_slo.{name}", "must be > 0")
        else:
            check(
                bool(self.concurrency) != (self.request_rate > 0),
                "concurrency",
                "give either a concurrency list (closed loop) or a request_rate (open loop)",
            )
        check(self.burstiness > 0, "burstiness", "must be > 0 (1 = Poisson)")
        check(self.requests >= 0, "requests", "must be >= 0")
        check(
            math.isfinite(self.duration_seconds) and self.duration_seconds >= 0,
            "duration_seconds",
            "must be >= 0",
        )
        check(
            not (self.requests and self.duration_seconds),
            "requests",
            "give requests or duration_seconds per point, not both",
        )
        check(self.input_len >= 1, "input_len", "must be >= 1")
        check(self.output_len >= 1, "output_len", "must be >= 1")
        check(0 <= self.range_ratio < 1, "range_ratio", "must be in [0, 1)")
        check(self.warmup >= 0, "warmup", "must be >= 0")
        check(self.temperature >= 0, "temperature", "must be >= 0")
        check(self.slo_ttft_ms >= 0, "slo_ttft_ms", "must be >= 0")
        check(self.slo_tpot_ms >= 0, "slo_tpot_ms", "must be >= 0")
        check(self.request_timeout_s > 0, "request_timeout_s", "must be > 0")

    # the sweep --------------------------------------------------------------------------------
    def point_at(self, index: int, load: float) -> Point:
        """One point of a load search at ``load`` (a concurrency or a rate)."""
        if self.find_axis == "rate":
            n = self.requests or (0 if self.duration_seconds else max(10, math.ceil(30 * load)))
            return Point(index, 0, load, n, self.duration_seconds)
        c = int(load)
        n = self.requests or (0 if self.duration_seconds else max(10, 5 * c))
        return Point(index, c, 0.0, n, self.duration_seconds)

    def points(self) -> list[Point]:
        """The sweep points, in order, with the per-point request count filled in (none for a
        load search: it chooses each load from the last point's figures)."""
        if self.find_axis:
            return []
        if self.request_rate > 0:
            n = self.requests or (
                0 if self.duration_seconds else max(10, math.ceil(30 * self.request_rate))
            )
            return [Point(0, 0, self.request_rate, n, self.duration_seconds)]
        out = []
        for i, c in enumerate(self.concurrency):
            n = self.requests or (0 if self.duration_seconds else max(10, 5 * c))
            out.append(Point(i, c, 0.0, n, self.duration_seconds))
        return out

    @property
    def endpoint(self) -> str:
        base = self.url.rstrip("/").removesuffix("/v1")
        return base + ("/v1/chat/completions" if self.api == "chat" else "/v1/completions")
