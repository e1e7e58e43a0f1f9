"""``tunelab server wait``'s bar ends full after READY (issue 24: it read ``0/83``)."""

from __future__ import annotations

import io
import re

from rich.console import Console

from tunelab.cli.progress_view import ServerProgressView
from tunelab.v1 import server_pb2


def test_the_bar_ends_full_under_ready() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100, color_system=None)
    loading = server_pb2.Server(
        state=server_pb2.SERVER_STATE_LOADING,
        phase=server_pb2.SERVER_PHASE_LOADING_WEIGHTS,
        progress=server_pb2.LoadProgress(
            label="Loading safetensors checkpoint shards", done=40, total=83,
            phase=server_pb2.SERVER_PHASE_LOADING_WEIGHTS,
        ),
    )  # fmt: skip
    ready = server_pb2.Server(
        state=server_pb2.SERVER_STATE_READY, phase=server_pb2.SERVER_PHASE_READY, ready_seconds=9.6
    )
    with ServerProgressView(enabled=True, console=console) as view:
        view.update(loading)
        view.update(ready)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())  # cursor moves, not text
    last = [line for line in re.split(r"[\r\n]", text) if line.strip()][-1]
    assert "READY in 9.6 s" in last and "83/83" in last, last
    assert "0/83" not in last
