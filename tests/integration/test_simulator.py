"""The simulator as a real process on a loopback port: loading, health, models, metrics, schedule,
faults. Raw sockets and urllib only, so these tests do not depend on the client under test."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tunelab.agent.engines.profiles import SGLANG
from tunelab.agent.engines.watch import EngineWatch
from tunelab.bench.simulator.process import SimulatorProcess

LATE = 0.040  # the most a token may trail its deadline here


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def post(url: str, body: dict[str, object]) -> tuple[int, bytes]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def stream_times(port: int, path: str, body: dict[str, object]) -> list[tuple[float, bytes]]:
    """Send one request over a raw socket; (arrival time, SSE data line) for every data line."""
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    ).encode()
    out: list[tuple[float, bytes]] = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        start = time.monotonic()
        sock.sendall(head + payload)
        buf = b""
        while True:
            data = sock.recv(65536)
            now = time.monotonic() - start
            if not data:
                break
            buf += data
            while b"data: " in buf:
                i = buf.index(b"data: ")
                j = buf.find(b"\n\n", i)
                if j < 0:
                    break
                out.append((now, buf[i + 6 : j]))
                buf = buf[j + 2 :]
    return out


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimulatorProcess]:
    with SimulatorProcess(["--ttft-ms", "80", "--itl-ms", "20"], tmp_path / "sim.log") as proc:
        wait_ready(proc)
        yield proc


def wait_ready(proc: SimulatorProcess, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while get(proc.url + "/health")[0] != 200:
        assert time.monotonic() < deadline, proc.log()
        time.sleep(0.02)


def test_loading_prints_parseable_progress_and_health_turns_200(tmp_path: Path) -> None:
    args = ["--startup-seconds", "1.0", "--shards", "10", "--model", "m1"]
    with SimulatorProcess(args, tmp_path / "sim.log") as proc:
        assert get(proc.url + "/health")[0] == 503
        status, body = get(proc.url + "/v1/models")  # SGLang lists the model before ready
        assert status == 200 and json.loads(body)["data"][0]["id"] == "m1"
        assert post(proc.url + "/v1/completions", {"prompt": "a", "max_tokens": 2})[0] == 503
        started = time.monotonic()
        wait_ready(proc)
        assert 0.8 < time.monotonic() - started + 0.1 < 2.5
        tracker = EngineWatch(SGLANG, 0.0)  # it prints SGLang's lines
        tracker.feed(proc.log_path.read_bytes(), now=0.0)
        assert tracker.progress is not None
        assert (tracker.progress.done, tracker.progress.total) == (10, 10)
        assert "Loading safetensors checkpoint shards" in tracker.progress.label
        assert b"\r" in proc.log_path.read_bytes()  # tqdm redraws in place
    assert proc.proc is not None and proc.proc.returncode == 0


def on_time(at: float, deadline: float) -> bool:
    """Never before its deadline (early is a bug of the schedule); late only by what a loaded
    CI machine adds (its precision is a benchmark's figure: benchmarks/client_accuracy_overhead)."""
    return deadline - 0.002 <= at < deadline + LATE


def test_stream_follows_the_deadline_schedule(sim: SimulatorProcess) -> None:
    body = {
        "prompt": "one two three",
        "max_tokens": 10,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    events = stream_times(sim.port, "/v1/completions", body)
    assert events[-1][1] == b"[DONE]"
    chunks = [(t, json.loads(d)) for t, d in events[:-1] if json.loads(d)["choices"]]
    assert len(chunks) == 10
    for j, (t, chunk) in enumerate(chunks):
        assert chunk["usage"]["completion_tokens"] == j + 1
        assert on_time(t, 0.080 + j * 0.020), (j, t)
    final = json.loads(events[-2][1])
    assert final["choices"] == [] and final["usage"]["completion_tokens"] == 10
    assert final["usage"]["prompt_tokens"] == 3
    assert chunks[-1][1]["choices"][0]["finish_reason"] == "length"


def test_chat_sends_role_only_chunk_first_and_multi_token_chunks(tmp_path: Path) -> None:
    args = ["--ttft-ms", "60", "--itl-ms", "20", "--tokens-per-chunk", "4", "--role-chunk-ms", "1"]
    with SimulatorProcess(args, tmp_path / "sim.log") as proc:
        wait_ready(proc)
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10, "stream": True}
        events = stream_times(proc.port, "/v1/chat/completions", body)
    first_time, first = events[0]
    delta = json.loads(first)["choices"][0]["delta"]
    assert delta == {"role": "assistant", "content": ""}
    assert first_time <= events[1][0]  # sent at 1 ms, before the first token (60 ms)
    contents = [json.loads(d)["choices"][0]["delta"]["content"] for _, d in events[1:-1]]
    assert [len(c.split()) for c in contents] == [4, 4, 2]
    assert on_time(events[1][0], 0.060)


def test_early_eos_unless_ignore_eos(tmp_path: Path) -> None:
    with SimulatorProcess(
        ["--ttft-ms", "5", "--itl-ms", "1", "--eos-after", "7"], tmp_path / "s"
    ) as p:
        wait_ready(p)
        _, body = post(p.url + "/v1/completions", {"prompt": "x", "max_tokens": 20})
        answer = json.loads(body)
        assert answer["usage"]["completion_tokens"] == 7
        assert answer["choices"][0]["finish_reason"] == "stop"
        _, body = post(
            p.url + "/v1/completions", {"prompt": "x", "max_tokens": 20, "ignore_eos": True}
        )
        assert json.loads(body)["usage"]["completion_tokens"] == 20


def test_metrics_count_like_vllm(sim: SimulatorProcess) -> None:
    for _ in range(2):
        post(sim.url + "/v1/completions", {"prompt": "a b", "max_tokens": 3})
    status, text = get(sim.url + "/metrics")
    assert status == 200
    lines = text.decode().splitlines()
    assert 'vllm:generation_tokens_total{model_name="tunelab-sim"} 6.0' in lines
    assert 'vllm:prompt_tokens_total{model_name="tunelab-sim"} 4.0' in lines
    assert 'vllm:num_requests_running{model_name="tunelab-sim"} 0.0' in lines
    assert 'vllm:time_to_first_token_seconds_count{model_name="tunelab-sim"} 2.0' in lines
    assert any(line.startswith("vllm:inter_token_latency_seconds_bucket") for line in lines)
    stats = json.loads(get(sim.url + "/sim/stats")[1])
    assert stats["requests"] == 2 and stats["write_lateness"]["writes"] == 2
    # the server's own window: its tokens, from the first arrival to the last token written
    assert stats["served"]["tokens"] == 6 and stats["served"]["seconds"] > 0


def test_faults(tmp_path: Path) -> None:
    args = ["--ttft-ms", "5", "--itl-ms", "2", "--fault", "429:4", "--fault", "drop:3"]
    args += ["--fault", "malformed:2", "--drop-after-chunks", "2"]
    with SimulatorProcess(args, tmp_path / "sim.log") as proc:
        wait_ready(proc)
        body = {"prompt": "x", "max_tokens": 5, "stream": True}
        ok = stream_times(proc.port, "/v1/completions", body)  # request 1
        assert ok[-1][1] == b"[DONE]" and len(ok) == 6
        malformed = stream_times(proc.port, "/v1/completions", body)  # request 2
        assert b'{"choices":[{"index":0,"text":' in [d for _, d in malformed]
        assert malformed[-1][1] == b"[DONE]"
        dropped = stream_times(proc.port, "/v1/completions", body)  # request 3
        assert len(dropped) == 2 and dropped[-1][1] != b"[DONE]"
        status, err = post(proc.url + "/v1/completions", body)  # request 4
        assert status == 429 and json.loads(err)["error"]["code"] == 429


def test_hang_fault_never_answers(tmp_path: Path) -> None:
    with SimulatorProcess(["--fault", "hang"], tmp_path / "sim.log") as proc:
        wait_ready(proc)
        with socket.create_connection(("127.0.0.1", proc.port), timeout=0.5) as sock:
            payload = b'{"prompt":"x","max_tokens":2}'
            sock.sendall(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                + str(len(payload)).encode()
                + b"\r\n\r\n"
                + payload
            )
            with pytest.raises(TimeoutError):
                sock.recv(100)
        assert get(proc.url + "/health")[0] == 200  # the rest of the server still answers


def test_bad_requests_are_400_and_unknown_paths_404(sim: SimulatorProcess) -> None:
    assert post(sim.url + "/v1/completions", {"prompt": 5})[0] == 400
    assert post(sim.url + "/v1/chat/completions", {"messages": []})[0] == 400
    assert get(sim.url + "/nope")[0] == 404
    assert get(sim.url + "/v1/completions")[0] == 405
