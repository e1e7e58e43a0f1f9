"""Unit: an engine's own flags (issue 46): the shipped lists, "did you mean", what is never
refused (another program, an engine version with no list, vLLM's spellings of a flag), the port
an argv gives, and refreshing a list from a released wheel's source."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from tunelab.common import engineflags
from tunelab.common.engineflags import argv_port, engine_named, unknown_flags


def problems(engine: str, *flags: str, version: str = "") -> dict[str, str]:
    return {u.flag: u.problem() for u in unknown_flags(engine, flags, version)}


def test_the_shipped_lists_are_the_engines_own() -> None:
    vllm, sglang = engineflags.flags_for("vllm"), engineflags.flags_for("sglang")
    assert vllm is not None and sglang is not None
    assert vllm[0] == "0.33.0" and sglang[0] == "0.5.23"
    assert {"--max-num-seqs", "--gpu-memory-utilization", "--served-model-name"} <= vllm[1]
    assert {"--max-running-requests", "--mem-fraction-static", "--model-path"} <= sglang[1]


def test_typos_get_the_nearest_flag() -> None:
    assert problems("vllm", "--max-num-seq", "--gpu-memory-utilisation", "--itl-msec") == {
        "--max-num-seq": "not a flag of vllm 0.33.0; did you mean --max-num-seqs?",
        "--gpu-memory-utilisation": "not a flag of vllm 0.33.0; did you mean "
        "--gpu-memory-utilization?",
        "--itl-msec": "not a flag of vllm 0.33.0",
    }
    assert "--max-num-seqs" in problems("sglang", "--max-num-seqs")  # vLLM's name on SGLang


def test_what_vllm_accepts_is_never_refused() -> None:
    assert problems("vllm", "--max_num_seqs", "--max-num-seqs=8", "--no-enable-prefix-caching",
                    "--compilation-config.level", "-tp", "--") == {}  # fmt: skip


def test_no_list_no_check() -> None:
    assert problems("generic", "--anything") == {}
    assert problems("tensorrt-llm", "--anything") == {}
    assert problems("vllm", "--max-num-seq", version="0.1.0") == {}  # no list for that version
    assert problems("vllm", "--max-num-seq", version="0.33.0+cpu") != {}  # a local build


def test_the_engine_and_port_an_argv_names() -> None:
    assert engine_named(["taskset", "-c", "0", "/venv/bin/vllm", "serve", "m"]) == "vllm"
    assert engine_named(["python", "-m", "sglang.launch_server"]) == "sglang"
    assert engine_named(["python", "-m", "tunelab.bench.simulator"]) == ""
    assert argv_port(["vllm", "serve", "m", "--port", "8100", "--port=8101"]) == 8101
    assert argv_port(["python", "-m", "x", "--port", "{port}"]) is None
    assert argv_port(["python", "-m", "x"]) is None
    assert engineflags.argv_flags(["taskset", "--cpu-list", "0", "vllm", "serve", "--x"]) == ["--x"]
    assert engineflags.argv_flags(["python", "-m", "sglang.launch_server", "--x"]) == ["--x"]
    # named, but not what runs: a script given -X sglang.launch_server has its own flags
    assert engineflags.argv_flags(["python", "-X", "sglang.launch_server", "f.py", "--x"]) == []


def test_a_list_is_refreshed_from_a_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = tmp_path / "vllm-9.9.9-cp38-abi3-manylinux_2_28_x86_64.whl"
    source = (
        "from dataclasses import dataclass\n"
        "@dataclass\nclass FrontendArgs:\n    port: int = 8000\n    _private: int = 0\n"
        "def add(parser):\n"
        "    parser.add_argument('--max-num-seqs', type=int)\n"
        "    parser.add_argument('-O', '--compilation-config', aliases=['--cc'])\n"
    )
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("vllm/engine/arg_utils.py", source)
        archive.writestr("vllm/other.py", "parser.add_argument('--not-a-server-flag')\n")
    monkeypatch.setattr(engineflags, "LISTS", tmp_path / "lists")
    (tmp_path / "lists").mkdir()
    engineflags.shipped.cache_clear()
    try:
        assert engineflags.main(["vllm", "--wheel", str(wheel)]) == 0
        written = (tmp_path / "lists" / "vllm-9.9.9.txt").read_text().splitlines()
        assert written[1:] == ["--cc", "--compilation-config", "--max-num-seqs", "--port"]
        assert problems("vllm", "--max-num-seq", version="9.9.9") == {
            "--max-num-seq": "not a flag of vllm 9.9.9; did you mean --max-num-seqs?"
        }
    finally:
        engineflags.shipped.cache_clear()


def spec(server_extra: str) -> str:
    return (
        "name: t\nserver:\n  command: [vllm, serve, /m]\n"
        '  flags: {--port: "{port}", --max-num-seq: 8}\n  ready: {model: /m}\n'
        f"{server_extra}benchmark: {{concurrency: [1], requests: 2}}\n"
    )


def test_a_spec_is_checked_against_its_engine_version_and_never_a_generic_one() -> None:
    from tunelab.controller.spec import SpecError, expand_text

    with pytest.raises(SpecError, match="did you mean --max-num-seqs"):
        expand_text(spec(""))  # the newest list
    with pytest.raises(SpecError, match=r"not a flag of vllm 0\.33\.0"):
        expand_text(spec("  engine_version: 0.33.0\n"))
    assert expand_text(spec("  engine_version: 0.2.0\n"))  # no list for it: not checked
    assert expand_text(spec("  engine: generic\n"))  # not vLLM's flags, the user says


def test_a_spec_whose_command_is_no_engine_is_not_checked_whatever_its_engine() -> None:
    """engine: vllm on the simulator (a test's stand-in) keeps the simulator's own flags."""
    from tunelab.controller.spec import expand_text

    text = (
        "name: t\nserver:\n  command: [python, -m, tunelab.bench.simulator]\n"
        '  flags: {--port: "{port}", --ttft-ms: 5}\n  engine: vllm\n  ready: {model: m}\n'
        "benchmark: {concurrency: [1], requests: 2}\n"
    )
    assert expand_text(text)
