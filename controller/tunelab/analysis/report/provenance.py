"""Provenance as people read it: a few labelled lines (``tunelab show``, the report's table)."""

from __future__ import annotations

import shlex
from collections import Counter
from typing import Any

from tunelab.analysis.intervals import measured
from tunelab.common.sanitize import printable

MAX_TEXT = 256
MAX_LONG_TEXT = 4096


def _bytes(value: Any) -> str:
    number = _in_range(value)
    if number is None:
        return "-" if not isinstance(value, int | float) else "out of range"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if number >= size:
            return f"{number / size:,.1f} {unit}"
    return f"{number:g} B"


def _mhz(value: Any) -> str:
    number = _in_range(value)
    return f"{number / 1e6:,.0f} MHz" if number is not None else "-"


def _in_range(value: Any) -> float | None:
    """A recorded figure, or None when it is none or out of range (a checkpoint's header said
    10**400 bytes: dividing it is an OverflowError, so it is shown as out of range)."""
    number = measured(value)
    return number if number is not None and number >= 0 else None


def provenance_summary(prov: dict[str, Any] | None) -> dict[str, str]:
    """Label -> text, in reading order; empty when nothing was recorded."""
    if not prov:
        return {}
    engine = prov.get("engine") or {}
    model = prov.get("model") or {}
    system = prov.get("system") or {}
    gpus = prov.get("gpus") or []
    bench = prov.get("benchmark") or {}
    names = Counter(str(g.get("name")) for g in gpus)
    limits = sorted({g.get("power_limit_watts") for g in gpus if g.get("power_limit_watts")})
    clocks = sorted({g.get("sm_clock_hertz") for g in gpus if g.get("sm_clock_hertz")})
    mem_clocks = sorted({g.get("memory_clock_hertz") for g in gpus if g.get("memory_clock_hertz")})
    env = prov.get("env") or {}
    out = {
        "engine": f"{engine.get('name') or '-'} {engine.get('version') or '(version unknown)'}",
        "model": model.get("path") or "-",
        "model config": (model.get("config_sha256") or "-")[:16],
        "weights": f"{_bytes(model.get('weight_bytes'))}, KV "
        f"{_bytes(model.get('kv_bytes_per_token'))}/token"
        if model.get("weight_bytes")
        else "-",
        "GPUs": ", ".join(f"{n}x {name}" for name, n in names.items()) or "-",
        "driver / CUDA": f"{system.get('driver_version') or '-'} / "
        f"{system.get('cuda_driver_version') or '-'}",
        "at start": f"SM {', '.join(_mhz(c) for c in clocks) or '-'}, memory "
        f"{', '.join(_mhz(c) for c in mem_clocks) or '-'}, power limit "
        f"{', '.join(f'{w:g} W' for w in limits) or '-'}",
        "tunelab": str(prov.get("tunelab_version") or "-"),
        "benchmark": f"seed {bench.get('seed')}, dataset "
        f"{(bench.get('dataset_sha256') or '-')[:16]}",
        "argv": shlex.join(str(a) for a in prov.get("argv") or []) or "-",
        "env": " ".join(f"{k}={v}" for k, v in sorted(env.items())) or "-",
    }
    # what an agent recorded came from the server's environment and checkpoint: printable,
    # each label's text at most MAX_TEXT characters (argv and env MAX_LONG_TEXT)
    return {
        k: printable(v, MAX_LONG_TEXT if k in ("argv", "env") else MAX_TEXT) for k, v in out.items()
    }


def provenance_lines(prov: dict[str, Any] | None) -> list[str]:
    """``tunelab show``: one line per label."""
    summary = provenance_summary(prov)
    if not summary:
        return []
    width = max(len(k) for k in summary)
    return ["provenance:"] + [f"  {k.ljust(width)}  {v}" for k, v in summary.items()]
