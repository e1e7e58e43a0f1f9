"""Many simulated agents in one process, for the controller scale benchmark: real gRPC servers
speaking tunelab.v1.Agent on loopback, whose runs finish the instant they start.

Prints one line per server: its port. Runs until stdin closes or SIGTERM.
Usage: python benchmarks/fake_agents.py --count 50
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from concurrent import futures
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "proto"))

from tunelab.v1 import agent_pb2, agent_pb2_grpc, run_pb2

RESULT = json.dumps(
    {"status": "completed", "points": [{"concurrency": 1, "output_throughput": 1.0}]}
)


class InstantAgent(agent_pb2_grpc.AgentServicer):
    def __init__(self) -> None:
        self.instance_id = uuid.uuid4().hex
        self.runs: dict[str, run_pb2.Run] = {}
        self.lock = threading.Lock()

    def GetInfo(
        self, request: agent_pb2.GetInfoRequest, context: grpc.ServicerContext
    ) -> agent_pb2.GetInfoResponse:
        return agent_pb2.GetInfoResponse(
            instance_id=self.instance_id, version="fake", hostname="fake"
        )

    def StartRun(
        self, request: agent_pb2.StartRunRequest, context: grpc.ServicerContext
    ) -> agent_pb2.StartRunResponse:
        with self.lock:
            known = request.run_id in self.runs
            if not known:
                now = time.time()
                self.runs[request.run_id] = run_pb2.Run(
                    run_id=request.run_id,
                    state=run_pb2.RUN_STATE_SUCCEEDED,
                    result_json=RESULT,
                    started_at=now,
                    finished_at=now,
                    agent_instance_id=self.instance_id,
                )
            return agent_pb2.StartRunResponse(run=self.runs[request.run_id], created=not known)

    def GetRun(
        self, request: agent_pb2.GetRunRequest, context: grpc.ServicerContext
    ) -> agent_pb2.GetRunResponse:
        with self.lock:
            run = self.runs.get(request.run_id)
        if run is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no run {request.run_id}")
        return agent_pb2.GetRunResponse(run=run)

    def CancelRun(
        self, request: agent_pb2.CancelRunRequest, context: grpc.ServicerContext
    ) -> agent_pb2.CancelRunResponse:
        return agent_pb2.CancelRunResponse(
            run=self.GetRun(agent_pb2.GetRunRequest(run_id=request.run_id), context).run
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=50)
    args = parser.parse_args()
    servers = []
    for _ in range(args.count):
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=4), options=[("grpc.so_reuseport", 0)]
        )
        agent_pb2_grpc.add_AgentServicer_to_server(InstantAgent(), server)  # type: ignore[abstract]
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        print(port, flush=True)
    sys.stdin.read()  # the benchmark closes our stdin to stop us
    for server in servers:
        server.stop(0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
