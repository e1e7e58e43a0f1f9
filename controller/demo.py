"""``make demo``: the main job on the embedded default, end to end, with nothing but this checkout.

A local agent starts the built-in simulator as its inference server, shows its load progress and
READY, streams a few log lines, stops it (the stop ladder), and shuts the agent down.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tunelab.auth import ClientAuth
from tunelab.durations import format_duration
from tunelab.v1 import agent_pb2, agent_pb2_grpc, server_pb2

from controller.cli.progress_view import ServerProgressView


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _say(text: str) -> None:
    print(f"\n== {text}", flush=True)


@contextmanager
def local_agent(state_dir: Path) -> Iterator[str]:
    """A real ``tunelab-agent serve`` on a free loopback port, stopped with SIGTERM at the end."""
    address = f"127.0.0.1:{_free_port()}"
    log = (state_dir / "agent.log").open("ab")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent",
            "serve",
            "--listen",
            address,
            "--state-dir",
            str(state_dir),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        with grpc.insecure_channel(address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            deadline = time.monotonic() + 30
            while True:
                if proc.poll() is not None:
                    raise SystemExit(f"the agent exited; see {state_dir / 'agent.log'}")
                try:
                    health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                    break
                except grpc.RpcError:
                    if time.monotonic() > deadline:
                        raise SystemExit("the agent did not start within 30 s") from None
                    time.sleep(0.1)
        yield address
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        log.close()


def run_server_lifecycle(address: str) -> int:
    stub = agent_pb2_grpc.AgentStub(ClientAuth().channel(address))
    info = stub.GetInfo(agent_pb2.GetInfoRequest(), timeout=10)
    gpus = (
        f"{len(info.gpus)} GPU(s)" if info.gpu_metrics_enabled else f"no GPU ({info.gpu_message})"
    )
    print(f"agent {info.version} on {info.hostname} at {address}: {gpus}")

    port = _free_port()
    argv = [
        sys.executable, "-m", "agent.bench.simulator", "--port", str(port),
        "--startup-seconds", "3", "--shards", "12", "--model", "demo-model",
    ]  # fmt: skip
    _say(f"start the simulator on port {port}: {' '.join(argv[1:])}")
    spec = server_pb2.ServerSpec(
        name="demo-sim", argv=argv, port=port, ready_model="demo-model", stop_grace_seconds=10
    )
    server = stub.StartServer(agent_pb2.StartServerRequest(spec=spec), timeout=10).server
    last_done = -1
    with ServerProgressView(enabled=sys.stdout.isatty()) as view:
        for update in stub.WatchServer(agent_pb2.WatchServerRequest(id=server.id), timeout=120):
            server = update.server
            view.update(server)
            if (
                not sys.stdout.isatty()
                and server.progress.done != last_done
                and server.progress.total
            ):
                last_done = server.progress.done
                print(f"  {server.progress.label}: {server.progress.done}/{server.progress.total}")
            if server.state in (server_pb2.SERVER_STATE_READY, server_pb2.SERVER_STATE_FAILED):
                break
    state = server_pb2.ServerState.Name(server.state).removeprefix("SERVER_STATE_")
    if server.state != server_pb2.SERVER_STATE_READY:
        print(f"{state}: {server.message}")
        return 1
    print(f"{state} in {format_duration(server.ready_seconds)} (pid {server.pid})")

    _say("last log lines (StreamLogs from a byte offset near the end)")
    request = agent_pb2.StreamLogsRequest(server_id=server.id, tail_lines=4)
    text = b"".join(chunk.data for chunk in stub.StreamLogs(request, timeout=10))
    lines = [line for line in text.decode(errors="replace").splitlines() if line.strip()]
    for line in lines[-4:]:  # splitlines() also splits tqdm's \r redraws
        print(f"  | {line}")

    _say("stop it: SIGTERM to its process group, grace, SIGKILL, then check NVML")
    stopped = stub.StopServer(agent_pb2.StopServerRequest(id=server.id), timeout=120).server
    state = server_pb2.ServerState.Name(stopped.state).removeprefix("SERVER_STATE_")
    print(f"{state}: {stopped.message}")
    return 0 if stopped.state == server_pb2.SERVER_STATE_STOPPED else 1


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="tunelab-demo-") as tmp:
        _say("start a local agent (tunelab-agent serve)")
        with local_agent(Path(tmp)) as address:
            code = run_server_lifecycle(address)
        _say("agent shut down; demo " + ("done" if code == 0 else "FAILED"))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
