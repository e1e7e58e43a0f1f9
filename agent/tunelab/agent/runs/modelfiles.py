"""What a model directory says about the bytes a decode step reads: ``config.json`` (layers, KV
heads, experts) and the safetensors index and headers (weight bytes, and how many are in routed
experts). Only headers are read, each bounded, so a 700 GB checkpoint costs milliseconds."""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
from pathlib import Path
from typing import Any

from tunelab.common.sanitize import printable
from tunelab.common.untrusted import link_root, read_untrusted

MAX_CONFIG_BYTES = 4 * 1024 * 1024
MAX_INDEX_BYTES = 64 * 1024 * 1024
# One header lists a shard's tensors (~100 bytes each): 16 MiB is 160,000 tensors, where the
# largest checkpoints have under 1,000 a shard (the format itself allows 100 MB). All shards'
# headers together: MAX_HEADERS_BYTES, so an index naming one large header many times, or
# thousands of shards, costs at most that much reading and one header's parse at a time.
MAX_HEADER_BYTES = 16 * 1024 * 1024
MAX_HEADERS_BYTES = 256 * 1024 * 1024
MAX_SHARDS = 2048
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}
EXPERT_TENSOR = re.compile(r"\.experts\.")  # routed experts; shared_experts do not match
MAX_WEIGHT_BYTES = 2**50  # 1 PiB: a tensor, a shard or a checkpoint past it is a broken header
MAX_CONFIG_INT = 2**31  # layers, heads, head sizes, experts: a count past it is not a model


class _Budget:
    """What is left of ``MAX_HEADERS_BYTES`` for one model folder."""

    def __init__(self) -> None:
        self.left = MAX_HEADERS_BYTES

    def take(self, path: Path, length: int) -> None:
        if length > self.left:
            raise ValueError(f"{path.name}: headers past {MAX_HEADERS_BYTES} bytes in all")
        self.left -= length


def safetensors_header(
    path: Path, root: Path | None = None, budget: _Budget | None = None
) -> dict[str, Any]:
    """The JSON header of one safetensors file (8-byte little-endian length, then JSON), read
    as an untrusted file confined to ``root`` (its links included)."""
    within = root if root is not None else link_root(path.parent)
    head = read_untrusted(path, 8, links_within=within, whole=False)
    if len(head) != 8:
        raise ValueError(f"{path.name}: not a safetensors file")
    (length,) = struct.unpack("<Q", head)
    if length > MAX_HEADER_BYTES:
        raise ValueError(f"{path.name}: header of {length} bytes (at most {MAX_HEADER_BYTES})")
    if budget is not None:
        budget.take(path, length)
    raw = read_untrusted(path, length, links_within=within, offset=8, whole=False)
    if len(raw) != length:
        raise ValueError(f"{path.name}: header of {length} bytes, file ends after {len(raw)}")
    header = json.loads(raw)
    if not isinstance(header, dict):
        raise ValueError(f"{path.name}: header is not an object")
    return header


def _tensor_bytes(header: dict[str, Any]) -> tuple[int, int]:
    total = experts = 0
    for name, info in header.items():
        if name == "__metadata__" or not isinstance(info, dict):
            continue
        size = _tensor_size(name, info.get("data_offsets", (0, 0)))
        total += size
        experts += size if EXPERT_TENSOR.search(name) else 0
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


def _sum_headers(files: list[Path], root: Path) -> tuple[int, int]:
    """Weight bytes over ``files``, each file once however often it is named (by inode), one
    header in memory at a time."""
    budget = _Budget()
    seen: set[tuple[int, int]] = set()
    total = experts = 0
    for file in files:
        info = file.stat()
        if (info.st_dev, info.st_ino) in seen:
            continue
        seen.add((info.st_dev, info.st_ino))
        t, e = _tensor_bytes(safetensors_header(file, root, budget))
        total, experts = total + t, experts + e
        if total > MAX_WEIGHT_BYTES:
            raise ValueError(f"safetensors headers declare more than {MAX_WEIGHT_BYTES} bytes")
    return total, experts


def _shards(model_dir: Path, names: Any) -> list[Path]:
    """The index's shard names as files of ``model_dir``, each spelling once, at most
    ``MAX_SHARDS`` (a name that is not a string is dropped)."""
    paths = {os.path.normpath(model_dir / n) for n in set(names) if isinstance(n, str)}
    return [Path(p) for p in sorted(paths)[:MAX_SHARDS]]


def weight_bytes(model_dir: Path) -> dict[str, Any]:
    """``{"weight_bytes", "expert_weight_bytes", "weights_source"}`` from the checkpoint."""
    root = link_root(model_dir)
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        doc = json.loads(read_untrusted(index, MAX_INDEX_BYTES, links_within=root))
        weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
        shards = _shards(model_dir, weight_map.values() if isinstance(weight_map, dict) else ())
        present = [s for s in shards if s.is_file()]
        total, experts = _sum_headers(present, root)
        if len(present) == len(shards) and total:
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
        total, experts = _sum_headers(files, root)
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


def _first(value: Any) -> str:
    return str(value[0]) if isinstance(value, list) and value else ""


def kv_figures(config: dict[str, Any]) -> dict[str, Any]:
    """KV-cache bytes per token of context (all layers) in the model's dtype, and its experts."""
    nested = config.get("text_config")  # multimodal checkpoints keep the LLM's figures here
    text: dict[str, Any] = nested if isinstance(nested, dict) else config
    layers = _int(text, "num_hidden_layers", "n_layer", "num_layers")
    heads = _int(text, "num_attention_heads", "n_head")
    dtype = str(text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or "")
    dtype_bytes = DTYPE_BYTES.get(dtype, 2)
    out: dict[str, Any] = {
        "architecture": printable(_first(config.get("architectures")), 128),
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
        raw = read_untrusted(config_path, MAX_CONFIG_BYTES, links_within=link_root(model_dir))
        out["config_sha256"] = hashlib.sha256(raw).hexdigest()
        config = json.loads(raw)
        if isinstance(config, dict):
            out.update(kv_figures(config))
        out.update(weight_bytes(model_dir))
    except (OSError, ValueError) as exc:  # JSONDecodeError is a ValueError
        out["error"] = f"{type(exc).__name__}: {exc}"[:300]
    return out
