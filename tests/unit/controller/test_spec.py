"""Unit: experiment spec validation (field paths) and matrix / ablation / repeat expansion."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunelab.controller.spec import SpecError, expand_text
from tunelab.controller.spec.render import render_flags, to_run_spec

EXAMPLE = (Path(__file__).resolve().parents[3] / "examples" / "glm5-ablation.yaml").read_text()

BASE = """
name: sim
server:
  command: [python, -m, tunelab.bench.simulator]
  flags: {--port: "{port}", --itl-ms: 10}
  ready: {model: sim-model}
benchmark: {concurrency: [1, 8], requests: 20, input_len: 64, output_len: 32}
"""


def test_issue_example_expands_to_baseline_plus_each_change() -> None:
    experiments = expand_text(EXAMPLE)
    names = [e.name for e in experiments]
    assert names == [
        "glm5-moe-backends/baseline",
        "glm5-moe-backends/--max-running-requests=2048",
        "glm5-moe-backends/--disable-cuda-graph",
        "glm5-moe-backends/--moe-runner-backend=flashinfer_cutedsl",
    ]
    base, bigger, bare, backend = experiments
    assert base.varied == {}
    assert bigger.spec["server"]["flags"]["--max-running-requests"] == 2048
    assert bigger.varied == {"server.flags.--max-running-requests": "2048"}
    assert bare.spec["server"]["flags"]["--disable-cuda-graph"] is True
    # each change alone: the others stay at the baseline
    assert "--disable-cuda-graph" not in backend.spec["server"]["flags"]
    assert backend.spec["server"]["flags"]["--max-running-requests"] == 64
    assert base.host == {"name": "", "labels": {"gpu": "rtx-pro-6000"}, "gpus": 8}
    assert base.spec["benchmark"]["model"] == "glm-5"  # from server.ready.model


def test_rendered_argv_and_run_spec() -> None:
    experiment = expand_text(EXAMPLE)[2]
    run = to_run_spec(experiment.spec, "x-1-a1", gpus=[0, 1, 2, 3, 4, 5, 6, 7])
    argv = list(run.server.argv)
    assert argv[:3] == ["python", "-m", "sglang.launch_server"]
    assert argv[argv.index("--tp-size") + 1] == "8"
    assert "--disable-cuda-graph" in argv and argv[-1] == "--disable-cuda-graph"
    assert run.server.port == 0  # auto: the agent picks it and fills {port}
    assert run.server.env["NCCL_P2P_LEVEL"] == "5"
    assert run.server.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert list(run.benchmark.builtin.concurrency) == [1, 256, 512, 1024]
    assert run.max_duration_seconds == 7200
    assert render_flags({"--a": None, "--b": [1, 2.0], "--c": 1.5}) == [
        "--b",
        "1",
        "2",
        "--c",
        "1.5",
    ]


def test_matrix_is_the_cartesian_product_and_repeat_multiplies() -> None:
    text = (
        BASE
        + "matrix:\n  server.flags.--itl-ms: [5, 10, 20]\n"
        + "  benchmark.input_len: [64, 128]\nrepeat: 2\n"
    )
    experiments = expand_text(text)
    assert len(experiments) == 3 * 2 * 2
    combos = {
        (e.spec["server"]["flags"]["--itl-ms"], e.spec["benchmark"]["input_len"])
        for e in experiments
    }
    assert combos == {(i, n) for i in (5, 10, 20) for n in (64, 128)}
    assert sorted({e.repeat_index for e in experiments}) == [1, 2]
    assert experiments[0].name == "sim/--itl-ms=5,benchmark.input_len=64#1"


def test_repeats_are_queued_round_by_round_every_other_round_reversed() -> None:
    """Interleaved (A B C, C B A, A B C): a drift of the machine falls on every variant alike,
    not on whichever variant's block of repeats ran last. Names and indexes are unchanged."""
    text = BASE + "ablation:\n  - {server.flags.--itl-ms: 5}\n  - {server.flags.--tag: x}\n"
    names = [e.name for e in expand_text(text + "repeat: 4\n")]
    base, a, b = "sim/baseline", "sim/--itl-ms=5", "sim/--tag=x"
    assert names == [
        f"{base}#1", f"{a}#1", f"{b}#1",
        f"{b}#2", f"{a}#2", f"{base}#2",
        f"{base}#3", f"{a}#3", f"{b}#3",
        f"{b}#4", f"{a}#4", f"{base}#4",
    ]  # fmt: skip
    indexes = {e.name: e.repeat_index for e in expand_text(text + "repeat: 4\n")}
    assert indexes[f"{a}#3"] == 3 and indexes[f"{base}#4"] == 4
    assert [e.name for e in expand_text(text)] == [base, a, b]  # one launch each: no suffix


def test_a_list_of_experiments_in_one_file() -> None:
    text = (
        "- "
        + BASE.strip().replace("\n", "\n  ")
        + "\n- "
        + BASE.strip().replace("\n", "\n  ").replace("name: sim", "name: sim2")
    )
    assert [e.name for e in expand_text(text)] == ["sim", "sim2"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ('NCCL_P2P_LEVEL: "5"', "NCCL_P2P_LEVEL: 5"),
            "server.env.NCCL_P2P_LEVEL: must be a string",
        ),
        (("max_duration: 2h", "max_duration: soon"), "max_duration: expected a duration"),
        (("requests: 2000", "requestz: 2000"), "benchmark.requestz: unknown key"),
        (("[1, 256, 512, 1024]", "[1, many]"), "benchmark.concurrency[1]: must be an integer"),
        (
            ("command: [python, -m, sglang.launch_server]", "command: python -m sglang"),
            "server.command: must be a list",
        ),
        (
            ("--disable-cuda-graph: true}", "--disable-cuda-graph: false}"),
            "use true for a bare flag",
        ),
        (("port: auto", "port: 70000"), "server.port: must be 1-65535 or auto"),
        (("repeat: 1", "repeat: 0"), "repeat: must be >= 1"),
        (("name: glm5-moe-backends", "name: 'has space'"), "name: 'has space' does not match"),
    ],
)
def test_errors_name_the_field(edit: tuple[str, str], message: str) -> None:
    old, new = edit
    assert old in EXAMPLE
    with pytest.raises(SpecError) as info:
        expand_text(EXAMPLE.replace(old, new), "exp.yaml")
    assert message in str(info.value)
    assert str(info.value).startswith("exp.yaml: ")


def test_every_problem_is_reported_at_once() -> None:
    bad = EXAMPLE.replace('NCCL_P2P_LEVEL: "5"', "NCCL_P2P_LEVEL: 5").replace(
        "input_len: 1024", "input_len: -1"
    )
    with pytest.raises(SpecError) as info:
        expand_text(bad)
    paths = [issue.path for issue in info.value.issues]
    assert "server.env.NCCL_P2P_LEVEL" in paths and "benchmark.input_len" in paths


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: [", "not valid YAML"),
        ("", "no experiment in the file"),
        (BASE + "matrix: {server.flags.--itl-ms: []}\n", "non-empty list"),
        (BASE + "matrix: {bogus.path: [1]}\n", "must start with one of"),
        (
            BASE + "ablation: [{server.flags.--itl-ms: 5}]\nmatrix: {benchmark.input_len: [1]}\n",
            "not both",
        ),
        (
            BASE + "ablation: [{benchmark.input_len: lots}]\n",
            "benchmark.input_len: must be an integer",
        ),
        (BASE.replace("concurrency: [1, 8], ", ""), "set concurrency"),
    ],
)
def test_structural_errors(text: str, message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("[", r"\[").replace("(", r"\(")):
        expand_text(text)


def _issues(text: str) -> list[str]:
    with pytest.raises(SpecError) as caught:
        expand_text(text)
    return [str(i) for i in caught.value.issues]


def test_each_bad_matrix_key_is_reported_once_beside_the_bases_own_errors() -> None:
    text = BASE.replace("--itl-ms: 10}", "--itl-ms: 10}\n  env: {A: 1}") + (
        "matrix:\n  server.flag.--x: [1, 2, 3]\n  benchmark.inputlen: [1, 2]\n"
        "  benchmark.input_len: [8, many]\n"
    )
    issues = _issues(text)
    assert issues[0] == "server.env.A: must be a string, got an integer"
    assert sum("unknown key" in i for i in issues) == 2
    assert any(i.startswith("matrix.server.flag.--x: server.flag: unknown key") for i in issues)
    assert any(i.startswith("matrix.benchmark.inputlen: benchmark.inputlen:") for i in issues)
    assert sum(i.startswith("matrix.benchmark.input_len:") for i in issues) == 1  # "many" only
    assert len(issues) == 4


def test_port_auto_needs_the_port_placeholder_somewhere() -> None:
    no_port = BASE.replace('--port: "{port}", ', "")
    expected = (
        'server.port: auto picks a free port, but nothing passes it to the server: put "{port}" '
        'in server.flags (e.g. --port: "{port}"), server.command or server.env, or give a number'
    )
    assert _issues(no_port) == [expected]
    in_env = no_port.replace("ready:", 'env: {PORT: "{port}"}\n  ready:')
    assert len(expand_text(in_env)) == 1
    assert len(expand_text(no_port.replace("ready:", "port: 8000\n  ready:"))) == 1


def test_a_nul_in_a_host_label_value_is_refused() -> None:
    with pytest.raises(SpecError) as bad:
        expand_text(BASE + 'host: {labels: {pool: "a\\0b"}}\n')
    assert "host.labels.pool" in str(bad.value)
