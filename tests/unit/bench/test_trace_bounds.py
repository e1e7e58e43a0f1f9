"""The load generator's memory on bad trace rows (issue 45, "load generator"): a 68-byte row
with ``input_length: 10**12``, or 200,000 ``hash_ids``, took it to 1.5 GB in 13 s. Such a row
is refused with the field named, and a file of nothing else is refused whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tunelab.bench.promptfiles import MAX_HASH_IDS, MAX_TRACE_TOKENS, DatasetFileError, load


def test_rows_past_the_bounds_are_refused_with_the_field_named(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 0, "input_length": 10**12, "output_length": 5},
        {"timestamp": 0, "input_length": 5, "output_length": 10**12},
        {"timestamp": 0, "input_length": 8, "output_length": 5, "hash_ids": list(range(200_000))},
        {"timestamp": 1, "input_length": 8, "output_length": 5, "hash_ids": [1]},
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    loaded = load(str(path), "trace")
    assert [r.line for r in loaded.rows] == [4]
    assert loaded.problems == [
        f'line 1: "input_length" must be an integer from 1 to {MAX_TRACE_TOKENS}',
        f'line 2: "output_length" must be an integer from 1 to {MAX_TRACE_TOKENS}',
        f'line 3: "hash_ids" has 200000 entries (at most {MAX_HASH_IDS})',
    ]
    path.write_text(json.dumps(rows[0]) + "\n")  # 68 bytes, nothing usable: refused whole
    with pytest.raises(DatasetFileError, match="input_length"):
        load(str(path), "trace")
