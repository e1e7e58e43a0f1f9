"""How far a decode step is from what the GPUs' memory allows (README, "Roofline").

A decode step must read every weight it uses once and the KV cache of every sequence in the
batch; at small batches it cannot be faster than those bytes over the memory bandwidth of the
tensor-parallel group. ``tpot_floor_ms`` is that time, ``roofline_efficiency`` the floor over the
measured median TPOT. Compute, launch overheads and communication are left out: the floor is a
bound, not a prediction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tunelab.analysis.intervals import measured

# Peak memory bandwidth per GPU model (bytes/s), from the vendors' datasheets. Matched as a
# substring of the NVML name, first match wins (more specific names first).
GPU_BANDWIDTH: tuple[tuple[str, float], ...] = (
    ("H200", 4.8e12),
    ("H100 NVL", 3.9e12),
    ("H100 PCIe", 2.0e12),
    ("H100", 3.35e12),  # SXM5, "NVIDIA H100 80GB HBM3"
    ("H20", 4.0e12),
    ("B200", 8.0e12),
    ("A100-SXM4-80GB", 2.039e12),
    ("A100 80GB PCIe", 1.935e12),
    ("A100", 1.555e12),  # 40 GB, SXM4 and PCIe
    ("RTX PRO 6000 Blackwell", 1.792e12),
    ("RTX 6000 Ada", 960e9),
    ("L40S", 864e9),
    ("L40", 864e9),
    ("L4", 300e9),
    ("A10", 600e9),
    ("RTX 5090", 1.792e12),
    ("RTX 4090", 1.008e12),
)
TP_FLAGS = ("--tp-size", "--tp", "--tensor-parallel-size", "-tp")
KV_DTYPE_FLAG = "--kv-cache-dtype"


@dataclass(frozen=True)
class ModelBytes:
    """What one decode step of a model reads from memory, in bytes."""

    weight_bytes: float
    kv_bytes_per_token: float = 0.0  # per token of context, all layers
    expert_weight_bytes: float = 0.0  # the part of weight_bytes in routed experts (MoE)
    experts: int = 0
    experts_per_token: int = 0

    def step_weight_bytes(self, concurrency: int) -> float:
        """Weights read by one step of ``concurrency`` sequences: all dense weights, and the
        experts the batch's tokens are routed to (uniform routing: E * (1 - (1 - k/E)^c))."""
        if not (self.experts and self.experts_per_token and self.expert_weight_bytes):
            return self.weight_bytes
        untouched = (1.0 - self.experts_per_token / self.experts) ** max(concurrency, 1)
        dense = self.weight_bytes - self.expert_weight_bytes
        return dense + self.expert_weight_bytes * (1.0 - untouched)


def tpot_floor_seconds(
    model: ModelBytes, concurrency: int, context_tokens: float, bandwidth: float, tp: int
) -> float:
    """Bytes of one decode step over the tensor-parallel group's bandwidth."""
    step = model.step_weight_bytes(concurrency) + (
        max(concurrency, 1) * context_tokens * model.kv_bytes_per_token
    )
    return step / (bandwidth * max(tp, 1))


def gpu_bandwidth(gpu: Mapping[str, Any]) -> tuple[float | None, str]:
    """(bytes/s, where it came from) for one GPU of a provenance record."""
    name = str(gpu.get("name") or "")
    for pattern, bandwidth in GPU_BANDWIDTH:
        if pattern in name:
            return bandwidth, f"datasheet ({pattern})"
    return None, f"no bandwidth known for {name or 'this GPU'}: set roofline.memory_bandwidth"


def _flag(flags: Mapping[str, Any], names: tuple[str, ...]) -> str | None:
    """A server flag's value from the spec (``server.flags``), under any of its names."""
    for name in names:
        value = flags.get(name)
        if value is not None and not isinstance(value, bool):
            return str(value)
    return None


def roofline_inputs(
    spec: Mapping[str, Any], provenance: Mapping[str, Any] | None
) -> tuple[ModelBytes, float, int, str] | None:
    """(model bytes, bandwidth per GPU, TP size, source note) from the spec's ``roofline``
    section, else what the agent read from the model's files and NVML and the spec's server
    flags (TP size, KV-cache dtype); None when unknown."""
    given = dict(spec.get("roofline") or {})
    prov = dict(provenance or {})
    model = dict(prov.get("model") or {})
    flags = dict((spec.get("server") or {}).get("flags") or {})

    def pick(name: str) -> float:
        """The spec's figure, else the one read from the model's files, else 0 (a figure out
        of range, as a broken header's 10**400 bytes, is none: intervals.measured)."""
        for source in (given, model):
            value = measured(source.get(name))
            if value is not None and value >= 0:
                return value
        return 0.0

    if not pick("weight_bytes"):
        return None
    kv = pick("kv_bytes_per_token")
    kv_dtype = _flag(flags, (KV_DTYPE_FLAG,)) or ""
    if "kv_bytes_per_token" not in given and kv_dtype.startswith("fp8"):
        kv = kv / (pick("kv_dtype_bytes") or 1.0)  # an fp8 cache holds one byte per value
    bytes_ = ModelBytes(
        weight_bytes=pick("weight_bytes"),
        kv_bytes_per_token=kv,
        expert_weight_bytes=pick("expert_weight_bytes"),
        experts=int(pick("experts")),
        experts_per_token=int(pick("experts_per_token")),
    )
    gpus = list(prov.get("gpus") or [])
    if given.get("memory_bandwidth"):
        bandwidth, source = float(given["memory_bandwidth"]), "spec roofline.memory_bandwidth"
    elif gpus:
        found = [gpu_bandwidth(g) for g in gpus]
        known = [b for b, _ in found if b]
        if not known:
            return None
        bandwidth, source = min(known), found[0][1]  # the slowest GPU paces the group
    else:
        return None
    tp_text = given.get("tp") or _flag(flags, TP_FLAGS) or 1
    try:
        tp = int(tp_text)
    except ValueError:
        tp = 1
    return bytes_, bandwidth, tp, source


def decode_context(benchmark: Mapping[str, Any]) -> float:
    """Mean context of a decode step: the prompt plus half the output, on average."""
    return float(benchmark.get("input_len") or 0) + float(benchmark.get("output_len") or 0) / 2.0


def annotate_points(
    points: list[dict[str, Any]], spec: Mapping[str, Any], provenance: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """Add ``tpot_floor_ms`` and ``roofline_efficiency`` to each closed-loop point; returns
    the inputs used (for the report), or None when the floor cannot be known."""
    inputs = roofline_inputs(spec, provenance)
    if inputs is None:
        return None
    model, bandwidth, tp, source = inputs
    context = decode_context(spec.get("benchmark") or {})
    for point in points:
        concurrency = point.get("concurrency")
        if not isinstance(concurrency, int) or concurrency < 1:
            continue
        floor_ms = 1000.0 * tpot_floor_seconds(model, int(concurrency), context, bandwidth, tp)
        point["tpot_floor_ms"] = floor_ms
        measured = point.get("median_tpot_ms")
        point["roofline_efficiency"] = (
            floor_ms / measured if isinstance(measured, int | float) and measured > 0 else None
        )
    return {
        "weight_bytes": model.weight_bytes,
        "kv_bytes_per_token": model.kv_bytes_per_token,
        "expert_weight_bytes": model.expert_weight_bytes,
        "memory_bandwidth_bytes_per_second": bandwidth,
        "bandwidth_source": source,
        "tp": tp,
        "decode_context_tokens": context,
    }


def power_share(
    gpu_summary: Mapping[str, Any] | None, provenance: Mapping[str, Any] | None
) -> float | None:
    """Mean GPU power over the sum of the power limits (scraped, else recorded at start)."""
    summary = dict(gpu_summary or {})
    power = summary.get("benchmark_mean_power_watts_total") or summary.get("mean_power_watts_total")
    limits = [g.get("power_limit_watts") for g in (summary.get("gpus") or {}).values()]
    if not all(isinstance(v, int | float) and v > 0 for v in limits) or not limits:
        limits = [g.get("power_limit_watts") for g in (provenance or {}).get("gpus") or []]
    if (
        not isinstance(power, int | float)
        or not limits
        or not all(isinstance(v, int | float) and v > 0 for v in limits)
    ):
        return None
    return float(power) / float(sum(limits))
