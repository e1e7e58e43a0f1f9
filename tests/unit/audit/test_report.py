"""Fix script, --compare and the partial-run merge, on real scenario reports."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.audit import scenarios
from tests.unit.audit.conftest import Audit
from tunelab.agent.audit.provider import merge
from tunelab.agent.audit.report import (
    ReportFileError,
    compare,
    fix_script,
    load_report,
    render_changes,
    script_lines,
)


def test_fix_script_has_each_runtime_fix_and_no_manual_step_as_a_command(
    tmp_path: Path, audit: Audit
) -> None:
    gp108m, _ = scenarios.badly_tuned(tmp_path)
    script = fix_script(audit(tmp_path))
    lines = script.splitlines()
    assert lines[0] == "#!/bin/sh" and "set -eu" in lines
    assert f"setpci -s {gp108m} CAP_EXP+8.w=5000:7000" in lines
    assert "sysctl -w kernel.numa_balancing=0" in lines
    assert "setpci -s 0000:00:02.0 ECAP_ACS+6.w=0000" in lines
    # the link width has no runtime fix: it stays a comment
    assert "# no runtime fix: see the persistent fix above" in lines
    commands = [line for line in lines if line and not line.startswith("#")]
    assert all("<" not in line for line in commands), commands


@pytest.mark.usefixtures("as_root")
def test_compare_shows_the_kernel_upgrade_breaking_the_container(
    tmp_path: Path, audit: Audit
) -> None:
    scenarios.lxc_container(tmp_path / "before")
    before = audit(tmp_path / "before")
    scenarios.lxc_container(tmp_path / "after", uvm_major=scenarios.OLD_UVM_MAJOR, uvm_open="ENXIO")
    after = audit(tmp_path / "after")
    changes = compare(before, after)
    moved = {c["id"]: (c["old"], c["new"]) for c in changes if c["change"] == "status"}
    assert moved == {"lxc.device_nodes": ("PASS", "FAIL"), "lxc.device_access": ("PASS", "FAIL")}
    text = render_changes(before, after, changes)
    assert "lxc.device_nodes" in text and "PASS -> FAIL" in text


def test_load_report_names_the_bad_field(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"checks": [{"id": "cpu.governor", "status": "GREEN"}]}))
    with pytest.raises(ReportFileError, match=r"checks\[0\]\.status"):
        load_report(path)
    path.write_text("not json")
    with pytest.raises(ReportFileError, match="not JSON"):
        load_report(path)


def test_a_partial_run_refreshes_its_checks_inside_the_last_full_report() -> None:
    full = {
        "host": "h",
        "generated_at": 1.0,
        "checks": [{"id": "a", "status": "PASS"}, {"id": "b", "status": "PASS"}],
    }
    partial = {"host": "h", "generated_at": 2.0, "checks": [{"id": "b", "status": "FAIL"}]}
    merged = merge(full, partial)
    assert merged["generated_at"] == 2.0
    assert [(c["id"], c["status"]) for c in merged["checks"]] == [("a", "PASS"), ("b", "FAIL")]


def test_a_sysfs_name_is_shell_quoted_in_the_fix_script(tmp_path: Path, audit: Audit) -> None:
    # issue 23: a cpufreq folder named policy0$(touch …) ran the touch from the fix script
    hostile = tmp_path / "sys/devices/system/cpu/cpufreq/policy0$(touch PWNED)"
    hostile.mkdir(parents=True)
    (hostile / "boost").write_text("0\n")
    script = fix_script(audit(tmp_path, only=("cpu.boost",)))
    path = "/sys/devices/system/cpu/cpufreq/policy0$(touch PWNED)/boost"
    assert f"echo 1 > '{path}'" in script.splitlines()
    [line] = [line for line in script.splitlines() if "policy0" in line and "echo" in line]
    target = line.split("> ", 1)[1]  # what sh makes of the redirection's word
    done = subprocess.run(
        ["sh", "-c", f'set -- {target}; printf %s "$1"'],
        capture_output=True, text=True, cwd=tmp_path, check=True,
    )  # fmt: skip
    assert done.stdout == path and not (tmp_path / "PWNED").exists()


def test_alternatives_after_a_comment_stay_comments() -> None:
    command = (
        "systemctl enable --now irqbalance  # or pin: echo 0-3 > /proc/irq/5/smp_affinity_list; "
        "echo 0-3 > /proc/irq/6/smp_affinity_list"
    )
    assert script_lines(command) == [
        "systemctl enable --now irqbalance  # or pin: echo 0-3 > /proc/irq/5/smp_affinity_list",
        "# echo 0-3 > /proc/irq/6/smp_affinity_list",
    ]
    assert script_lines("echo '#not a comment'; sysctl -w a=1") == [
        "echo '#not a comment'",
        "sysctl -w a=1",
    ]


def test_a_forged_command_with_a_newline_is_never_a_script_line() -> None:
    lines = script_lines("sysctl -w a=1\nrm -rf /; true")
    assert lines[0].startswith("# refused (not one shell line): ") and lines[1] == "true"
