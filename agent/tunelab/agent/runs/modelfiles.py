"""What a model directory says about the bytes a decode step reads: ``config.json`` (layers, KV
heads, experts) and the safetensors index and headers (weight bytes, and how many are in routed
experts). Only headers are read, each bounded, so a 700 GB checkpoint costs milliseconds."""

from __future__ import annotations

import hashlib
import json
import re
import struct
from pathlib import Path
from typing import Any

MAX_CONFIG_BYTES = 4 * 1024 * 1024
MAX_INDEX_BYTES = 64 * 1024 * 1024
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors format's own limit
MAX_SHARDS = 2048
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}
EXPERT_TENSOR = re.compile(r"\.experts\.")  # routed experts; shared_experts do not match
MAX_WEIGHT_BYTES = 2**50  # 1 PiB: a tensor, a shard or a checkpoint past it is a broken header
MAX_CONFIG_INT = 2**31  # layers, heads, head sizes, experts: a count past it is not a model


def _read_bounded(path: Path, limit: int) -> bytes:
    with path.open("rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path.name} is larger than {limit} bytes")
    return data


def safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of one safetensors file (8-byte little-endian length, then JSON)."""
    with path.open("rb") as handle:
        head = handle.read(8)
        if len(head) != 8:
            raise ValueError(f"{path.name}: not a safetensors file")
        (length,) = struct.unpack("<Q", head)
        if length > MAX_HEADER_BYTES:
            raise ValueError(f"{path.name}: header of {length} bytes")
        header = json.loads(handle.read(length))
    if not isinstance(header, dict):
        raise ValueError(f"{path.name}: header is not an object")
    return header


def _tensor_bytes(headers: list[dict[str, Any]]) -> tuple[int, int]:
    total = experts = 0
    for header in headers:
        for name, info in header.items():
            if name == "__metadata__" or not isinstance(info, dict):
                continue
            size = _tensor_size(name, info.get("data_offsets", (0, 0)))
            total += size
            experts += size if EXPERT_TENSOR.search(name) else 0
            if total > MAX_WEIGHT_BYTES:
                raise ValueError(f"safetensors headers declare more than {MAX_WEIGHT_BYTES} bytes")
    return total, experts


def _tensor_size(name: str, offsets: Any) -> int:
    """``end - start`` of a header's ``data_offsets``: two integers, 0 <= start <= end <= 1 PiB
    (a header declaring a 10**400-byte tensor is refused here, with the tensor named)."""
    if (
        not isinstance(offsets, list | tuple)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1] <= MAX_WEIGHT_BYTES
    ):
        shown = repr(offsets)[:60]
        raise ValueError(
            f"tensor {name[:80]!r}: data_offsets {shown} is not 0 <= start <= end <= "
            f"{MAX_WEIGHT_BYTES}"
        )
    return int(offsets[1] - offsets[0])


def weight_bytes(model_dir: Path) -> dict[str, Any]:
    """``{"weight_bytes", "expert_weight_bytes", "weights_source"}`` from the checkpoint."""
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        doc = json.loads(_read_bounded(index, MAX_INDEX_BYTES))
        shards = sorted(set((doc.get("weight_map") or {}).values()))[:MAX_SHARDS]
        headers = [safetensors_header(model_dir / s) for s in shards if (model_dir / s).is_file()]
        total, experts = _tensor_bytes(headers)
        if len(headers) == len(shards) and total:
            return {
                "weight_bytes": total,
                "expert_weight_bytes": experts,
                "weights_source": "safetensors headers",
            }
        listed = (doc.get("metadata") or {}).get("total_size")
        if isinstance(listed, int | float) and 0 < listed <= MAX_WEIGHT_BYTES:
            return {
                "weight_bytes": int(listed),
                "expert_weight_bytes": 0,
                "weights_source": "safetensors index total_size",
            }
    files = sorted(model_dir.glob("*.safetensors"))[:MAX_SHARDS]
    if files:
        total, experts = _tensor_bytes([safetensors_header(f) for f in files])
        return {
            "weight_bytes": total,
            "expert_weight_bytes": experts,
            "weights_source": "safetensors headers",
        }
    return {}


def _int(config: dict[str, Any], *names: str) -> int:
    for name in names:
        value = config.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            if not 0 <= value <= MAX_CONFIG_INT:
                raise ValueError(f"config.json {name}: {str(value)[:24]} is outside 0..2**31")
            return value
    return 0


def kv_figures(config: dict[str, Any]) -> dict[str, Any]:
    """KV-cache bytes per token of context (all layers) in the model's dtype, and its experts."""
    nested = config.get("text_config")  # multimodal checkpoints keep the LLM's figures here
    text: dict[str, Any] = nested if isinstance(nested, dict) else config
    layers = _int(text, "num_hidden_layers", "n_layer", "num_layers")
    heads = _int(text, "num_attention_heads", "n_head")
    dtype = str(text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or "")
    dtype_bytes = DTYPE_BYTES.get(dtype, 2)
    out: dict[str, Any] = {
        "architecture": (config.get("architectures") or [""])[0],
        "kv_dtype_bytes": dtype_bytes,
        "experts": _int(text, "n_routed_experts", "num_local_experts", "num_experts"),
        "experts_per_token": _int(text, "num_experts_per_tok", "moe_topk", "top_k"),
    }
    if _int(text, "kv_lora_rank"):  # multi-head latent attention: one compressed vector a layer
        per_layer = _int(text, "kv_lora_rank") + _int(text, "qk_rope_head_dim")
        out["kv_bytes_per_token"] = layers * per_layer * dtype_bytes
    elif layers and heads:
        kv_heads = _int(text, "num_key_value_heads") or heads
        head_dim = _int(text, "head_dim") or _int(text, "hidden_size") // heads
        out["kv_bytes_per_token"] = 2 * layers * kv_heads * head_dim * dtype_bytes
    return out


def describe_model(path: str) -> dict[str, Any]:
    """Provenance of a model directory: path, config hash, weight and KV bytes. A path that is
    not a local directory (a hub id, a simulator name) gives just the path."""
    out: dict[str, Any] = {"path": path}
    model_dir = Path(path)
    config_path = model_dir / "config.json"
    if not path or not config_path.is_file():
        return out
    try:
        raw = _read_bounded(config_path, MAX_CONFIG_BYTES)
        out["config_sha256"] = hashlib.sha256(raw).hexdigest()
        config = json.loads(raw)
        if isinstance(config, dict):
            out.update(kv_figures(config))
        out.update(weight_bytes(model_dir))
    except (OSError, ValueError) as exc:  # JSONDecodeError is a ValueError
        out["error"] = f"{type(exc).__name__}: {exc}"[:300]
    return out
