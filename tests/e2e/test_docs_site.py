"""E2E: the docs site builds with ``--strict`` and README stays the short front door."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.readme_blocks import runnable_blocks

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"


def test_mkdocs_builds_strict(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "site" / "index.html").is_file()
    # a runnable block renders as a console block, not as inline text that swallows the page
    for page in sorted((REPO / "docs").glob("*.md")):
        blocks = len(runnable_blocks(page.read_text()))
        if blocks and page.stem != "index":
            html = (tmp_path / "site" / page.stem / "index.html").read_text()
            assert html.count('class="runnable highlight"') == blocks, page.name
    assert (tmp_path / "site" / "search" / "index.html").is_file() or (
        tmp_path / "site" / "search" / "search_index.json"
    ).is_file()


def test_readme_is_the_front_door() -> None:
    text = README.read_text()
    assert len(text.encode()) < 15 * 1024
    first_block = text.split("```")[1]
    assert [line.split()[:2] for line in first_block.strip().splitlines()] == [
        ["make", "demo"],
        ["make", "test"],
    ]


def test_readme_links_reach_docs_pages() -> None:
    for target in re.findall(r"\]\((docs/[^)#]+)", README.read_text()):
        assert (REPO / target).is_file(), target
