"""Issue 37.7, the smaller findings, through the real console script against a real controller
and agent: ``hosts add``'s "exists" hint, ``hosts add-slurm`` on a host without a Slurm
configuration, ``show`` of a profiled shared-prefix experiment, and a spec with typos in its
base and under ``search:``."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.integration.test_cli_first_hour import Lab
from tests.support.daemon_proc import REPO


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    lab = Lab(tmp_path_factory.mktemp("small-findings"))
    try:
        yield lab
    finally:
        lab.controller.terminate()
        lab.agent.terminate()


def test_hosts_add_of_an_existing_host_points_at_hosts_set(lab: Lab) -> None:
    again = lab.run("hosts", "add", "local", lab.agent.address)
    assert again.returncode != 0
    assert "host 'local' exists; change it with: tunelab hosts set local" in again.stderr
    assert "--replace" not in again.stderr


def test_add_slurm_without_a_slurm_configuration_is_one_line(lab: Lab) -> None:
    """The slurm client is installed (tests/support/system_deps.sh) but this host has no
    slurm.conf: scontrol's 4 lines are one, and the partition is not blamed."""
    done = lab.run("hosts", "add-slurm", "cluster", "--partition", "gpu")
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Slurm has no configuration on the controller's host" in lines[0]
    assert "partition" not in lines[0].split("(")[0] and "scontrol: error" not in lines[0]


def test_show_of_a_profiled_shared_prefix_experiment_says_the_dataset_and_tunelab_profile(
    lab: Lab,
) -> None:
    dataset = {"name": "shared-prefix", "prefix_len": 64, "prefix_groups": 4}
    path = lab.spec(
        "prefixed",
        **{
            "host.labels.pool": "nobody",
            "benchmark.dataset": dataset,
            "profile": {"window": "2s"},
        },
    )
    submitted = lab.run("submit", str(path), "--json")
    assert submitted.returncode == 0, submitted.stderr
    experiment = json.loads(submitted.stdout)[0]["id"]
    shown = lab.run("show", experiment)
    assert shown.returncode == 0, shown.stderr
    assert "dataset shared-prefix (prefix_len 64, prefix_groups 4)" in shown.stdout, shown.stdout
    assert f"tunelab profile {experiment}" in shown.stdout, shown.stdout
    assert lab.run("cancel", experiment).returncode == 0


def test_a_search_spec_with_typos_in_its_base_and_its_search_reports_both(lab: Lab) -> None:
    text = (REPO / "examples" / "search-sim.yaml").read_text()
    typos = text.replace("\nbenchmark:", "\nbenchmrk:").replace("  objective:", "  objectiv:")
    path = lab.root / "typos.yaml"
    path.write_text(typos)
    done = lab.run("submit", str(path), "--dry-run")
    assert done.returncode == 2, done.stderr
    assert "search.objectiv: unknown key" in done.stderr
    assert "benchmrk: unknown key" in done.stderr
    # what the search sets (its load: the concurrency) is not asked of the base
    assert "set concurrency" not in done.stderr
