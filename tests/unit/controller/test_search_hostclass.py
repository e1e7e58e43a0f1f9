"""Host classes (hostclass.py): a host's class from its last poll, a trial's from its attempt's
provenance; a selector matching hosts of two classes is refused with both named (hosts never
polled left out); trials of two classes are a warning on the answer."""

from __future__ import annotations

from typing import Any

from tunelab.controller.search import hostclass
from tunelab.controller.states import AttemptState, TrialState
from tunelab.controller.store.models import AttemptRow, HostRow
from tunelab.controller.store.search_models import TrialRow

H200 = {"index": 0, "uuid": "GPU-1", "name": "NVIDIA H200", "memory_total_bytes": 150 << 30}


def host(name: str, gpus: list[dict[str, Any]], pool: str = "a", polled: bool = True) -> HostRow:
    return HostRow(name=name, address=f"{name}:1", labels={"pool": pool}, gpu_count=len(gpus),
                   gpus=gpus, agent_instance_id="i-1" if polled else "")  # fmt: skip


def test_a_hosts_class_is_its_gpus_by_model() -> None:
    assert hostclass.of_host(host("a", [H200, {**H200, "index": 1}])) == "2x NVIDIA H200"
    assert hostclass.of_host(host("b", [])) == "no GPU"


def test_a_trials_class_is_what_its_attempt_recorded() -> None:
    prov = {"gpus": [{"index": 0, "name": "NVIDIA H200"}],
            "system": {"driver_version": "570.124.06"}}  # fmt: skip
    attempt = AttemptRow("a-1", "x-1", 1, "h", AttemptState.SUCCEEDED, provenance=prov)
    assert hostclass.of_attempt(attempt) == "1x NVIDIA H200, driver 570.124.06"
    no_gpu = {"gpus": [], "system": {"unavailable": "NVML not found"}}
    attempt.provenance = no_gpu
    assert hostclass.of_attempt(attempt) == "no GPU"
    attempt.provenance = None
    assert hostclass.of_attempt(attempt) == ""


def test_a_selector_matching_two_classes_is_refused_with_both_named() -> None:
    hosts = [host("gpu", [H200]), host("cpu", []), host("other", [], pool="b")]
    issue = hostclass.mixed_pool({"labels": {"pool": "a"}}, hosts)
    assert issue is not None and issue.path == "host"
    assert issue.problem.startswith(
        "matches hosts of 2 classes (1x NVIDIA H200: gpu; no GPU: cpu); a search compares"
    )
    assert hostclass.mixed_pool({"labels": {"pool": "b"}}, hosts) is None
    assert hostclass.mixed_pool({"name": "gpu"}, hosts) is None
    assert hostclass.mixed_pool({"labels": {"pool": "a"}, "gpus": 1}, hosts) is None
    # a host never polled has no known class yet
    unpolled = [host("gpu", [H200]), host("cpu", [], polled=False)]
    assert hostclass.mixed_pool({"labels": {"pool": "a"}}, unpolled) is None


def test_trials_of_two_classes_warn() -> None:
    def trial(number: int, cls: str) -> TrialRow:
        row = TrialRow("g-1", number, {}, TrialState.DONE, 1.0)
        row.details = {"host": f"h{number}", "host_class": cls}
        return row

    same = [trial(1, "no GPU"), trial(2, "no GPU")]
    assert hostclass.warning(same) == ""
    mixed = [*same, trial(3, "1x NVIDIA H200, driver 570")]
    assert hostclass.warning(mixed) == (
        "hosts: the trials ran on 2 classes of host (no GPU (trials 1, 2); 1x NVIDIA H200, "
        "driver 570 (trials 3)); a difference between them may be the host's"
    )
