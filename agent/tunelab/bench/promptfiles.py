"""Reading dataset files: prompt files (ShareGPT JSON, OpenAI chat JSONL, plain JSONL) and
request traces (mooncake JSONL). Nothing is downloaded; every problem names its line.

Formats:
- ``sharegpt``: a JSON array (or JSONL) of ``{"conversations": [{"from": "human", "value":
  ...}, {"from": "gpt", "value": ...}, ...]}``; the first human turn is the prompt, the reply
  after it sets the output length (unless an output length is given);
- ``chat``: JSONL of ``{"messages": [{"role": ..., "content": ...}, ...]}``, optional
  ``output_len`` / ``max_tokens``;
- ``jsonl``: JSONL of ``{"prompt": "...", "output_len": N}`` (``output_len`` optional; vLLM's
  ``custom`` dataset);
- ``trace``: JSONL of ``{"timestamp_ms" | "timestamp": T, "input_length": N,
  "output_length": M, "hash_ids": [...]}`` (AIPerf's mooncake_trace, vLLM's timed_trace).

A malformed line is reported (``line 7: not JSON``) and skipped; a file with no usable line is
refused (:class:`DatasetFileError`), so a run never starts on nothing.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from tunelab.common.specbounds import FIELD_RANGES
from tunelab.common.untrusted import UntrustedFile, read_untrusted

FORMATS = ("auto", "sharegpt", "chat", "jsonl", "trace")
MAX_PROBLEMS_SHOWN = 20
MAX_FILE_BYTES = 2 << 30
READ_SECONDS = 300.0
# A trace row's lengths are those a spec may ask for (specbounds: BuiltinBenchmark.input_len):
# a 68-byte row with input_length 10**12 made a prompt of that many tokens (1.5 GB in 13 s).
# hash_ids name prompt blocks (mooncake: 512 tokens each; a 128k-token prompt has 256).
MAX_TRACE_TOKENS = int(FIELD_RANGES["BuiltinBenchmark.input_len"].high)
MAX_HASH_IDS = 65_536
MAX_TRACE_STAMP = 1e13  # a trace timestamp: milliseconds since 1970 up to the year 2286


class DatasetFileError(ValueError):
    """The file cannot be used: unreadable, or no usable line (with the problems found)."""

    def __init__(self, path: str, message: str, problems: list[str] | None = None) -> None:
        shown = (problems or [])[:MAX_PROBLEMS_SHOWN]
        more = len(problems or []) - len(shown)
        detail = "; ".join(shown) + (f"; and {more} more" if more > 0 else "")
        super().__init__(f"{path}: {message}" + (f" ({detail})" if detail else ""))
        self.path = path
        self.problems = problems or []


@dataclass(frozen=True)
class FileItem:
    """One usable prompt of a file."""

    prompt: str  # the text sent as the completions prompt (chat: the messages joined)
    messages: tuple[tuple[str, str], ...] | None  # (role, content) for the chat API
    output_len: int | None  # from the file; None: the run's setting decides
    reply: str | None = None  # ShareGPT's recorded answer (sets the output length)


@dataclass(frozen=True)
class TraceRow:
    line: int
    timestamp: float  # as recorded (unit given by the field: ms for timestamp_ms)
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


@dataclass(frozen=True)
class Loaded:
    items: list[FileItem]
    rows: list[TraceRow]
    problems: list[str]  # "line N: ..." for each skipped line
    sha256: str
    format: str
    timestamp_field: str = ""


def read_bytes(path: str) -> bytes:
    """The file's bytes, read as an untrusted file (tunelab.common.untrusted: no FIFO, no link)."""
    try:
        return read_untrusted(path, MAX_FILE_BYTES, seconds=READ_SECONDS)
    except UntrustedFile as exc:
        raise DatasetFileError(path, exc.why) from None
    except OSError as exc:
        raise DatasetFileError(path, f"cannot read: {exc.strerror or exc}") from None


def load(path: str, fmt: str = "auto") -> Loaded:
    data = read_bytes(path)
    digest = hashlib.sha256(data).hexdigest()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetFileError(path, f"not UTF-8 (byte {exc.start})") from None
    if fmt == "auto":
        fmt = _guess(text)
    problems: list[str] = []
    items: list[FileItem] = []
    rows: list[TraceRow] = []
    field = ""
    if fmt == "sharegpt" and text.lstrip().startswith("["):
        try:
            entries = json.loads(text)
        except ValueError as exc:
            raise DatasetFileError(path, f"not JSON: {exc}") from None
        if not isinstance(entries, list):
            raise DatasetFileError(path, "a ShareGPT file is a JSON array of conversations")
        for n, entry in enumerate(entries, 1):
            _add(items, problems, f"entry {n}", entry, _sharegpt)
    else:
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                problems.append(f"line {n}: not JSON")
                continue
            if fmt == "trace":
                try:
                    row, field = _trace_row(n, obj, field)
                except ValueError as exc:
                    problems.append(f"line {n}: {exc}")
                    continue
                rows.append(row)
            else:
                parse = {"sharegpt": _sharegpt, "chat": _chat, "jsonl": _plain}[fmt]
                _add(items, problems, f"line {n}", obj, parse)
    if not items and not rows:
        raise DatasetFileError(path, f"no usable {fmt} entry", problems or ["the file is empty"])
    return Loaded(items, rows, problems, digest, fmt, field)


def _guess(text: str) -> str:
    head = text.lstrip()
    if head.startswith("["):
        return "sharegpt"
    first = head.split("\n", 1)[0]
    try:
        obj = json.loads(first)
    except ValueError:
        return "jsonl"
    if isinstance(obj, dict):
        if "conversations" in obj:
            return "sharegpt"
        if "messages" in obj:
            return "chat"
        if "input_length" in obj:
            return "trace"
    return "jsonl"


def _add(items: list[FileItem], problems: list[str], where: str, obj: Any, parse: Any) -> None:
    try:
        items.append(parse(obj))
    except ValueError as exc:
        problems.append(f"{where}: {exc}")


def _output_len(obj: dict[str, Any]) -> int | None:
    for key in ("output_len", "max_tokens", "output_tokens"):  # output_tokens: vLLM's custom
        if key in obj:
            value = obj[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{key} must be an integer >= 1")
            return value
    return None


def _object(obj: Any) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    return obj


def _plain(obj: Any) -> FileItem:
    obj = _object(obj)
    prompt = obj.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError('no "prompt" string')
    return FileItem(prompt, None, _output_len(obj))


def _chat(obj: Any) -> FileItem:
    obj = _object(obj)
    messages = obj.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError('no "messages" list')
    out: list[tuple[str, str]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ValueError(f"messages[{i}] is not an object")
        role, content = m.get("role"), m.get("content")
        if not isinstance(role, str) or not isinstance(content, str):
            raise ValueError(f'messages[{i}] needs "role" and "content" strings')
        out.append((role, content))
    if not any(c.strip() for _, c in out):
        raise ValueError("every message is empty")
    return FileItem("\n".join(c for _, c in out), tuple(out), _output_len(obj))


def _sharegpt(obj: Any) -> FileItem:
    obj = _object(obj)
    turns = obj.get("conversations")
    if not isinstance(turns, list):
        raise ValueError('no "conversations" list')
    if len(turns) < 2:
        raise ValueError("fewer than two turns")
    pair = []
    for i, t in enumerate(turns[:2]):
        if not isinstance(t, dict) or not isinstance(t.get("value"), str):
            raise ValueError(f'conversations[{i}] needs "from" and "value"')
        if not isinstance(t.get("from"), str):
            raise ValueError(f'conversations[{i}] needs "from" and "value"')
        pair.append(t["value"])
    if not pair[0].strip():
        raise ValueError("the first turn is empty")
    return FileItem(pair[0], (("user", pair[0]),), _output_len(obj), reply=pair[1])


def _trace_row(n: int, obj: Any, field: str) -> tuple[TraceRow, str]:
    obj = _object(obj)
    key = field or ("timestamp_ms" if "timestamp_ms" in obj else "timestamp")
    stamp = obj.get(key)
    if (
        isinstance(stamp, bool)
        or not isinstance(stamp, int | float)
        or not 0 <= stamp <= MAX_TRACE_STAMP  # 1e400 parses as inf, 1e308 would sleep for ever
    ):
        raise ValueError(f'"{key}" must be a number in 0..{MAX_TRACE_STAMP:.0e}')
    values = []
    for name in ("input_length", "output_length"):
        v = obj.get(name)
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_TRACE_TOKENS:
            raise ValueError(f'"{name}" must be an integer from 1 to {MAX_TRACE_TOKENS}')
        values.append(v)
    ids = obj.get("hash_ids", [])
    if not isinstance(ids, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) for h in ids
    ):
        raise ValueError('"hash_ids" must be a list of integers')
    if len(ids) > MAX_HASH_IDS:
        raise ValueError(f'"hash_ids" has {len(ids)} entries (at most {MAX_HASH_IDS})')
    return TraceRow(n, float(stamp), values[0], values[1], tuple(ids)), key
