"""run-once's GPU page: the daemon's own tunelab_gpu_* families, for the controller to summarise
(a Slurm node cannot be scraped), with only the GPUs Slurm granted when the page has them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tunelab.agent.gpu import open_backend
from tunelab.agent.runonce import GpuFigures
from tunelab.agent.servers.record import ServerRecord
from tunelab.controller.scrape import parse_gpu_readings

SNAPSHOT = Path(__file__).resolve().parents[2] / "fixtures" / "nvml" / "h200-busy.json"


def no_servers(include_stopped: bool = False) -> list[ServerRecord]:
    return []


def page(monkeypatch: pytest.MonkeyPatch, granted: str | None) -> str:
    if granted is None:
        monkeypatch.delenv("SLURM_JOB_GPUS", raising=False)
    else:
        monkeypatch.setenv("SLURM_JOB_GPUS", granted)
    figures = GpuFigures(open_backend(SNAPSHOT), no_servers, "test")
    figures.start()
    try:
        for _ in range(200):  # the sampler's first tick is at once; allow a loaded machine
            text = figures.text()
            if "tunelab_gpu_power_watts{" in text:
                return text
            time.sleep(0.05)
        return figures.text()
    finally:
        figures.close()


def test_the_page_holds_only_gpu_families_and_parses_as_a_scrape(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = page(monkeypatch, None)
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}
    assert names and all(name.startswith("tunelab_gpu_") for name in names), names
    readings = parse_gpu_readings(text)
    assert set(readings) == {"0"} and readings["0"].values["power_watts"] > 0


def test_granted_gpus_filter_the_page_only_when_it_has_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert set(parse_gpu_readings(page(monkeypatch, "0"))) == {"0"}
    # indices the page lacks (Slurm's and NVML's numbering differ): every GPU, not none
    assert set(parse_gpu_readings(page(monkeypatch, "3,5"))) == {"0"}
