"""The HTML report of a comparison (``tunelab report``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tunelab.controller.report.page import render_report

__all__ = ["render_report", "write_report"]


def write_report(doc: dict[str, Any], path: Path, title: str) -> None:
    """Write the page next to its final name, then rename: a reader never sees half a file."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(render_report(doc, title), encoding="utf-8")
    partial.replace(path)
