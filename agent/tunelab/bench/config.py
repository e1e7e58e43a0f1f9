"""What one benchmark sweep does: a frozen, validated :class:`BenchConfig`.

It travels to the bench process as JSON (``to_dict`` / ``from_dict``). Validation names the field
that is wrong, in the proto's spelling (``concurrency[2]``); the agent's wire layer prefixes
``benchmark.`` and turns it into its own ``InvalidSpec`` (this package imports no daemon).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tunelab.v1 import run_pb2

APIS = ("completions", "chat")
DATASETS = ("random", "shared-prefix", "multi-turn", "file", "trace")
DISTRIBUTIONS = ("uniform", "lognormal")
FILE_FORMATS = ("auto", "sharegpt", "chat", "jsonl")
FILE_FILTERS = ("", "vllm")
RAMPS = ("", "linear", "exponential")
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el", "client_queue_time",
                      "e2el_including_client_queue")  # fmt: skip
MAX_TURNS = 1000
PRESETS = ("", "decode")
FIND_AXES = ("concurrency", "rate")
# the point fields a load search may bound (its SLOs): latencies in ms, lower is better
FIND_SLO_FIELDS = ("p99_ttft_ms", "median_ttft_ms", "p99_tpot_ms", "median_tpot_ms",
                   "p99_itl_ms", "median_itl_ms", "p99_e2el_ms", "median_e2el_ms")  # fmt: skip
DECODE_OUTPUT_LEN = 512
DECODE_INPUT_LEN = 32
DECODE_REQUESTS = 3
DEFAULT_PROFILE_MAX_BYTES = 500 * 1000 * 1000
DEFAULT_STOP_TIMEOUT_S = 120.0
MIN_TIMELINE_STEP_S = 0.1
MAX_TIMELINE_STEP_S = 60.0


class BenchConfigError(ValueError):
    """A setting is wrong; ``field`` is its name as in the BuiltinBenchmark message."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


@dataclass(frozen=True)
class Point:
    """One sweep point: a closed loop at ``concurrency`` or an open loop at ``request_rate``
    (or ramping, or at a trace's recorded times), then capped at ``max_concurrency``."""

    index: int
    concurrency: int  # 0 for an open loop
    request_rate: float  # 0 for a closed loop (and a timed trace)
    requests: int  # 0 when bounded by duration; multi-turn: conversations
    duration_seconds: float
    max_concurrency: int = 0  # open loop: at most this many in flight (vLLM's semaphore)


@dataclass(frozen=True)
class BenchConfig:
    url: str
    model: str = ""  # empty: the first id of GET /v1/models (as vLLM and guidellm do)
    api: str = "completions"
    concurrency: tuple[int, ...] = ()
    request_rate: float = 0.0
    rates: tuple[float, ...] = ()  # open loop: one point per rate (request_rate: one)
    max_concurrency: int = 0  # open loop: cap on requests in flight (vLLM --max-concurrency)
    ramp: str = ""  # "" | linear | exponential: the rate rises over the point (vLLM ramp-up)
    ramp_start_rate: float = 0.0
    ramp_end_rate: float = 0.0
    burstiness: float = 1.0
    requests: int = 0  # per point; 0 with no duration = 5 x concurrency (at least 10)
    duration_seconds: float = 0.0
    input_len: int = 0
    output_len: int = 0
    range_ratio: float = 0.0
    # the dataset (tunelab.bench.datasets): what each request asks for
    dataset: str = "random"
    input_dist: str = "uniform"  # uniform (range_ratio) | lognormal (input_sigma)
    output_dist: str = "uniform"
    output_range_ratio: float = -1.0  # < 0: the same as range_ratio
    input_sigma: float = 0.0
    output_sigma: float = 0.0
    prefix_len: int = 0  # random: one shared prefix; shared-prefix: each group's prefix
    prefix_groups: int = 0  # shared-prefix: K distinct prefixes
    turns: int = 0  # multi-turn: turns per conversation
    think_time_s: float = 0.0  # multi-turn: pause after an answer before the next turn
    dataset_path: str = ""  # file / trace
    file_format: str = "auto"  # auto | sharegpt | chat | jsonl
    file_output_len: int = 0  # file: max_tokens for every prompt (vLLM --sharegpt-output-len)
    # file: "" keeps every usable prompt; "vllm" drops ShareGPT conversations by vLLM's length
    # rule (vllm bench serve --dataset-name sharegpt; tunelab.bench.datasets.vllm_length_valid)
    file_filter: str = ""
    # file prompts wrapped in the server's chat template (vLLM's custom dataset; chattemplate.py)
    chat_template: bool = False
    trace_block_size: int = 512  # trace: tokens per hash id (mooncake: 512; vLLM default 16)
    trace_sec_multiplier: float = 0.0  # trace: seconds per timestamp unit (0: ms or s by field)
    trace_timed: bool = True  # trace: send at the recorded times (vLLM --self-timed)
    dataset_sha256: str = ""  # file / trace: refuse a file whose content hash differs
    dataset_file: str = ""  # the name a spec gave the file (the agent resolves dataset_path)
    percentiles: tuple[float, ...] = ()  # extra p<X>_<metric>_ms (vLLM --metric-percentiles)
    percentile_metrics: tuple[str, ...] = ()  # which metrics get them (default ttft,tpot,itl)
    slo_e2el_ms: float = 0.0
    warmup: int = 0
    ignore_eos: bool = True
    temperature: float = 0.0
    send_temperature: bool = True  # False: leave it to the server's default (vLLM's bench)
    tokenizer: str = ""  # a tokenizer.json (or its folder): prompts of exact token length
    tokenizer_file: str = ""  # the name a spec gave it (the agent resolves tokenizer)
    tokenizer_sha256: str = ""  # its content's hash (the agent's, for the provenance)
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
    find_plateau: float = 0.0  # > 0: stop where two doublings in a row each gain less than this
    # self-check: the client marks a point saturated when its event loop runs late (mean or p99)
    # or its single thread uses more than this share of a core
    max_mean_loop_lag_ms: float = 2.0
    max_loop_lag_ms: float = 20.0
    max_client_cpu: float = 0.85
    # ...and starved when it waited for a CPU (run queue) more than this share of the time
    max_client_runqueue: float = 0.05
    warmup_seconds: float = 0.0  # warm-up per point by time; set, it replaces the `warmup` count
    # The engine's profiler around one point's measured window (tunelab.bench.profiling):
    # -1 = none; the window is profile_seconds, or profile_requests requests, or the point.
    profile_point: int = -1
    profile_seconds: float = 0.0
    profile_requests: int = 0
    profile_start_url: str = ""
    profile_stop_url: str = ""
    profile_start_body: str = ""  # JSON text, sent as is
    profile_stop_timeout_s: float = 120.0  # writing a trace can take a while
    # read by the agent, not the load generator: what to record and how much to keep
    profile_activities: tuple[str, ...] = ("cpu", "gpu")
    profile_max_bytes: int = DEFAULT_PROFILE_MAX_BYTES
    reset_cache_url: str = ""  # POSTed before each point and its warm-up
    # asked for (None: the default, on for several points): the agent fills reset_cache_url
    reset_cache: bool | None = None
    # the client's series of the attempt's timeline (tunelab.bench.timeline): the window step
    # (0 = off) and the grid's origin in epoch seconds (0 = the sweep's own start), which the
    # agent sets to its timeline's so the client's windows line up with the engine's and GPUs'
    timeline_step_s: float = 1.0
    timeline_start: float = 0.0

    def __post_init__(self) -> None:
        for name in ("concurrency", "rates", "percentiles", "percentile_metrics"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "profile_activities", tuple(self.profile_activities))

    # construction -----------------------------------------------------------------------------
    def with_preset(self) -> BenchConfig:
        """Fill what the preset implies (``decode``: one stream, long output) and validate."""
        cfg = self
        if cfg.dataset == "shared-prefix" and not cfg.prefix_groups:
            cfg = replace(cfg, prefix_groups=10, prefix_len=cfg.prefix_len or 256)
        if cfg.dataset == "multi-turn" and not cfg.turns:
            cfg = replace(cfg, turns=4)
        if cfg.dataset in ("file", "trace") and not cfg.input_len:
            cfg = replace(cfg, input_len=1)  # the file decides; kept valid for the checks
        if cfg.dataset == "trace" and not cfg.output_len:
            cfg = replace(cfg, output_len=1)
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
        for name in ("concurrency", "rates", "percentiles", "percentile_metrics"):
            data[name] = list(getattr(self, name))
        data["profile_activities"] = list(self.profile_activities)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise BenchConfigError(unknown[0], "unknown setting")
        return cls(**dict(data)).with_preset()

    @classmethod
    def from_builtin_pb(cls, pb: run_pb2.BuiltinBenchmark, default_url: str) -> BenchConfig:
        """The proto's settings with defaults filled; raises :class:`BenchConfigError`."""
        if pb.HasField("dataset"):
            _check_datasets_folder_path(pb.dataset.path)
        profile = pb.profile if pb.HasField("profile") else None
        profiling: dict[str, Any] = {}
        if profile is not None:
            profiling = {
                "profile_point": profile.point,
                "profile_seconds": profile.window_seconds,
                "profile_requests": profile.window_requests,
                "profile_start_url": profile.start_url,
                "profile_stop_url": profile.stop_url,
                "profile_stop_timeout_s": profile.stop_timeout_seconds or DEFAULT_STOP_TIMEOUT_S,
                "profile_activities": tuple(profile.activities) or ("cpu", "gpu"),
                "profile_max_bytes": profile.max_bytes or DEFAULT_PROFILE_MAX_BYTES,
            }
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
            rates=tuple(pb.rates),
            max_concurrency=pb.max_concurrency,
            ramp=pb.ramp,
            ramp_start_rate=pb.ramp_start_rate,
            ramp_end_rate=pb.ramp_end_rate,
            reset_cache=pb.reset_cache if pb.HasField("reset_cache") else None,
            reset_cache_url=pb.reset_cache_url,
            warmup_seconds=pb.warmup_seconds,
            **_dataset_from_pb(pb.dataset) if pb.HasField("dataset") else {},
            **profiling,
            find_axis=pb.find_axis,
            find_max=pb.find_max,
            find_slo=dict(pb.find_slo),
            find_plateau=pb.find_plateau,
            tokenizer=pb.tokenizer,
            timeline_step_s=(
                0.0
                if pb.HasField("timeline") and not pb.timeline
                else pb.timeline_step_seconds or 1.0
            ),
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
        for i, r in enumerate(self.rates):
            check(math.isfinite(r) and r > 0, f"rates[{i}]", "must be a finite number > 0")
        check(not (self.rates and self.request_rate), "rates", "give rates or request_rate")
        check(self.ramp in RAMPS, "ramp", "must be empty, linear or exponential")
        if self.ramp:
            for name in ("ramp_start_rate", "ramp_end_rate"):
                value = getattr(self, name)
                check(math.isfinite(value) and value > 0, name, "must be > 0 with a ramp")
        open_loops = bool(self.rates or self.request_rate or self.ramp or self.timed_trace)
        if self.find_axis:
            check(self.find_axis in FIND_AXES, "find_axis", "must be concurrency or rate")
            check(
                not self.concurrency and not open_loops,
                "find_axis",
                "a load search sets its own loads: leave concurrency, request_rate, rates and "
                "ramp empty",
            )
            check(1 <= self.find_max <= 100_000, "find_max", "must be between 1 and 100000")
            check(bool(self.find_slo), "find_slo", "a load search needs at least one SLO")
            for name, limit in self.find_slo.items():
                check(name in FIND_SLO_FIELDS, f"find_slo.{name}", "unknown point field")
                check(math.isfinite(limit) and limit > 0, f"find_slo.{name}", "must be > 0")
            check(
                math.isfinite(self.find_plateau) and 0 <= self.find_plateau < 1,
                "find_plateau",
                "must be a fraction from 0 (off) to below 1",
            )
        else:
            check(not self.find_plateau, "find_plateau", "goes with find_axis")
            check(
                bool(self.concurrency) != open_loops,
                "concurrency",
                "give either a concurrency list (closed loop) or a request_rate (open loop)",
            )
        check(0 <= self.max_concurrency <= 100_000, "max_concurrency", "must be in [0, 100000]")
        check(
            not (self.ramp and (self.rates or self.request_rate)),
            "ramp",
            "a ramp sets its own rates: leave request_rate out",
        )
        self._validate_dataset(check)
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
        check(
            self.output_len >= 1 or (self.dataset == "file" and self.output_len == 0),
            "output_len",
            "must be >= 1",
        )  # a prompt file: 0 is each row's own output_len (the file is checked when read)
        check(0 <= self.range_ratio < 1, "range_ratio", "must be in [0, 1)")
        check(self.warmup >= 0, "warmup", "must be >= 0")
        check(self.temperature >= 0, "temperature", "must be >= 0")
        check(self.slo_ttft_ms >= 0, "slo_ttft_ms", "must be >= 0")
        check(self.slo_tpot_ms >= 0, "slo_tpot_ms", "must be >= 0")
        check(self.request_timeout_s > 0, "request_timeout_s", "must be > 0")
        check(
            self.timeline_step_s == 0
            or MIN_TIMELINE_STEP_S <= self.timeline_step_s <= MAX_TIMELINE_STEP_S,
            "timeline_step_s",
            f"must be 0 (off) or between {MIN_TIMELINE_STEP_S:g} and {MAX_TIMELINE_STEP_S:g} s",
        )
        check(
            math.isfinite(self.timeline_start) and self.timeline_start >= 0,
            "timeline_start",
            "must be epoch seconds >= 0",
        )
        check(
            math.isfinite(self.warmup_seconds) and self.warmup_seconds >= 0,
            "warmup_seconds",
            "must be >= 0",
        )
        self._validate_profile(check)

    def _validate_profile(self, check: Any) -> None:
        if self.reset_cache_url:
            check(
                self.reset_cache_url.startswith(("http://", "https://", "/")),
                "reset_cache_url",
                "must be an http(s) URL or a path on the server (/reset_prefix_cache)",
            )
        if self.profile_point < 0:
            return
        check(
            self.profile_point < len(self.points()),
            "profile_point",
            f"there are {len(self.points())} points; profile_point counts from 0",
        )
        for name in ("profile_start_url", "profile_stop_url"):
            url = getattr(self, name)
            check(
                not url or url.startswith(("http://", "https://", "/")),
                name,
                "must be an http(s) URL or a path on the server (/start_profile)",
            )
        check(
            math.isfinite(self.profile_seconds) and self.profile_seconds >= 0,
            "profile_seconds",
            "must be >= 0",
        )
        check(self.profile_requests >= 0, "profile_requests", "must be >= 0")
        check(self.profile_stop_timeout_s > 0, "profile_stop_timeout_s", "must be > 0")
        check(self.profile_max_bytes > 0, "profile_max_bytes", "must be > 0")
        for i, activity in enumerate(self.profile_activities):
            check(activity in ("cpu", "gpu"), f"profile_activities[{i}]", "must be cpu or gpu")
        if self.profile_start_body:
            try:
                json.loads(self.profile_start_body)
            except ValueError:
                check(False, "profile_start_body", "must be JSON")

    def _validate_dataset(self, check: Any) -> None:
        check(self.dataset in DATASETS, "dataset", f"must be one of {', '.join(DATASETS)}")
        for name in ("input_dist", "output_dist"):
            check(getattr(self, name) in DISTRIBUTIONS, name, "must be uniform or lognormal")
        for name in ("input_sigma", "output_sigma"):
            value = getattr(self, name)
            check(math.isfinite(value) and 0 <= value <= 4, name, "must be in [0, 4]")
        check(self.output_range_ratio < 1, "output_range_ratio", "must be in [0, 1) (< 0: same)")
        for dist, sigma in (("input_dist", "input_sigma"), ("output_dist", "output_sigma")):
            if getattr(self, dist) == "lognormal":
                check(getattr(self, sigma) > 0, sigma, "must be > 0 for a lognormal length")
        check(0 <= self.prefix_len <= 1_000_000, "prefix_len", "must be in [0, 1000000]")
        check(0 <= self.prefix_groups <= 100_000, "prefix_groups", "must be in [0, 100000]")
        check(0 <= self.turns <= MAX_TURNS, "turns", f"must be in [0, {MAX_TURNS}]")
        check(
            math.isfinite(self.think_time_s) and self.think_time_s >= 0,
            "think_time_s",
            "must be >= 0",
        )
        check(
            self.file_format in FILE_FORMATS, "file_format", "must be auto, sharegpt, chat or jsonl"
        )
        check(self.file_output_len >= 0, "file_output_len", "must be >= 0")
        check(self.file_filter in FILE_FILTERS, "file_filter", 'must be "" or "vllm"')
        check(1 <= self.trace_block_size <= 1_000_000, "trace_block_size", "must be >= 1")
        check(
            math.isfinite(self.trace_sec_multiplier) and self.trace_sec_multiplier >= 0,
            "trace_sec_multiplier",
            "must be > 0 (0: by the timestamp field)",
        )
        needs_file = self.dataset in ("file", "trace")
        check(
            bool(self.dataset_path) == needs_file,
            "dataset_path",
            "is needed by the file and trace datasets only",
        )
        check(
            not self.dataset_sha256
            or (len(self.dataset_sha256) == 64 and _is_hex(self.dataset_sha256)),
            "dataset_sha256",
            "must be 64 hex digits",
        )
        if self.dataset == "multi-turn":
            check(self.turns >= 1, "turns", "must be >= 1 for multi-turn")
        if self.dataset == "shared-prefix":
            check(self.prefix_len >= 1, "prefix_len", "must be >= 1 for shared-prefix")
        for i, p in enumerate(self.percentiles):
            check(0 < p < 100, f"percentiles[{i}]", "must be in (0, 100)")
        for i, m in enumerate(self.percentile_metrics):
            check(
                m in PERCENTILE_METRICS,
                f"percentile_metrics[{i}]",
                f"must be one of {', '.join(PERCENTILE_METRICS)}",
            )
        check(self.slo_e2el_ms >= 0, "slo_e2el_ms", "must be >= 0")

    @property
    def timed_trace(self) -> bool:
        """A trace sent at its recorded times (one point, no rate of its own)."""
        return (
            self.dataset == "trace"
            and self.trace_timed
            and not (self.concurrency or self.rates or self.request_rate or self.ramp)
        )

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
        cap = self.max_concurrency
        if self.timed_trace or self.ramp:
            # a timed trace with no count sends every row (the bench process knows how many)
            ramp_n = max(10, math.ceil(15 * (self.ramp_start_rate + self.ramp_end_rate)))
            n = self.requests or (0 if self.duration_seconds or self.timed_trace else ramp_n)
            return [Point(0, 0, 0.0, n, self.duration_seconds, cap)]
        rates = self.rates or ((self.request_rate,) if self.request_rate > 0 else ())
        if rates:
            return [
                Point(
                    i,
                    0,
                    rate,
                    self.requests
                    or (0 if self.duration_seconds else max(10, math.ceil(30 * rate))),
                    self.duration_seconds,
                    cap,
                )
                for i, rate in enumerate(rates)
            ]
        out = []
        for i, c in enumerate(self.concurrency):
            n = self.requests or (0 if self.duration_seconds else max(10, 5 * c))
            out.append(Point(i, c, 0.0, n, self.duration_seconds))
        return out

    def server_url(self, path_or_url: str) -> str:
        """A path (``/start_profile``) on the server under test, or a full URL as it is."""
        if not path_or_url or path_or_url.startswith(("http://", "https://")):
            return path_or_url
        return self.url.rstrip("/").removesuffix("/v1") + path_or_url

    @property
    def slo_set(self) -> bool:
        return bool(self.slo_ttft_ms or self.slo_tpot_ms or self.slo_e2el_ms)

    @property
    def models_url(self) -> str:
        return self.url.rstrip("/").removesuffix("/v1") + "/v1/models"

    @property
    def endpoint(self) -> str:
        base = self.url.rstrip("/").removesuffix("/v1")
        return base + ("/v1/chat/completions" if self.api == "chat" else "/v1/completions")


def _check_datasets_folder_path(path: str) -> None:
    """A spec's dataset file is named inside the agent's datasets folder: refused here (so at
    ``--dry-run`` too) when it could only lead out of it. The agent confines it again on StartRun,
    symlinks included."""
    where = PurePosixPath(path)
    if path and (where.is_absolute() or ".." in where.parts):
        raise BenchConfigError(
            "dataset.path",
            f"{path!r} must be a relative path inside the agent's datasets folder (datasets_dir "
            "in its config; default <state_dir>/datasets)",
        )


def _dataset_from_pb(d: run_pb2.DatasetSpec) -> dict[str, Any]:
    """A DatasetSpec's settings (the path as given: the agent confines and resolves it)."""
    return {
        "dataset": d.name or "random",
        "input_dist": d.input_dist or "uniform",
        "output_dist": d.output_dist or "uniform",
        "input_sigma": d.input_sigma,
        "output_sigma": d.output_sigma,
        "output_range_ratio": d.output_range_ratio if d.HasField("output_range_ratio") else -1.0,
        "prefix_len": d.prefix_len,
        "prefix_groups": d.prefix_groups,
        "turns": d.turns,
        "think_time_s": d.think_time_seconds,
        "dataset_path": d.path,
        "file_format": d.file_format or "auto",
        "file_output_len": d.file_output_len,
        "trace_block_size": d.trace_block_size or 512,
        "trace_sec_multiplier": d.trace_sec_multiplier,
        "trace_timed": d.trace_timed if d.HasField("trace_timed") else True,
        "dataset_sha256": d.sha256,
    }


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text.lower())
