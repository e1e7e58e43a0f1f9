"""Relabelling engines' /metrics for /metrics/engines, and fetching them with a deadline."""

from __future__ import annotations

import threading

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.metrics.roots import FIXTURES
from tunelab.agent.metrics.engines import EngineScraper, EngineTarget, merge, relabel, render
from tunelab.agent.servers.states import ServerState

VLLM = (FIXTURES / "engines" / "vllm.txt").read_text()
SGLANG = (FIXTURES / "engines" / "sglang.txt").read_text()


def parsed(text: str) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    return {
        family.name: [(s.name, s.labels, s.value) for s in family.samples]
        for family in text_string_to_metric_families(text)
    }


def test_colons_become_underscores_and_every_sample_gets_the_server_label() -> None:
    text = render(relabel(VLLM, "llama"))
    assert ":" not in "".join(line.split("{")[0] for line in text.splitlines())
    families = parsed(text)
    running = families["vllm_num_requests_running"]
    assert running == [
        (
            "vllm_num_requests_running",
            {"server": "llama", "engine": "0", "model_name": "meta-llama/Llama-3.1-8B-Instruct"},
            4.0,
        )
    ]
    buckets = [s for s in families["vllm_time_to_first_token_seconds"] if s[0].endswith("_bucket")]
    assert [s[1]["le"] for s in buckets] == ["0.001", "0.02", "0.1", "1.0", "+Inf"]
    assert families["vllm_prompt_tokens"][0][2] == 51234.0
    assert families["python_gc_objects_collected"][1][1] == {"server": "llama", "generation": "1"}


def test_created_series_are_dropped() -> None:
    text = render(relabel(VLLM, "llama"))
    assert "_created" not in text
    assert "vllm_time_to_first_token_seconds_sum" in text


def test_families_from_several_servers_merge_under_one_help_and_type() -> None:
    text = render(
        merge([relabel(VLLM, "llama-a"), relabel(VLLM, "llama-b"), relabel(SGLANG, "qwen")])
    )
    assert text.count("# TYPE vllm_num_requests_running gauge\n") == 1
    assert text.count("# HELP vllm_num_requests_running ") == 1
    families = parsed(text)
    servers = [labels["server"] for _, labels, _ in families["vllm_num_requests_running"]]
    assert servers == ["llama-a", "llama-b"]
    assert families["sglang_gen_throughput"][0][1]["server"] == "qwen"
    assert families["sglang_gen_throughput"][0][1]["tp_rank"] == "0"


def test_label_values_survive_and_an_engines_own_server_label_is_kept_as_exported_server() -> None:
    body = (
        "# TYPE app_requests_total counter\n"
        'app_requests_total{server="uvicorn",note="a \\"quoted\\", comma} and \\\\ slash"} 3\n'
        "app_up 1 1795972790000\n"
    )
    families = parsed(render(relabel(body, 'odd "name"')))
    ((_, labels, value),) = families["app_requests"]
    assert labels == {
        "server": 'odd "name"',
        "exported_server": "uvicorn",
        "note": 'a "quoted", comma} and \\ slash',
    }
    assert value == 3
    assert families["app_up"][0][1] == {"server": 'odd "name"'}


@pytest.mark.parametrize(
    "line", ['broken{le="1" 3', "no_value", "x{a=1} 2", 'x{a="unterminated} 2']
)
def test_a_malformed_exposition_is_rejected(line: str) -> None:
    with pytest.raises(ValueError):
        relabel(line + "\n", "s")


def test_a_slow_or_broken_engine_is_reported_and_left_out() -> None:
    release = threading.Event()

    def fetch(port: int, timeout: float) -> str:
        if port == 1:
            return VLLM
        if port == 2:
            raise ConnectionRefusedError("connection refused")
        if port == 3:
            return "not { a metrics page"
        release.wait(30)  # a hung engine: answers only long after the deadline
        return SGLANG

    targets = [EngineTarget("fast", 1), EngineTarget("down", 2), EngineTarget("junk", 3)]
    targets.append(EngineTarget("hung", 4))
    scraper = EngineScraper(lambda: targets, timeout=0.2, fetch=fetch)
    try:
        families = parsed(scraper.exposition())
    finally:
        release.set()
        scraper.close()
    success = {s[1]["server"]: s[2] for s in families["tunelab_engine_scrape_success"]}
    assert success == {"fast": 1, "down": 0, "junk": 0, "hung": 0}
    servers = {labels["server"] for name, samples in families.items() for _, labels, _ in samples}
    assert servers == {"fast", "down", "junk", "hung"}
    assert "sglang_gen_throughput" not in families
    assert {s[1]["server"] for s in families["vllm_num_requests_running"]} == {"fast"}


def test_only_ready_servers_are_fetched() -> None:
    from tunelab.agent.metrics.engines import ready_targets

    targets = ready_targets(
        [
            ("a", ServerState.READY, 30001),
            ("b", ServerState.LOADING, 30002),
            ("c", ServerState.FAILED, 30003),
        ]
    )
    assert targets == [EngineTarget("a", 30001)]
