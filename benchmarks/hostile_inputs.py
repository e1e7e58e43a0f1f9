"""Issue 45's findings measured again: each hostile input against the code that reads it, in a
child process of its own (peak RSS sampled every 50 ms, CPU time from the kernel, wall time).

Cases: a model folder whose index names one 42 MB shard (20 MB header) 20 ways; the same with a
15 MB header (under the cap: read once); a FIFO named ``*.safetensors``; a 3 GiB
``tokenizer.json``; a 5 M entry vocabulary; a FIFO at ``--speed-file``; a 68-byte trace row
with ``input_length: 10**12``; 200,000 ``hash_ids``; a webhook receiver answering 302 with an
endless body, answering one byte at a time (slowloris), or a garbage status line; the chat
template step against an endless 302.

    python benchmarks/hostile_inputs.py [--repo DIR] [--seconds 60] [--kill-mib 3000] [CASE...]

``--repo`` runs another checkout's code (its ``proto``, ``agent`` and ``controller`` folders on
PYTHONPATH), so the same script measures before and after a change. A child still running at
``--seconds`` or past ``--kill-mib`` is killed, and the table says so.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent.parent

SETUP = """
import atexit, json, os, sys, time, threading
def _hwm():  # this process's peak RSS since its exec (ru_maxrss counts the parent's, pre-exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            print("HWM", int(line.split()[1]), flush=True)
atexit.register(_hwm)
sys.path.insert(0, {here!r})
from pathlib import Path
work = Path({work!r})
"""

TRACE = """
from tunelab.bench.config import BenchConfig
from tunelab.bench.datasets import Dataset
cfg = BenchConfig(url="http://h:1", model="m", concurrency=(1,), input_len=40, output_len=8,
                  dataset="trace", dataset_path=str(work / "FILE")).with_preset()
try:
    data = Dataset(cfg, None)
    print(len(data.prompt(0, 0).text))
except Exception as exc:
    print(str(exc)[-90:])
"""

POST = """
from tests.support.hostile_http import hostile, endless, slowloris
from tunelab.controller.watches.webhook import http_post
with hostile(BEHAVIOUR) as server:
    t0 = time.monotonic()
    try:
        status = http_post(server.url + "/hook", b"{}", 5.0)
        print(f"status {status} after {time.monotonic() - t0:.1f} s")
    except Exception as exc:
        print(type(exc).__name__, str(exc)[:50], f"after {time.monotonic() - t0:.1f} s")
"""

CASES: dict[str, str] = {
    "index-20-names-20MB": """
from tunelab.agent.runs.modelfiles import describe_model
found = describe_model(str(work / "m20"))
print(found.get("error") or found.get("weight_bytes"))
""",
    "index-20-names-15MB": """
from tunelab.agent.runs.modelfiles import describe_model
found = describe_model(str(work / "m15"))
print(found.get("error") or f"weight_bytes {found.get('weight_bytes')}")
""",
    "fifo-safetensors": """
from tunelab.agent.runs.modelfiles import describe_model
print(describe_model(str(work / "fifo"))["error"])
""",
    "tokenizer-3GiB": """
from tunelab.bench.tokens import TokenPrompts
try:
    TokenPrompts(str(work / "tok3g"))
except Exception as exc:
    print(str(exc)[-90:])
""",
    "vocab-5M": """
from tunelab.bench.tokens import TokenPrompts
try:
    TokenPrompts(str(work / "vocab5m"))
    print("loaded")
except Exception as exc:
    print(str(exc)[-90:])
""",
    "speed-file-fifo": """
from tunelab.agent.runs.provenance import engine_version
argv = [sys.executable, "-m", "tunelab.bench.simulator", "--speed-file", str(work / "sim-speed")]
print(engine_version(argv, {})["version_source"])
""",
    "trace-input-1e12": TRACE.replace("FILE", "t12.jsonl"),
    "trace-hash-ids-200k": TRACE.replace("FILE", "h200k.jsonl"),
    "webhook-302-endless": POST.replace("BEHAVIOUR", "endless(302)"),
    "webhook-slowloris": POST.replace("BEHAVIOUR", "slowloris(0.5)"),
    "webhook-bad-status": """
from tests.support.hostile_http import hostile, garbage, answer
from tunelab.controller.watches.webhook import VerdictWebhook
W = type("W", (), {"name": "w"})
O = type("O", (), {"number": 1})
verdict = {"verdict": "regression", "baseline": 1, "reason": "", "metrics": []}
with hostile(garbage(), answer(200)) as server:
    hook = VerdictWebhook(server.url + "/hook", timeout=5.0, attempts=1, backoff=0.01)
    hook.start()
    hook(W(), O(), verdict)
    time.sleep(1)
    hook(W(), O(), verdict)
    time.sleep(1)
    print(f"poster alive {hook._thread.is_alive()}, delivered {hook.delivered} of 2")
    hook.close()
""",
    "chat-template-302": """
from tests.support.hostile_http import hostile, endless
from tunelab.bench.chattemplate import server_chat_prompts
with hostile(endless(302)) as server:
    try:
        print(server_chat_prompts(lambda p: server.url + p, "m", ["hi"], 10.0))
    except Exception as exc:
        print(type(exc).__name__, str(exc)[:70])
""",
}


def _shard(path: Path, header_bytes: int) -> None:
    """A 42 MB shard whose header lists ~90-byte tensor entries up to ``header_bytes``."""
    header: dict[str, object] = {}
    entry = len(
        json.dumps(
            {
                "model.layers.0.mlp.experts.000000.w": {
                    "dtype": "BF16",
                    "shape": [1],
                    "data_offsets": [0, 2],
                }
            }
        )
    )
    for i in range(header_bytes // entry):
        header[f"model.layers.0.mlp.experts.{i:06d}.w"] = {
            "dtype": "BF16", "shape": [1], "data_offsets": [2 * i, 2 * i + 2]}  # fmt: skip
    raw = json.dumps(header).encode()
    with path.open("wb") as out:
        out.write(struct.pack("<Q", len(raw)) + raw)
        out.truncate(42 * 1000 * 1000)  # the rest is its (sparse) data


def _index(folder: Path, header_bytes: int) -> None:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"num_hidden_layers": 2}))
    _shard(folder / "model-1.safetensors", header_bytes)
    names = ["model-1.safetensors", "./model-1.safetensors"] + [
        "./" * i + "model-1.safetensors" for i in range(2, 20)
    ]
    index = {"weight_map": {f"t{i}": n for i, n in enumerate(names)}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


def prepare(work: Path) -> None:
    _index(work / "m20", 20 * 1000 * 1000)
    _index(work / "m15", 15 * 1000 * 1000)
    (work / "fifo").mkdir()
    (work / "fifo" / "config.json").write_text("{}")
    os.mkfifo(work / "fifo" / "model.safetensors")
    (work / "tok3g").mkdir()
    with (work / "tok3g" / "tokenizer.json").open("wb") as sparse:
        sparse.truncate(3 << 30)
    (work / "vocab5m").mkdir()
    with (work / "vocab5m" / "tokenizer.json").open("w") as out:
        out.write('{"version": "1.0", "model": {"type": "WordLevel", "unk_token": "w0", "vocab": {')
        for start in range(0, 5_000_000, 100_000):
            part = ",".join(f'"w{i}": {i}' for i in range(start, start + 100_000))
            out.write(("," if start else "") + part)
        out.write('}}, "pre_tokenizer": {"type": "Whitespace"}}')
    os.mkfifo(work / "sim-speed")
    row: dict[str, object] = {"timestamp": 0, "input_length": 10**12, "output_length": 8}
    (work / "t12.jsonl").write_text(json.dumps(row) + "\n")
    row = {"timestamp": 0, "input_length": 10_000_000, "output_length": 8,
           "hash_ids": list(range(200_000))}  # fmt: skip
    (work / "h200k.jsonl").write_text(json.dumps(row) + "\n")


def measure(code: str, env: dict[str, str], seconds: float, kill_mib: float) -> dict[str, object]:
    start = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    proc = psutil.Process(child.pid)
    peak = 0.0
    cpu = 0.0
    verdict = ""
    while True:
        pid, _, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            break
        try:
            peak = max(peak, _hwm_mib(child.pid))
            times = proc.cpu_times()
            cpu = times.user + times.system
        except psutil.Error:
            pass
        if peak > kill_mib:
            verdict = f"killed at {kill_mib:.0f} MiB"
        elif time.monotonic() - start > seconds:
            verdict = f"killed after {seconds:.0f} s, still running"
        if verdict:
            child.kill()
            _, _, usage = os.wait4(child.pid, 0)
            break
        time.sleep(0.05)
    child.returncode = 0  # reaped above (wait4 gives its rusage)
    cpu = max(cpu, usage.ru_utime + usage.ru_stime)
    out = (child.stdout.read() if child.stdout else b"").decode(errors="replace").strip()
    lines = out.splitlines()
    for line in lines:
        if line.startswith("HWM "):
            peak = max(peak, int(line.split()[1]) / 1024)
    said = [line for line in lines if not line.startswith("HWM ")]
    last = said[-1] if said else ""
    return {
        "wall_s": time.monotonic() - start,
        "cpu_s": cpu,
        "peak_mib": peak,
        "outcome": verdict or last[:90],
    }


def _hwm_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="*", default=list(CASES))
    parser.add_argument("--repo", type=Path, default=HERE)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--kill-mib", type=float, default=3000.0)
    args = parser.parse_args()
    code_path = os.pathsep.join(str(args.repo / d) for d in ("proto", "agent", "controller"))
    env = {**os.environ, "PYTHONPATH": code_path}
    with tempfile.TemporaryDirectory(prefix="hostile-inputs-") as tmp:
        work = Path(tmp)
        prepare(work)
        print(f"code: {args.repo}")
        print(f"{'case':<22} {'wall s':>7} {'CPU s':>6} {'peak MiB':>9}  outcome")
        for name in args.cases:
            code = SETUP.format(here=str(HERE), work=str(work)) + CASES[name]
            row = measure(code, env, args.seconds, args.kill_mib)
            print(
                f"{name:<22} {row['wall_s']:>7.1f} {row['cpu_s']:>6.1f} {row['peak_mib']:>9.0f}"
                f"  {row['outcome']}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
