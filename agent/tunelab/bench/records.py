"""What the bench process writes besides progress: one JSON line per request, and the result
document (atomically, so a reader never sees half of it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tunelab.bench.stats import tpot
from tunelab.bench.stream import RequestRecord


def request_line(point_index: int, rec: RequestRecord, origin: float) -> dict[str, Any]:
    """One line of the per-request JSONL: its settings, outcome, timings and every chunk."""
    line: dict[str, Any] = {
        "point": point_index,
        "index": rec.index,
        "warmup": rec.warmup,
        "ok": rec.ok,
        "error_kind": rec.error_kind,
        "error": rec.error,
        "input_len": rec.input_len,
        "prompt_tokens": rec.prompt_tokens,
        "max_tokens": rec.max_tokens,
        "output_tokens": rec.output_tokens,
        "token_source": rec.token_source or None,
        "finish_reason": rec.finish_reason,
        "start_s": round(rec.start - origin, 6),  # from the point's clock start
        "end_s": round(rec.end - origin, 6),
        "arrived_s": round((rec.arrived or rec.scheduled or rec.start) - origin, 6),
        "dispatch_lag_ms": round((rec.start - rec.scheduled) * 1000.0, 4),
        "send_delay_ms": round((rec.dispatched - rec.start) * 1000.0, 4),
        "queue_ms": round(rec.queue_time * 1000.0, 4),
        "prefix_group": rec.group,
        "turn": rec.turn,
        "conversation": rec.conversation,
        "ttft_ms": None,
        "e2e_ms": None,
        "tpot_ms": None,
        "chunk_ms": [round((t - rec.dispatched) * 1000.0, 4) for t in rec.chunk_times],
        "chunk_tokens": rec.chunk_tokens,
    }
    if rec.ok:
        per_token = tpot(rec)
        line["ttft_ms"] = rec.ttft * 1000.0
        line["e2e_ms"] = rec.latency * 1000.0
        line["tpot_ms"] = per_token * 1000.0 if per_token is not None else None
    return line


def write_result(path: Path, doc: dict[str, Any]) -> None:
    """Write the result document atomically: a reader never sees half of it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    tmp.replace(path)
