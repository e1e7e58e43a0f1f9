"""E2E: every block of README.md and docs/*.md fenced ``console {.runnable}`` runs.

Each block runs in its own network, mount and pid namespaces (``unshare``): README's fixed ports
(50051, 50050, 8100) and ``/tmp`` paths meet nothing else on the machine, and the daemons a block
starts end with it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import readme_blocks
from tests.support.readme_blocks import REPO, runnable_blocks

RUNNER = Path(readme_blocks.__file__)
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCKS = [
    {**block, "page": page.relative_to(REPO).as_posix()}
    for page in PAGES
    for block in runnable_blocks(page.read_text())
]


def test_docs_have_runnable_blocks_and_say_how_they_are_marked() -> None:
    assert len(BLOCKS) >= 2
    assert "`console {.runnable}`" in (REPO / "docs" / "cli.md").read_text()


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b['page']}:{b['line']}" for b in BLOCKS])
def test_readme_block_runs_as_written(block: dict[str, object], tmp_path: Path) -> None:
    spec = tmp_path / "block.json"
    spec.write_text(json.dumps(block["commands"]))
    done = subprocess.run(
        ["unshare", "--net", "--mount", "--pid", "--fork", "--mount-proc",
         sys.executable, "-P", str(RUNNER), str(spec)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    for result in json.loads(done.stdout):
        assert result["code"] == 0, result
        assert "Traceback" not in result["stderr"], result
