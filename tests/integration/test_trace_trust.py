"""Integration: traces are bounded before work and served only as the plain files kept
(issue 36.5). As root, in a PID and mount namespace of its own: a root server hard-links a
root-only file into its trace folder (the old ``FetchProfile`` served it), swaps a kept name for
a link or a FIFO, or leaves an 8 GiB sparse trace (gzipped whole before the cap applied: 122 s)."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from tunelab.agent.engines.traces import (
    TRACE_DIR,
    TraceNotFound,
    keep_traces,
    listed_in,
    read_trace,
)

pytestmark = [pytest.mark.pidns, pytest.mark.needs_root]


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "root-only"
    path.write_text("root's secret\n")
    path.chmod(0o600)
    return path


def folder(tmp_path: Path) -> Path:
    traces = tmp_path / "run" / TRACE_DIR
    traces.mkdir(parents=True)
    return traces


def served(run_dir: Path, name: str) -> bytes:
    return b"".join(chunk for _, chunk, _, _ in read_trace(run_dir, name, {name}, 0, 0))


def test_a_hard_link_in_the_trace_folder_is_neither_kept_nor_served(
    tmp_path: Path, secret: Path
) -> None:
    traces = folder(tmp_path)
    os.link(secret, traces / "rank0.pt.trace.json.gz")
    os.link(secret, traces / "rank1.pt.trace.json")
    kept = keep_traces(tmp_path / "run", 10_000)
    assert kept["traces"] == [], kept
    warnings = "\n".join(kept["warnings"])
    assert "rank0.pt.trace.json.gz has 3 links" in warnings, warnings  # the secret + 2 links
    assert not (traces / "rank0.pt.trace.json.gz").exists()  # the link went, not the file
    assert not list(traces.glob("rank1*")) and secret.read_text() == "root's secret\n"
    # a listing forged to name it (an old result, a bug): the open file is checked, not the name
    os.link(secret, traces / "rank0.pt.trace.json.gz")
    with pytest.raises(TraceNotFound, match="has 2 links: not served"):
        served(tmp_path / "run", "rank0.pt.trace.json.gz")


@pytest.mark.parametrize("swap", ["hard link", "symlink", "fifo"])
def test_a_kept_trace_swapped_afterwards_is_refused_at_once(
    tmp_path: Path, secret: Path, swap: str
) -> None:
    traces = folder(tmp_path)
    (traces / "t.pt.trace.json").write_text('{"traceEvents": []}')
    kept = keep_traces(tmp_path / "run", 10_000)
    (name,) = listed_in(kept)
    assert gzip.decompress(served(tmp_path / "run", name)) == b'{"traceEvents": []}'
    (traces / name).unlink()
    if swap == "hard link":
        os.link(secret, traces / name)
    elif swap == "symlink":
        (traces / name).symlink_to(secret)
    else:
        os.mkfifo(traces / name)  # a blocking open would hang the RPC's thread
    with pytest.raises(TraceNotFound):
        served(tmp_path / "run", name)


def test_a_sparse_8_gib_trace_is_deleted_before_any_compression(tmp_path: Path) -> None:
    traces = folder(tmp_path)
    with (traces / "huge.pt.trace.json").open("wb") as sparse:
        sparse.truncate(8 << 30)
    (traces / "small.pt.trace.json").write_text('{"traceEvents": []}')
    kept = keep_traces(tmp_path / "run", 500 * 1000 * 1000)
    assert [t["name"] for t in kept["traces"]] == ["small.pt.trace.json.gz"]
    (warning,) = [w for w in kept["warnings"] if "huge" in w]
    assert "8589934592 bytes before compression" in warning and "without compressing" in warning
    assert sorted(p.name for p in traces.iterdir()) == ["small.pt.trace.json.gz"]  # no partial


def test_compression_stops_at_the_cap_and_leaves_nothing(tmp_path: Path) -> None:
    traces = folder(tmp_path)
    (traces / "noise.pt.trace.json").write_bytes(os.urandom(300_000))  # gzip cannot shrink it
    kept = keep_traces(tmp_path / "run", 100_000)
    assert kept["traces"] == []
    assert any("compressed past the cap" in w for w in kept["warnings"]), kept
    assert list(traces.iterdir()) == []
