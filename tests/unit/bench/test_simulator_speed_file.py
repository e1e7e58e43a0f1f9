"""--speed-file: an "upgrade" the simulator reads at start, scaling every step time."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tunelab.bench.simulator.options import add_sim_arguments, settings_from_args


def settings(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_sim_arguments(parser)
    return parser.parse_args(["--port", "1", *argv])


def test_the_files_number_scales_every_step_time(tmp_path: Path) -> None:
    speed = tmp_path / "speed"
    speed.write_text("1.5\n")
    args = settings("--itl-ms", "10", "--ttft-ms", "40", "--step-ms-base", "8",
                    "--step-ms-per-seq", "0.2", "--speed-file", str(speed))  # fmt: skip
    found = settings_from_args(args)
    assert (found.itl_ms, found.ttft_ms) == (15.0, 60.0)
    assert found.step_ms_base == pytest.approx(12.0)
    assert found.step_ms_per_seq == pytest.approx(0.3)
    assert found.prefill_ms_per_token is None  # not given: stays off


def test_no_file_or_a_missing_file_is_full_speed(tmp_path: Path) -> None:
    assert settings_from_args(settings("--itl-ms", "10")).itl_ms == 10.0
    missing = settings("--itl-ms", "10", "--speed-file", str(tmp_path / "none"))
    assert settings_from_args(missing).itl_ms == 10.0


def test_a_file_without_a_number_is_refused(tmp_path: Path) -> None:
    speed = tmp_path / "speed"
    speed.write_text("fast")
    with pytest.raises(SystemExit, match="expected a number"):
        settings_from_args(settings("--speed-file", str(speed)))
