"""Bounds on what a run may ask for, shared by the controller (at submission) and the agent (at
StartServer / StartRun), so both refuse the same specs with the same words.

Every number in a ``tunelab.v1`` RunSpec or ServerSpec has a sane range here (``FIELD_RANGES``,
keyed ``Message.field``) inside its wire type's range (read from the descriptor, so a range that
does not fit its field fails the unit test, not a dispatch); floats must be finite; strings,
lists and maps are bounded in count and length. The controller checks a spec's YAML values with
:func:`check_number` before it builds a message, then the finished message with
:func:`check_run_spec`; the agent checks each message it receives with the same functions.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from tunelab.v1 import run_pb2, server_pb2

DAY = 86400.0
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
RESERVED_ENV = "TUNELAB_SERVER_ID"  # set by the agent in every server's environment
MAX_ARGV = 1024
MAX_ENV = 1024
MAX_ARG_BYTES = 32 * 1024
MAX_ENV_VALUE = 32 * 1024
MAX_TEXT = 4096  # names, paths, URLs, model ids
MAX_SWEEP_POINTS = 1024
MAX_REDACT_NAMES = 256  # a spec's redact: list, sent to the agent with its server
# The monitor reads its launch document (spec + the agent's own fields) up to this many bytes
# (procs/monitor.py MAX_LAUNCH); argv and env, JSON-encoded as sent, must leave room for the
# rest, or a spec accepted at submission would fail at dispatch.
MAX_LAUNCH_BYTES = 1 << 20
LAUNCH_HEADROOM = 64 * 1024


@dataclass(frozen=True)
class Range:
    low: float
    high: float

    def text(self) -> str:
        return f"{_num(self.low)}-{_num(self.high)}"


FIELD_RANGES: dict[str, Range] = {
    "ServerSpec.port": Range(0, 65535),  # 0 = a free port chosen by the agent (runs only)
    "ServerSpec.startup_timeout_seconds": Range(0, 7 * DAY),
    "ServerSpec.stop_grace_seconds": Range(0, 3600),
    "BuiltinBenchmark.concurrency": Range(1, 100_000),
    "BuiltinBenchmark.request_rate": Range(0, 1_000_000),
    "BuiltinBenchmark.burstiness": Range(0, 1000),
    "BuiltinBenchmark.requests": Range(0, 100_000_000),
    "BuiltinBenchmark.duration_seconds": Range(0, 7 * DAY),
    "BuiltinBenchmark.input_len": Range(0, 10_000_000),
    "BuiltinBenchmark.output_len": Range(0, 10_000_000),
    "BuiltinBenchmark.range_ratio": Range(0, 1),
    "BuiltinBenchmark.warmup": Range(0, 1_000_000),
    "BuiltinBenchmark.temperature": Range(0, 100),
    "BuiltinBenchmark.slo_ttft_ms": Range(0, 7 * DAY * 1000),
    "BuiltinBenchmark.slo_tpot_ms": Range(0, 7 * DAY * 1000),
    "BuiltinBenchmark.seed": Range(0, 2**63 - 1),
    "BuiltinBenchmark.warmup_seconds": Range(0, DAY),
    "BuiltinBenchmark.timeline_step_seconds": Range(0, 60),
    "ProfileSpec.point": Range(0, MAX_SWEEP_POINTS - 1),
    "ProfileSpec.window_seconds": Range(0, DAY),
    "ProfileSpec.window_requests": Range(0, 100_000_000),
    "ProfileSpec.max_bytes": Range(0, 1 << 40),
    "ProfileSpec.stop_timeout_seconds": Range(0, 3600),
    "RunSpec.max_duration_seconds": Range(0, 30 * DAY),
}
PROFILE_ACTIVITIES = ("cpu", "gpu")
_DESCRIPTORS: dict[str, Descriptor] = {
    "ServerSpec": server_pb2.ServerSpec.DESCRIPTOR,
    "BuiltinBenchmark": run_pb2.BuiltinBenchmark.DESCRIPTOR,
    "RunSpec": run_pb2.RunSpec.DESCRIPTOR,
    "ProfileSpec": run_pb2.ProfileSpec.DESCRIPTOR,
}
_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: Range(-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: Range(-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: Range(0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: Range(0, 2**64 - 1),
}
_FLOATS = (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT)


class SpecViolation(ValueError):
    """A field is out of bounds; ``field`` is its dotted path, ``problem`` says what is allowed."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def field_descriptor(key: str) -> FieldDescriptor:
    message, _, name = key.partition(".")
    return _DESCRIPTORS[message].fields_by_name[name]


def wire_range(key: str) -> Range | None:
    """The range the field's wire type can carry (None for floating point fields)."""
    return _INT_RANGES.get(field_descriptor(key).type)


def check_number(key: str, value: object, path: str) -> float | int:
    """``value`` for the field ``key`` (``Message.field``), or SpecViolation naming ``path``:
    the right kind of number (an int for an integer field, never a bool), finite, in range."""
    bounds = FIELD_RANGES[key]
    is_int = field_descriptor(key).type not in _FLOATS
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpecViolation(path, f"must be {'an integer' if is_int else 'a number'}")
    if is_int and not isinstance(value, int):
        raise SpecViolation(path, f"must be an integer, got {value!r}")
    if not math.isfinite(value):
        raise SpecViolation(path, f"must be a finite number, got {value}")
    if not bounds.low <= value <= bounds.high:
        raise SpecViolation(path, f"must be in {bounds.text()}, got {_num(value)}")
    return value


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 2**64 else f"{value:g}"


def _text(value: str, path: str, limit: int = MAX_TEXT) -> None:
    if len(value.encode()) > limit:
        raise SpecViolation(path, f"longer than {limit} bytes")
    if "\0" in value:
        raise SpecViolation(path, "must not contain NUL bytes")


def check_argv(argv: Sequence[str], path: str) -> None:
    if not argv:
        raise SpecViolation(path, "must not be empty")
    if len(argv) > MAX_ARGV:
        raise SpecViolation(path, f"more than {MAX_ARGV} arguments")
    for i, arg in enumerate(argv):
        _text(arg, f"{path}[{i}]", MAX_ARG_BYTES)
    if not argv[0]:
        raise SpecViolation(f"{path}[0]", "must name a program")


def check_env(env: Mapping[str, str], path: str) -> None:
    if len(env) > MAX_ENV:
        raise SpecViolation(path, f"more than {MAX_ENV} variables")
    for key, value in env.items():
        if not ENV_NAME.match(key):
            raise SpecViolation(f"{path}[{key!r}]", "name must match [A-Za-z_][A-Za-z0-9_]*")
        if key == RESERVED_ENV:
            raise SpecViolation(f"{path}[{key!r}]", "is reserved by the agent")
        if "\0" in value:
            raise SpecViolation(f"{path}[{key!r}]", "value must not contain NUL bytes")
        if len(value) > MAX_ENV_VALUE:
            raise SpecViolation(f"{path}[{key!r}]", f"value longer than {MAX_ENV_VALUE} bytes")


def check_launch_size(argv: Sequence[str], env: Mapping[str, str], path: str) -> None:
    """argv and env, as the monitor receives them, fit its launch document."""
    size = len(json.dumps({"argv": list(argv), "env": dict(env)}).encode())
    limit = MAX_LAUNCH_BYTES - LAUNCH_HEADROOM
    if size > limit:
        raise SpecViolation(
            path,
            f"argv and env take {size} bytes as sent to the server's monitor; the limit is {limit}",
        )


def check_server_spec(
    pb: server_pb2.ServerSpec, prefix: str = "spec.", auto_port: bool = False
) -> None:
    """Every rule a server spec message must meet before anything is spawned. ``auto_port``:
    the spec is a run's server, which may ask for a port chosen by the agent (the message's
    ``auto_port``, or port 0 from a client older than that field)."""
    check_server_message(pb, prefix, auto_port)
    check_server_fields(
        ServerFields(
            argv=tuple(pb.argv),
            port=pb.port,
            name=pb.name,
            env=dict(pb.env),
            cwd=pb.cwd,
            ready_path=pb.ready_path,
            ready_model=pb.ready_model,
            startup_timeout_seconds=pb.startup_timeout_seconds,
            stop_grace_seconds=pb.stop_grace_seconds,
            auto_port=auto_port and (pb.auto_port or pb.port == 0),
            redact=tuple(pb.redact),
        ),
        prefix,
    )


def check_server_message(pb: server_pb2.ServerSpec, prefix: str, auto_port: bool) -> None:
    """The rules only the message has (its ``auto_port`` flag beside its port)."""
    if pb.auto_port and not auto_port:
        raise SpecViolation(f"{prefix}auto_port", "only a run's server can have an auto port")
    if pb.auto_port and pb.port:
        raise SpecViolation(f"{prefix}port", f"must be 0 with auto_port, got {pb.port}")


@dataclass(frozen=True)
class ServerFields:
    """A server spec's values as plain data, so the agent's domain spec is checked by the same
    rules as the message without converting itself to the wire type."""

    argv: Sequence[str]
    port: int
    name: str
    env: Mapping[str, str]
    cwd: str
    ready_path: str
    ready_model: str
    startup_timeout_seconds: float
    stop_grace_seconds: float
    auto_port: bool = False  # port 0: the agent picks one
    redact: Sequence[str] = ()  # more secret names


def check_server_fields(spec: ServerFields, prefix: str = "spec.") -> None:
    """The bounds of a server spec, whichever side holds it."""
    check_argv(spec.argv, f"{prefix}argv")
    if spec.name and not SERVER_NAME.match(spec.name):
        raise SpecViolation(
            f"{prefix}name", "expected 1-63 letters, digits, '.', '_' or '-', starting alnum"
        )
    if spec.auto_port:
        if spec.port != 0:
            raise SpecViolation(f"{prefix}port", f"must be 0 with auto_port, got {spec.port}")
    elif isinstance(spec.port, bool) or not isinstance(spec.port, int):
        raise SpecViolation(f"{prefix}port", "must be an integer")
    elif not 1 <= spec.port <= 65535:
        raise SpecViolation(f"{prefix}port", f"expected 1-65535, got {spec.port}")
    check_env(spec.env, f"{prefix}env")
    if len(spec.redact) > MAX_REDACT_NAMES:
        raise SpecViolation(f"{prefix}redact", f"more than {MAX_REDACT_NAMES} names")
    for i, name in enumerate(spec.redact):
        _text(name, f"{prefix}redact[{i}]", 256)
    check_launch_size(spec.argv, spec.env, f"{prefix}argv")
    _text(spec.cwd, f"{prefix}cwd")
    if spec.cwd and not spec.cwd.startswith("/"):
        raise SpecViolation(f"{prefix}cwd", "must be an absolute path")
    _text(spec.ready_path, f"{prefix}ready_path")
    if spec.ready_path and (
        not spec.ready_path.startswith("/") or any(c.isspace() for c in spec.ready_path)
    ):
        raise SpecViolation(f"{prefix}ready_path", "expected an absolute HTTP path such as /health")
    _text(spec.ready_model, f"{prefix}ready_model")
    if any(c.isspace() for c in spec.ready_model):
        raise SpecViolation(f"{prefix}ready_model", "must not contain whitespace")
    for name in ("startup_timeout_seconds", "stop_grace_seconds"):
        check_number(f"ServerSpec.{name}", getattr(spec, name), f"{prefix}{name}")


def check_builtin(pb: run_pb2.BuiltinBenchmark, prefix: str = "benchmark.") -> None:
    """Bounds only; the load generator's own rules (rate or concurrency, ...) are
    ``tunelab.bench.config.BenchConfig``'s, which both sides also call."""
    if len(pb.concurrency) > MAX_SWEEP_POINTS:
        raise SpecViolation(f"{prefix}concurrency", f"more than {MAX_SWEEP_POINTS} points")
    for i, c in enumerate(pb.concurrency):
        check_number("BuiltinBenchmark.concurrency", c, f"{prefix}concurrency[{i}]")
    for key in FIELD_RANGES:
        message, _, name = key.partition(".")
        if message == "BuiltinBenchmark" and name != "concurrency":
            check_number(key, getattr(pb, name), f"{prefix}{name}")
    for name in ("api", "model", "url", "preset", "reset_cache_url", "tokenizer"):
        _text(getattr(pb, name), f"{prefix}{name}")
    if pb.HasField("profile"):
        check_profile(pb.profile, f"{prefix}profile.")


def check_profile(pb: run_pb2.ProfileSpec, prefix: str) -> None:
    for key in FIELD_RANGES:
        message, _, name = key.partition(".")
        if message == "ProfileSpec":
            check_number(key, getattr(pb, name), f"{prefix}{name}")
    if len(pb.activities) > len(PROFILE_ACTIVITIES):
        raise SpecViolation(f"{prefix}activities", "at most cpu and gpu")
    for i, activity in enumerate(pb.activities):
        if activity not in PROFILE_ACTIVITIES:
            raise SpecViolation(f"{prefix}activities[{i}]", "must be cpu or gpu")
    for name in ("start_url", "stop_url"):
        _text(getattr(pb, name), f"{prefix}{name}")


def check_run_spec(pb: run_pb2.RunSpec, *, server_fields: bool = True) -> None:
    """Every bound of a RunSpec (the server's, the benchmark's, the run's). ``server_fields``
    False: the caller checks the server's values on its own type (the agent's
    ``ServerSpec.validated()``), so that they are checked once."""
    if pb.HasField("server"):
        if server_fields:
            check_server_spec(pb.server, "spec.", auto_port=True)
        else:
            check_server_message(pb.server, "spec.", auto_port=True)
    kind = pb.benchmark.WhichOneof("kind")
    if kind == "builtin":
        check_builtin(pb.benchmark.builtin)
    elif kind == "command":
        command = pb.benchmark.command
        check_argv(command.argv, "spec.benchmark.command.argv")
        if not command.result_file:
            raise SpecViolation("spec.benchmark.command.result_file", "is required")
        _text(command.result_file, "spec.benchmark.command.result_file")
        check_env(command.env, "spec.benchmark.command.env")
        check_launch_size(command.argv, command.env, "spec.benchmark.command.argv")
    check_number("RunSpec.max_duration_seconds", pb.max_duration_seconds, "max_duration_seconds")
    _text(pb.experiment, "spec.experiment")
    _text(pb.server_id, "spec.server_id")
