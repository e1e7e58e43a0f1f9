"""The tree captured on the real H200 reproduces the report the real audit printed there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.audit.hostbuilder import H200_ROOT
from tests.unit.audit.conftest import Audit, by_id
from tunelab.agent.audit.capture import materialize
from tunelab.agent.gpu import SnapshotBackend

H200 = H200_ROOT.parent
NVML_MOMENT = ("gpu.stale_state",)  # the snapshot was taken a moment after the run


RUN16 = H200.parent / "h200-run16"  # captured with issue 16's checks (2026-12-01)


@pytest.mark.usefixtures("as_root")
@pytest.mark.parametrize("capture", [H200, RUN16], ids=["2026-11-29", "2026-12-01"])
def test_replay_matches_the_live_report(tmp_path: Path, audit: Audit, capture: Path) -> None:
    live = json.loads((capture / "report.json").read_text())
    root = materialize(capture / "root", tmp_path / "root")
    gpu = SnapshotBackend(json.loads((capture / "nvml.json").read_text()))
    replay = audit(root, gpu)
    assert (replay["host"], replay["environment"], replay["kernel"]) == (
        live["host"],
        live["environment"],
        live["kernel"],
    )
    replayed = by_id(replay)
    for check in live["checks"]:
        again = replayed[check["id"]]
        assert again["status"] == check["status"], check["id"]
        if check["id"] not in NVML_MOMENT:
            assert again["observed"] == check["observed"], check["id"]


def test_the_live_h200_report_has_no_failure() -> None:
    live = json.loads((H200 / "report.json").read_text())
    statuses = {c["id"]: c["status"] for c in live["checks"]}
    assert "FAIL" not in statuses.values() and "ERROR" not in statuses.values()
    assert statuses["pcie.max_read_request"] == "PASS"  # DevCtl 0x5134: 4096 on that host
