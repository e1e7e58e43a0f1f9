"""A server refused for a bad flag (issue 37.7): ``tunelab server start --wait`` says
argparse's error once, not in the message, the reason line and the log tail over again."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.test_cli_first_hour import Lab
from tests.support.ports import free_port


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    lab = Lab(tmp_path_factory.mktemp("bad-flag"))
    try:
        yield lab
    finally:
        lab.controller.terminate()
        lab.agent.terminate()


def test_a_bad_flag_says_argparses_error_once(lab: Lab) -> None:
    port = str(free_port())
    result = lab.run(
        "server", "start", "--port", port, "--wait", "--", "{python}", "-m",
        "tunelab.bench.simulator", "--port", port, "--no-such-flag",
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    said = result.stdout + result.stderr
    assert "BAD_ARGUMENT" in said
    assert said.count("unrecognized arguments: --no-such-flag") == 1, said
