"""The cuInit probe as a real child process: it answers, and a hang is cut off."""

from __future__ import annotations

from tunelab.agent.audit.cudaprobe import probe


def test_the_real_child_answers_and_a_hang_is_cut_off() -> None:
    found = probe(timeout=30)  # a real child; CI machines have no NVIDIA driver
    if found.outcome == "ok":  # a machine with a GPU: cuInit worked
        assert found.result == 0 and (found.devices or 0) >= 1
    else:
        assert found.outcome in ("no_library", "cuda_error"), found
        assert found.library == "libcuda.so.1"
    hung = probe(timeout=0.001)  # the child cannot even start python in 1 ms: killed
    assert hung.outcome == "timeout" and "did not return within" in hung.detail
