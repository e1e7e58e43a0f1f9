"""Validation of one experiment document, producing a normalized spec (defaults filled in).

Every problem is collected with the dotted path of its field, so a user fixes a file in one go.
Unknown keys are errors: a typo must never silently drop a setting.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from tunelab.analysis.metrics import COMPARED
from tunelab.bench.tokens import spec_tokenizer_problem
from tunelab.common.durations import parse_duration
from tunelab.common.specbounds import MAX_TEXT, Range, SpecViolation, check_number
from tunelab.controller.spec.errors import SpecIssue

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")
LABEL_VALUE = re.compile(r"^[^\x00-\x1f\x7f]{0,253}$")  # no NUL, newline or other control

TOP_KEYS = {"name", "priority", "host", "server", "benchmark", "max_duration", "repeat", "matrix",
            "ablation", "max_attempts", "roofline", "redact", "profile", "compare"}  # fmt: skip
SERVER_KEYS = {"command", "flags", "env", "port", "ready", "stop_grace", "cwd", "engine"}
ENGINES = ("vllm", "sglang", "generic")  # the agent's engine profiles
READY_KEYS = {"path", "model", "timeout"}
HOST_KEYS = {"name", "labels", "gpus"}
BUILTIN_KEYS = {"api", "model", "concurrency", "rate", "burstiness", "requests", "duration",
                "input_len", "output_len", "range_ratio", "warmup", "ignore_eos", "temperature",
                "slo", "seed", "preset", "url", "dataset", "max_concurrency",
                "ramp", "reset_cache", "reset_cache_url", "find", "tokenizer",
                "timeline"}  # fmt: skip
TIMELINE_KEYS = {"step"}
# benchmark.dataset (docs/workloads.md): key -> (kind, DatasetSpec field)
DATASET_KEYS: dict[str, tuple[str, str]] = {
    "name": ("string", "name"),
    "input_dist": ("string", "input_dist"),
    "output_dist": ("string", "output_dist"),
    "input_sigma": ("number", "input_sigma"),
    "output_sigma": ("number", "output_sigma"),
    "output_range_ratio": ("number", "output_range_ratio"),
    "prefix_len": ("integer", "prefix_len"),
    "prefix_groups": ("integer", "prefix_groups"),
    "turns": ("integer", "turns"),
    "think_time": ("duration", "think_time_seconds"),
    "path": ("string", "path"),
    "format": ("string", "file_format"),
    "output_len": ("integer", "file_output_len"),
    "block_size": ("integer", "trace_block_size"),
    "sec_multiplier": ("number", "trace_sec_multiplier"),
    "timed": ("boolean", "trace_timed"),
    "sha256": ("string", "sha256"),
}
RAMP_KEYS = {"strategy", "start_rate", "end_rate"}
# `profile:` (docs/profiles.md): the engine's profiler around one load point's window
PROFILE_KEYS = {"point", "window", "requests", "activities", "max_bytes", "start_url", "stop_url",
                "stop_timeout"}  # fmt: skip
FIND_KEYS = {"axis", "max", "slo", "plateau"}
# `compare:` (docs/report.md): how the comparison of this spec's runs judges its effects
COMPARE_KEYS = {"correction", "primary"}
COMPARE_CORRECTIONS = ("bh", "holm")  # Benjamini-Hochberg (the default), Holm
COMPARE_METRICS = tuple(m.name for m in COMPARED)  # the catalogue's compared metrics
FIND_SLO = ("p99_ttft_ms", "median_ttft_ms", "p99_tpot_ms", "median_tpot_ms", "p99_itl_ms",
            "median_itl_ms", "p99_e2el_ms", "median_e2el_ms")  # fmt: skip
COMMAND_KEYS = {"command", "result_file", "env"}
MIN_SLO_MS = 1.0  # an SLO below 1 ms was meant in seconds (0.025 for 25 ms)
SLO_KEYS = {"ttft_ms", "tpot_ms"}
# what a decode step reads, when the agent cannot read it from the model's files (roofline.py)
ROOFLINE_KEYS = {"weight_bytes", "kv_bytes_per_token", "expert_weight_bytes", "experts",
                 "experts_per_token", "memory_bandwidth", "tp"}  # fmt: skip
# (normalized key, default, minimum, BuiltinBenchmark field): an int default reads an integer
BUILTIN_NUMBERS: tuple[tuple[str, int | float, int, str], ...] = (
    ("burstiness", 1.0, 0, "burstiness"),
    ("requests", 0, 0, "requests"),
    ("input_len", 1024, 1, "input_len"),
    ("output_len", 256, 1, "output_len"),
    ("range_ratio", 0.0, 0, "range_ratio"),
    ("warmup", 0, 0, "warmup"),
    ("temperature", 0.0, 0, "temperature"),
    ("slo_ttft_ms", 0.0, 0, "slo_ttft_ms"),
    ("slo_tpot_ms", 0.0, 0, "slo_tpot_ms"),
    ("seed", 0, 0, "seed"),
)
DEFAULT_MAX_DURATION = 2 * 3600.0
# The controller's own fields (not sent to an agent): stored in 64-bit SQL integers, kept sane.
PRIORITY = Range(-1_000_000, 1_000_000)
REPEAT = Range(1, 1_000_000)  # the variant cap (limits.py) refuses far less
MAX_ATTEMPTS = Range(1, 100)
HOST_GPUS = Range(0, 1024)


def read_fraction(value: Any, below: float, *, zero: bool = False) -> float:
    """THE reader of a share (a margin, an effect size, a plateau, a CV), in a spec and on the
    command line alike: "5%" and 0.05 (or "0.05") are both five percent. A bare number of 1 or
    more is refused with the unit named: it only makes sense as a percentage ("5" would be
    500 %), and reading it as one would give a number two meanings. Above 0 (at least 0 with
    ``zero``) and below ``below``; ValueError says why."""
    text = value.strip() if isinstance(value, str) else ""
    try:
        if text.endswith("%"):
            share = float(text[:-1]) / 100.0
        elif text:
            share = float(text)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            share = float(value)
        else:
            raise ValueError(value)
    except ValueError:
        raise ValueError(f"expected a percentage such as 5% (or 0.05), got {value!r}") from None
    if not text.endswith("%") and abs(share) >= 1.0:
        raise ValueError(
            f"{value!r} is a fraction of {share:.0%}: write a percentage as 5% or 0.05 "
            "(a bare number is a fraction of 1)"
        )
    above = share >= 0.0 if zero else share > 0.0
    if not (math.isfinite(share) and above and share < below):
        low = "at least 0%" if zero else "above 0%"
        raise ValueError(f"must be {low} and below {below:.0%}, got {value!r}")
    return share


class Checker:
    """Collects issues while reading a document; each reader returns a normalized value."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self.issues: list[SpecIssue] = []

    def fail(self, path: str, problem: str) -> None:
        self.issues.append(SpecIssue(self.prefix + path, problem))

    def mapping(self, value: Any, path: str, allowed: set[str]) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            self.fail(path, f"must be a mapping, got {_kind(value)}")
            return {}
        for key in value:
            if key not in allowed:
                where = f"{path}.{key}" if path else str(key)
                self.fail(where, f"unknown key (expected one of: {', '.join(sorted(allowed))})")
        return dict(value)

    def string(self, value: Any, path: str, pattern: re.Pattern[str] | None = None) -> str:
        if not isinstance(value, str):
            self.fail(path, f"must be a string, got {_kind(value)}")
            return ""
        if pattern is not None and not pattern.match(value):
            self.fail(path, f"{value!r} does not match {pattern.pattern}")
        return value

    def integer(
        self, value: Any, path: str, minimum: int | None = None, bound: str | Range = ""
    ) -> int:
        """An integer; ``bound`` is a RunSpec field (``Message.field``, its sane range shared
        with the agent) or a Range of the controller's own."""
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"must be an integer, got {_kind(value)}")
            return minimum or 0
        if minimum is not None and value < minimum:
            self.fail(path, f"must be >= {minimum}, got {value}")
        elif not self._in_bounds(value, path, bound):
            return minimum or 0
        return value

    def number(
        self, value: Any, path: str, minimum: float | None = None, bound: str | Range = ""
    ) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(path, f"must be a number, got {_kind(value)}")
            return minimum or 0.0
        if not math.isfinite(value):
            self.fail(path, f"must be a finite number, got {value}")
            return minimum or 0.0
        if minimum is not None and value < minimum:
            self.fail(path, f"must be >= {minimum:g}, got {value}")
        elif not self._in_bounds(value, path, bound):
            return minimum or 0.0
        return float(value)

    def _in_bounds(self, value: float, path: str, bound: str | Range) -> bool:
        if isinstance(bound, Range):
            if not bound.low <= value <= bound.high:
                self.fail(path, f"must be in {bound.text()}, got {value}")
                return False
            return True
        if bound:
            try:
                check_number(bound, value, path)
            except SpecViolation as exc:
                self.fail(path, exc.problem)
                return False
        return True

    def boolean(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            self.fail(path, f"must be true or false, got {_kind(value)}")
            return False
        return value

    def fraction(self, value: Any, path: str, below: float, *, zero: bool = False) -> float | None:
        """A share written "5%" or 0.05 (:func:`read_fraction`); None when refused (the caller's
        default stands in)."""
        try:
            return read_fraction(value, below, zero=zero)
        except ValueError as exc:
            self.fail(path, str(exc))
            return None

    def slo_limit(self, limit: float, path: str) -> None:
        """A latency limit in milliseconds: above 0, and not a value in seconds (0.025 meant
        25 ms) or any other below ``MIN_SLO_MS``."""
        if limit <= 0:
            self.fail(path, "must be > 0")
        elif limit < MIN_SLO_MS:
            self.fail(
                path,
                f"{limit:g} ms is below {MIN_SLO_MS:g} ms: SLOs are in milliseconds "
                f"({limit * 1000:g} ms is written {limit * 1000:g}, not {limit:g})",
            )

    def duration(self, value: Any, path: str, bound: str = "") -> float:
        if isinstance(value, bool):
            self.fail(path, "must be a duration such as 30s, 20m or 2h")
            return 0.0
        try:
            seconds = parse_duration(value)
        except (ValueError, TypeError) as exc:
            self.fail(path, str(exc))
            return 0.0
        return seconds if self._in_bounds(seconds, path, bound) else 0.0

    def string_list(self, value: Any, path: str) -> list[str]:
        if isinstance(value, str) or not isinstance(value, list):
            self.fail(
                path,
                f"must be a list of strings (an argv, never a shell string), got {_kind(value)}",
            )
            return []
        if not value:
            self.fail(path, "must not be empty")
        return [self.string(item, f"{path}[{i}]") for i, item in enumerate(value)]


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    kinds = {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
    }
    return kinds.get(
        type(value), "a mapping" if isinstance(value, Mapping) else type(value).__name__
    )


def _flag_value(check: Checker, value: Any, path: str) -> Any:
    if value is None or value is True:
        return value
    if value is False:
        check.fail(path, "false is not a flag value: use true for a bare flag, null to remove it")
        return None
    if isinstance(value, int | float | str):
        return value
    if isinstance(value, list) and all(
        isinstance(v, int | float | str) and not isinstance(v, bool) for v in value
    ):
        return value
    check.fail(path, f"must be a string, number, true, null or a list of those, got {_kind(value)}")
    return None


def _mentions_port(command: list[str], flags: Mapping[str, Any], env: Mapping[str, str]) -> bool:
    """Whether ``{port}`` reaches the server somewhere (argv, a flag value or the environment)."""
    values: list[Any] = [*command, *flags.values(), *env.values()]
    texts = [str(v) for value in values for v in (value if isinstance(value, list) else [value])]
    return any("{port}" in text for text in texts)


def check_server(check: Checker, raw: Any) -> dict[str, Any]:
    server = check.mapping(raw, "server", SERVER_KEYS)
    command = (
        check.string_list(server.get("command"), "server.command") if "command" in server else []
    )
    if "command" not in server:
        check.fail("server.command", "is required (the server's argv prefix)")
    flags_raw = server.get("flags", {})
    flags: dict[str, Any] = {}
    if not isinstance(flags_raw, Mapping):
        check.fail("server.flags", f"must be a mapping of flag -> value, got {_kind(flags_raw)}")
    else:
        for key, value in flags_raw.items():
            if not isinstance(key, str) or not key.startswith("-"):
                check.fail(f"server.flags.{key}", "flag names start with - or --")
                continue
            flags[key] = _flag_value(check, value, f"server.flags.{key}")
    env_raw = server.get("env", {})
    env: dict[str, str] = {}
    if not isinstance(env_raw, Mapping):
        check.fail("server.env", f'must be a mapping of NAME: "value", got {_kind(env_raw)}')
    else:
        for key, value in env_raw.items():
            if not isinstance(key, str) or not ENV_NAME.match(key):
                check.fail(f"server.env.{key}", "name must match [A-Za-z_][A-Za-z0-9_]*")
            env[str(key)] = check.string(value, f"server.env.{key}")
    port_raw = server.get("port", "auto")
    port: int | str = "auto"
    if port_raw != "auto":
        port = check.integer(port_raw, "server.port", 1)
        if isinstance(port, int) and port > 65535:
            check.fail("server.port", f"must be 1-65535 or auto, got {port}")
    if port == "auto" and not _mentions_port(command, flags, env):
        check.fail(
            "server.port",
            'auto picks a free port, but nothing passes it to the server: put "{port}" in '
            'server.flags (e.g. --port: "{port}"), server.command or server.env, or give '
            "a number",
        )
    ready = check.mapping(server.get("ready", {}), "server.ready", READY_KEYS)
    path = check.string(ready.get("path", "/health"), "server.ready.path")
    if path and not path.startswith("/"):
        check.fail("server.ready.path", "must start with /")
    return {
        "command": command,
        "flags": flags,
        "env": env,
        "port": port,
        "ready": {
            "path": path,
            "model": check.string(ready["model"], "server.ready.model") if "model" in ready else "",
            "timeout": check.duration(
                ready.get("timeout", "20m"),
                "server.ready.timeout",
                "ServerSpec.startup_timeout_seconds",
            ),
        },
        "stop_grace": check.duration(
            server.get("stop_grace", "30s"), "server.stop_grace", "ServerSpec.stop_grace_seconds"
        ),
        "cwd": check.string(server["cwd"], "server.cwd") if "cwd" in server else "",
        **_engine(check, server),
    }


def _engine(check: Checker, server: Mapping[str, Any]) -> dict[str, str]:
    """``server.engine``: kept only when given, so specs without it normalise as before."""
    if "engine" not in server:
        return {}
    engine = check.string(server["engine"], "server.engine")
    if engine not in ENGINES:
        check.fail("server.engine", f"must be one of {', '.join(ENGINES)}, got {engine!r}")
    return {"engine": engine}


def check_benchmark(check: Checker, raw: Any, default_model: str) -> dict[str, Any]:
    if isinstance(raw, Mapping) and "command" in raw:
        bench = check.mapping(raw, "benchmark", COMMAND_KEYS)
        env_raw = bench.get("env", {})
        env = check.mapping(
            env_raw, "benchmark.env", set(env_raw) if isinstance(env_raw, Mapping) else set()
        )
        if "result_file" not in bench:
            check.fail("benchmark.result_file", "is required with benchmark.command")
        return {
            "kind": "command",
            "command": check.string_list(bench.get("command"), "benchmark.command"),
            "result_file": check.string(bench.get("result_file", ""), "benchmark.result_file"),
            "env": {str(k): check.string(v, f"benchmark.env.{k}") for k, v in env.items()},
        }
    bench = check.mapping(raw, "benchmark", BUILTIN_KEYS)
    concurrency_raw = bench.get("concurrency", [])
    if isinstance(concurrency_raw, int) and not isinstance(concurrency_raw, bool):
        concurrency_raw = [concurrency_raw]
    concurrency: list[int] = []
    if not isinstance(concurrency_raw, list):
        check.fail(
            "benchmark.concurrency", f"must be a list of integers, got {_kind(concurrency_raw)}"
        )
    else:
        concurrency = [
            check.integer(c, f"benchmark.concurrency[{i}]", 1, "BuiltinBenchmark.concurrency")
            for i, c in enumerate(concurrency_raw)
        ]
    rate = 0.0
    rates: list[float] = []
    if isinstance(bench.get("rate"), list):
        rates = [
            check.number(r, f"benchmark.rate[{i}]", 0.0, "BuiltinBenchmark.request_rate")
            for i, r in enumerate(bench["rate"])
        ]
    elif "rate" in bench:
        rate = check.number(bench["rate"], "benchmark.rate", 0.0, "BuiltinBenchmark.request_rate")
    dataset = check_dataset(check, bench.get("dataset", {}))
    ramp = check.mapping(bench.get("ramp", {}), "benchmark.ramp", RAMP_KEYS)
    timed_trace = dataset.get("name") == "trace" and dataset.get("trace_timed", True)
    find = _find(check, bench["find"]) if "find" in bench else None
    if find is not None and (concurrency or rate or rates or ramp):
        check.fail("benchmark.find", "a load search sets its own loads: no concurrency or rate")
    if not (concurrency or rate or rates or ramp or timed_trace or find is not None):
        check.fail("benchmark", "set concurrency (a sweep list) or rate (requests/s)")
    if concurrency and (rate or rates):
        check.fail("benchmark", "set concurrency or rate, not both")
    slo = check.mapping(bench.get("slo", {}), "benchmark.slo", SLO_KEYS)
    api = check.string(bench.get("api", "completions"), "benchmark.api")
    if api not in ("completions", "chat"):
        check.fail("benchmark.api", f"must be completions or chat, got {api!r}")
    model = check.string(bench["model"], "benchmark.model") if "model" in bench else default_model
    if not model:
        check.fail("benchmark.model", "is required when server.ready.model is not set")
    out: dict[str, Any] = {
        "kind": "builtin",
        "api": api,
        "model": model,
        "concurrency": concurrency,
        "rate": rate,
        "duration": check.duration(
            bench.get("duration", 0), "benchmark.duration", "BuiltinBenchmark.duration_seconds"
        ),
        "ignore_eos": check.boolean(bench.get("ignore_eos", True), "benchmark.ignore_eos"),
        "preset": check.string(bench.get("preset", ""), "benchmark.preset"),
        "url": check.string(bench.get("url", ""), "benchmark.url"),
        "rates": rates,
        "dataset": dataset,
        "max_concurrency": check.integer(
            bench.get("max_concurrency", 0), "benchmark.max_concurrency", 0
        ),
        "ramp": {
            "strategy": check.string(ramp.get("strategy", ""), "benchmark.ramp.strategy"),
            "start_rate": check.number(ramp.get("start_rate", 0), "benchmark.ramp.start_rate", 0),
            "end_rate": check.number(ramp.get("end_rate", 0), "benchmark.ramp.end_rate", 0),
        },
    }
    if isinstance(bench.get("warmup"), str):  # "10s": a warm-up by time, instead of requests
        out["warmup_seconds"] = check.duration(
            bench.pop("warmup"), "benchmark.warmup", "BuiltinBenchmark.warmup_seconds"
        )
    if "reset_cache" in bench:  # kept only when given: unset is the agent's default
        out["reset_cache"] = check.boolean(bench["reset_cache"], "benchmark.reset_cache")
    if "reset_cache_url" in bench:
        out["reset_cache_url"] = _server_path(check, bench["reset_cache_url"], "reset_cache_url")
    if "timeline" in bench:  # kept only when given: a spec without one stores as it did
        out["timeline_step"] = _timeline_step(check, bench["timeline"])
    if "tokenizer" in bench:  # kept only when given: a spec without one stores as it did
        out["tokenizer"] = _tokenizer(check, bench["tokenizer"])
    for key, default, minimum, field in BUILTIN_NUMBERS:
        source, name = (slo, key.removeprefix("slo_")) if key.startswith("slo_") else (bench, key)
        path = f"benchmark.slo.{name}" if source is slo else f"benchmark.{key}"
        read = check.integer if isinstance(default, int) else check.number
        out[key] = read(source.get(name, default), path, minimum, f"BuiltinBenchmark.{field}")
    if find is not None:
        out["find"] = find
    if not out["requests"] and not out["duration"] and not timed_trace and find is None:
        check.fail("benchmark", "set requests (per point) or duration (per point)")
    if out["preset"] not in ("", "decode"):
        check.fail("benchmark.preset", f"must be decode or empty, got {out['preset']!r}")
    return out


def _timeline_step(check: Checker, raw: Any) -> float:
    """``benchmark.timeline``: ``false`` (none, 0.0) or ``{step: 250ms}`` (0.1 s to 60 s)."""
    if raw is False:
        return 0.0
    if raw is True:
        return 1.0
    given = check.mapping(raw, "benchmark.timeline", TIMELINE_KEYS)
    step = check.duration(given.get("step", 1.0), "benchmark.timeline.step")
    if step and not 0.1 <= step <= 60:
        check.fail("benchmark.timeline.step", f"must be between 100ms and 60s, got {step:g}s")
    return step or 1.0


def check_dataset(check: Checker, raw: Any) -> dict[str, Any]:
    """``benchmark.dataset``: DatasetSpec fields by name (the agent checks the values)."""
    given = check.mapping(raw, "benchmark.dataset", set(DATASET_KEYS))
    out: dict[str, Any] = {}
    for key, value in given.items():
        if key not in DATASET_KEYS:
            continue  # reported by mapping()
        kind, field = DATASET_KEYS[key]
        path = f"benchmark.dataset.{key}"
        if kind == "string":
            out[field] = check.string(value, path)
        elif kind == "integer":
            out[field] = check.integer(value, path, 0)
        elif kind == "number":
            out[field] = check.number(value, path, 0.0)
        elif kind == "duration":
            out[field] = check.duration(value, path)
        else:
            out[field] = check.boolean(value, path)
    return out


def _tokenizer(check: Checker, value: Any) -> str:
    """``benchmark.tokenizer``: ``model`` or a path in the agent's datasets folder (the agent
    resolves and loads it at dispatch; here only its shape, with the agent's own words)."""
    text = check.string(value, "benchmark.tokenizer")
    if not isinstance(value, str):
        return ""
    problem = spec_tokenizer_problem(text)
    if problem is None and len(text.encode()) > MAX_TEXT:
        problem = f"longer than {MAX_TEXT} bytes"
    if problem is not None:
        check.fail("benchmark.tokenizer", problem)
    return text


def _server_path(check: Checker, value: Any, path: str) -> str:
    text = check.string(value, path)
    if text and not text.startswith(("/", "http://", "https://")):
        check.fail(path, "must be a path on the server (/start_profile) or an http(s) URL")
    return text


def check_profile(check: Checker, raw: Any) -> dict[str, Any]:
    """``profile:``; ``{window: 5s}`` alone works: point 0, cpu and gpu, a 500 MB cap."""
    profile = check.mapping({} if raw is None else raw, "profile", PROFILE_KEYS)
    activities = profile.get("activities", ["cpu", "gpu"])
    if isinstance(activities, str):
        activities = [activities]
    if not isinstance(activities, list) or not activities:
        check.fail("profile.activities", "must be a list of cpu and/or gpu")
        activities = []
    for i, activity in enumerate(activities):
        if activity not in ("cpu", "gpu"):
            check.fail(f"profile.activities[{i}]", f"must be cpu or gpu, got {activity!r}")
    out: dict[str, Any] = {
        "point": check.integer(profile.get("point", 0), "profile.point", 0, "ProfileSpec.point"),
        "window": check.duration(
            profile.get("window", 0), "profile.window", "ProfileSpec.window_seconds"
        ),
        "requests": check.integer(
            profile.get("requests", 0), "profile.requests", 0, "ProfileSpec.window_requests"
        ),
        "activities": [str(a) for a in activities],
        "max_bytes": check.integer(
            profile.get("max_bytes", 500_000_000), "profile.max_bytes", 1, "ProfileSpec.max_bytes"
        ),
        "stop_timeout": check.duration(
            profile.get("stop_timeout", "120s"),
            "profile.stop_timeout",
            "ProfileSpec.stop_timeout_seconds",
        ),
    }
    for key in ("start_url", "stop_url"):
        if key in profile:
            out[key] = _server_path(check, profile[key], f"profile.{key}")
    if out["window"] and out["requests"]:
        check.fail("profile", "give window (seconds) or requests, not both")
    return out


def check_compare(check: Checker, raw: Any) -> dict[str, Any]:
    """``compare: {correction: bh|holm, primary: METRIC}``: the family correction of the
    comparison's effects and the metric judged first (effects.py)."""
    given = check.mapping(raw, "compare", COMPARE_KEYS)
    out: dict[str, Any] = {}
    if "correction" in given:
        value = check.string(given["correction"], "compare.correction")
        if value and value not in COMPARE_CORRECTIONS:
            check.fail("compare.correction", f"expected one of {', '.join(COMPARE_CORRECTIONS)}")
        out["correction"] = value
    if "primary" in given:
        value = check.string(given["primary"], "compare.primary")
        if value and value not in COMPARE_METRICS:
            check.fail("compare.primary", f"expected one of {', '.join(COMPARE_METRICS)}")
        out["primary"] = value
    return out


def _find(check: Checker, raw: Any) -> dict[str, Any]:
    """``benchmark.find``: {axis: concurrency|rate, max: N, slo: {p99_tpot_ms: 50},
    plateau: 5%} — the largest load meeting every SLO (or, with a plateau, where doubling it
    stops paying), found on one server (what ``search: load: find`` sets)."""
    given = check.mapping(raw, "benchmark.find", FIND_KEYS)
    axis = check.string(given.get("axis", ""), "benchmark.find.axis")
    if axis not in ("concurrency", "rate"):
        check.fail("benchmark.find.axis", f"must be concurrency or rate, got {axis!r}")
    maximum = check.number(given.get("max", 0), "benchmark.find.max", 1.0, Range(1, 100_000))
    slo_raw = check.mapping(given.get("slo", {}), "benchmark.find.slo", set(FIND_SLO))
    slo = {k: check.number(v, f"benchmark.find.slo.{k}", 0.0) for k, v in slo_raw.items()}
    for key, limit in slo.items():
        check.slo_limit(limit, f"benchmark.find.slo.{key}")
    if not slo:
        check.fail("benchmark.find.slo", "give at least one latency limit")
    out: dict[str, Any] = {"axis": axis, "max": maximum, "slo": slo}
    if "plateau" in given:
        # the least throughput gain a doubled load must give for the ladder to go on
        out["plateau"] = check.fraction(given["plateau"], "benchmark.find.plateau", 1.0) or 0.0
    return out


def check_host(check: Checker, raw: Any) -> dict[str, Any]:
    if isinstance(raw, str):
        return {"name": check.string(raw, "host", NAME), "labels": {}, "gpus": 0}
    if raw is None:
        return {"name": "", "labels": {}, "gpus": 0}
    host = check.mapping(raw, "host", HOST_KEYS)
    labels_raw = host.get("labels", {})
    labels = check.mapping(
        labels_raw, "host.labels", set(labels_raw) if isinstance(labels_raw, Mapping) else set()
    )
    return {
        "name": check.string(host["name"], "host.name", NAME) if "name" in host else "",
        "labels": {
            str(k): check.string(_label_text(v), f"host.labels.{k}", LABEL_VALUE)
            for k, v in labels.items()
        },
        "gpus": check.integer(host.get("gpus", 0), "host.gpus", 0, HOST_GPUS),
    }


def _label_text(value: Any) -> Any:
    """YAML reads `gpus: 8` or `tp: 2` as numbers; label values are compared as text."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


def check_experiment(raw: Any, prefix: str = "") -> tuple[dict[str, Any], list[SpecIssue]]:
    """Validate one experiment document; returns (normalized spec, issues)."""
    check = Checker(prefix)
    doc = check.mapping(raw, "", TOP_KEYS)
    if not isinstance(raw, Mapping):
        return {}, check.issues
    if "name" not in doc:
        check.fail("name", "is required")
    if "server" not in doc:
        check.fail("server", "is required")
    if "benchmark" not in doc:
        check.fail("benchmark", "is required")
    server = check_server(check, doc.get("server", {}))
    spec: dict[str, Any] = {
        "name": check.string(doc.get("name", ""), "name", NAME),
        "priority": check.integer(doc.get("priority", 0), "priority", bound=PRIORITY),
        "host": check_host(check, doc.get("host")),
        "server": server,
        "benchmark": check_benchmark(check, doc.get("benchmark", {}), server["ready"]["model"]),
        "max_duration": check.duration(
            doc.get("max_duration", DEFAULT_MAX_DURATION),
            "max_duration",
            "RunSpec.max_duration_seconds",
        ),
        "repeat": check.integer(doc.get("repeat", 1), "repeat", 1, REPEAT),
        "max_attempts": check.integer(doc.get("max_attempts", 3), "max_attempts", 1, MAX_ATTEMPTS),
    }
    if "compare" in doc:
        spec["compare"] = check_compare(check, doc["compare"])
    if "redact" in doc:  # more names whose values never leave the controller (wire.py)
        spec["redact"] = check.string_list(doc["redact"], "redact")
    if "profile" in doc:
        spec["profile"] = check_profile(check, doc["profile"])
        if spec["benchmark"].get("kind") == "command":
            check.fail("profile", "needs the built-in benchmark (it times the window)")
        points = len(spec["benchmark"].get("concurrency") or [1])
        if spec["profile"]["point"] >= points:
            check.fail("profile.point", f"the sweep has {points} point(s); point counts from 0")
    if "roofline" in doc:
        given = check.mapping(doc["roofline"], "roofline", ROOFLINE_KEYS)
        spec["roofline"] = {k: check.number(v, f"roofline.{k}", 0.0) for k, v in given.items()}
    if spec["max_duration"] <= 0 and not any(i.path.endswith("max_duration") for i in check.issues):
        check.fail("max_duration", "must be > 0")
    return spec, check.issues
