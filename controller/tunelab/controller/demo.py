"""``make demo``: the main job on the embedded default, end to end, with nothing but this checkout.

It starts a local agent and controller (SQLite in a temporary directory), registers the host,
audits it, submits a small ablation of simulator settings (examples/demo-ablation.yaml, three
launches of each variant), waits for it, prints ``tunelab compare`` (ending with the effect of each
change), writes ``tunelab report`` to a file it keeps, and stops what it started. Every step is
the real CLI.
Without an NVIDIA GPU the agent answers GPU queries from an H200 snapshot captured for the tests,
so the GPU columns show the pipeline working; with a GPU they are live.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tunelab.common.pyexec import python_module_argv
from tunelab.common.spawn import spawn

REPO = Path(__file__).resolve().parents[3]  # controller/tunelab/controller/demo.py
SPEC = REPO / "examples" / "demo-ablation.yaml"
WATCH = REPO / "examples" / "demo-watch.yaml"
SNAPSHOT = REPO / "tests" / "fixtures" / "nvml" / "h200-busy.json"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def _has_gpu() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except Exception:
        return False
    return True


@contextmanager
def _daemon(
    name: str, argv: list[str], address: str, log: Path, env: dict[str, str]
) -> Iterator[None]:
    """A daemon process, SIGTERMed at the end; waits until its gRPC health check answers."""
    proc = spawn(argv, cwd=REPO, log=log, env=env, new_session=False)  # Ctrl-C reaches it
    try:
        with grpc.insecure_channel(address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            deadline = time.monotonic() + 30
            while True:
                if proc.poll() is not None:
                    raise SystemExit(f"{name} exited; see {log}")
                try:
                    health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                    break
                except grpc.RpcError:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"{name} did not start within 30 s; see {log}") from None
                    time.sleep(0.1)
        print(f"{name} listening on {address} (log: {log})")
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def _host_ready(controller: str, name: str, timeout: float = 15.0) -> None:
    """Until the controller has polled the new host once (no fixed sleep)."""
    from tunelab.v1 import controller_pb2, controller_pb2_grpc

    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(controller) as channel:
        stub = controller_pb2_grpc.ControllerStub(channel)
        while time.monotonic() < deadline:
            hosts = stub.ListHosts(controller_pb2.ListHostsRequest(), timeout=5).hosts
            if any(h.name == name and h.state == controller_pb2.HOST_STATE_READY for h in hosts):
                return
            time.sleep(0.1)


def _tunelab(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    print(f"$ tunelab {' '.join(args)}", flush=True)
    result = subprocess.run(
        python_module_argv("tunelab.cli", *args),
        cwd=REPO,
        env=env,
        text=True,
        capture_output=True,
    )
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result


def _watch_doc(env: dict[str, str]) -> dict[str, Any]:
    shown = subprocess.run(
        python_module_argv("tunelab.cli", "watch", "show", "demo-watch", "--json"),
        cwd=REPO, env=env, text=True, capture_output=True,
    )  # fmt: skip
    found: dict[str, Any] = json.loads(shown.stdout or "{}")
    return found


def _watch(env: dict[str, str]) -> bool:
    """A watch every 5 s: its baseline (pooled from the first occurrences until it has three
    launches a metric: docs/watch-judging.md), then an occurrence judged against it, then
    paused, and the occurrence the schedule had queued meanwhile judged too, so the table shown
    at the end has no occurrence still running."""
    _say(f"a watch every 5 s, each run judged against the first: {WATCH.relative_to(REPO)}")
    if _tunelab(env, "watch", "add", str(WATCH)).returncode != 0:
        return False
    deadline = time.monotonic() + 120
    paused = False
    while time.monotonic() < deadline:
        occurrences = _watch_doc(env).get("occurrences", [])
        judged = sum(1 for o in occurrences if o["verdict"] is not None)
        against = any(o["verdict"] not in (None, "baseline") for o in occurrences)
        if against and not paused:
            paused = _tunelab(env, "watch", "pause", "demo-watch").returncode == 0
            continue  # read again: one may have been queued before the pause
        if paused and judged == len(occurrences):
            return _tunelab(env, "watch", "show", "demo-watch").returncode == 0
        time.sleep(0.5)
    return False


def main(fast_polls: bool = True) -> int:
    """Run the demo; ``fast_polls=False`` keeps the controller's default cadence (benchmarks)."""
    workdir = Path(tempfile.mkdtemp(prefix="tunelab-demo-"))
    agent, controller = f"127.0.0.1:{_free_port()}", f"127.0.0.1:{_free_port()}"
    agent_metrics, controller_metrics = _free_port(), _free_port()
    env = {
        **os.environ,
        "TUNELAB_CONTROLLER": controller,
        "XDG_CONFIG_HOME": str(workdir / "config"),  # keep the user's own config out of it
    }
    agent_argv = python_module_argv("tunelab.agent", "serve", "--listen", agent)
    agent_argv += [
        "--state-dir",
        str(workdir / "agent"),
        "--metrics-listen",
        f"127.0.0.1:{agent_metrics}",
    ]
    if not _has_gpu():
        agent_argv += ["--nvml-snapshot", str(SNAPSHOT)]
    controller_argv = python_module_argv(
        "tunelab.cli", "controller", "serve", "--listen", controller
    )
    controller_argv += ["--db", str(workdir / "controller.db")]
    controller_argv += ["--metrics-listen", f"127.0.0.1:{controller_metrics}"]
    if fast_polls:  # one local host: poll it and its attempts often, not at a lab's cadence
        controller_argv += ["--host-poll-interval", "0.5s", "--attempt-poll-interval", "0.25s"]
    controller_argv += ["--scrape-interval", "1s"]  # short runs: enough scrapes for GPU figures
    kept = Path(tempfile.mkdtemp(prefix="tunelab-demo-report-"))  # the report and the logs
    report = kept / "report.html"
    code = 0
    with ExitStack() as stack:
        _say("start a local agent and a controller (SQLite in a temporary directory)")
        # the spec's `{python} -P -m tunelab.bench.simulator` runs on the agent's own interpreter
        stack.enter_context(_daemon("agent", agent_argv, agent, kept / "agent.log", env))
        controller_log = kept / "controller.log"
        stack.enter_context(_daemon("controller", controller_argv, controller, controller_log, env))
        if "--nvml-snapshot" in agent_argv:
            print("no NVIDIA GPU here: the agent answers GPU queries from a captured H200 snapshot")

        _say("register the host")
        _tunelab(env, "hosts", "add", "local", agent, "--label", "pool=demo",
                 "--metrics-url", f"http://127.0.0.1:{agent_metrics}/metrics")  # fmt: skip
        _host_ready(controller, "local")
        _tunelab(env, "hosts", "ls")

        _say("audit it (a FAIL here is about this machine, not the demo)")
        _tunelab(
            env, "audit", "local", "--only", "cpu.governor,numa.balancing,mem.thp,gpu.power_limit"
        )

        _say(f"submit a small ablation: {SPEC.relative_to(REPO)}")
        submitted = _tunelab(env, "submit", str(SPEC), "--wait")
        if submitted.returncode != 0:
            code = 1

        listed = subprocess.run(
            python_module_argv("tunelab.cli", "ls", "--json"),
            cwd=REPO,
            env=env,
            text=True,
            capture_output=True,
        )
        groups = sorted({e["group"] for e in json.loads(listed.stdout or "[]")})
        if groups:
            _say("report: one self-contained HTML file")
            if _tunelab(env, "report", groups[-1], "--out", str(report)).returncode != 0:
                code = 1
            _say("compare: each variant, then the effect of each change over its launches")
            _tunelab(env, "compare", groups[-1])
        if code == 0 and not _watch(env):
            code = 1
        stack.callback(_say, "stop what the demo started")
    if code == 0:
        shutil.rmtree(workdir, ignore_errors=True)  # state and database; the logs are in kept
        _say(f"demo done; the report: {report}")
        print(f"the daemons' logs: {kept / 'agent.log'}, {kept / 'controller.log'}")
        print(NEXT_STEP)
    else:
        _say(f"demo FAILED (logs kept in {kept}, state in {workdir})")
    return code


# every line works as written (tests/e2e/test_demo.py runs the agent's): beyond loopback the agent
# needs a token, and the controller sends it with the host's registration
NEXT_STEP = """next, on a GPU host of your own:
  tunelab-agent audit                      # as root on the host: what to fix before tuning
  (umask 077; head -c 32 /dev/urandom | base64 > agent.token)   # beyond loopback: a token
  tunelab-agent serve --listen 0.0.0.0:50051 --token-file agent.token --metrics-listen 0.0.0.0:9473
  tunelab controller serve &               # on your laptop or a lab machine, with a copy of it
  tunelab hosts add gpu1 HOST:50051 --agent-token-file agent.token --label pool=demo
  tunelab submit examples/demo-ablation.yaml --wait   # then swap the simulator for your engine"""


if __name__ == "__main__":
    raise SystemExit(main())
