"""The HTML report of a comparison (``tunelab report``)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from tunelab.analysis.report.page import render_report
from tunelab.analysis.report.search_page import render_search_report

__all__ = [
    "render_report",
    "render_search_report",
    "report_bytes",
    "write_page",
    "write_report",
    "write_search_report",
]


def write_page(text: str, path: Path) -> None:
    """Write the page next to its final name, then rename: a reader never sees half a file."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)


def write_report(doc: dict[str, Any], path: Path, title: str) -> None:
    write_page(render_report(doc, title), path)


def write_search_report(
    search: dict[str, Any], compare_doc: dict[str, Any], path: Path, title: str
) -> None:
    write_page(render_search_report(search, compare_doc, title), path)


def report_bytes(document: dict[str, Any]) -> bytes:
    """The group's HTML report, as ``tunelab report`` writes it (an MLflow run's artifact)."""
    with tempfile.TemporaryDirectory(prefix="tunelab-report-") as folder:
        path = Path(folder) / "report.html"
        write_report(document, path, title="tunelab report")
        return path.read_bytes()
