"""--speed-file: an "upgrade" the simulator reads at start, scaling every step time."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tunelab.bench.simulator.options import add_sim_arguments, settings_from_args
from tunelab.bench.simulator.upgrade import Upgrade, parse_upgrade, read_upgrade


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


def test_a_version_line_after_the_number_is_the_simulated_engine_version(tmp_path: Path) -> None:
    speed = tmp_path / "speed"
    speed.write_text("1.6\nversion 0.5.3\n")
    assert read_upgrade(str(speed)) == Upgrade(1.6, "0.5.3")
    assert settings_from_args(settings("--itl-ms", "10", "--speed-file", str(speed))).itl_ms == 16.0
    assert read_upgrade(str(tmp_path / "none")) == Upgrade(1.0, None)


@pytest.mark.parametrize(
    "text", ["1.0\nversion\n", "1.0\nrelease 0.5.3\n", "1.0\nversion 0.5 extra\n",
             "1.0\nversion $(rm)\n", "1.0\nversion " + "9" * 65 + "\n"],
)  # fmt: skip
def test_anything_but_one_version_line_after_the_number_is_refused(text: str) -> None:
    with pytest.raises(SystemExit, match="expected one line 'version V'"):
        parse_upgrade(text, "--speed-file f")
