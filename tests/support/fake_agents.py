"""Many simulated agents in one process, for the controller scale benchmark and the fault
tests: real gRPC (asyncio) serving tunelab.v1.Agent on one loopback port per agent, whose runs
finish the instant they start. ``--slow N`` adds N agents that answer every call only at its
deadline (a host that is overloaded, or hung behind a proxy).

Each agent is cheap on purpose — one event loop serves every port — so that on a small machine
the figures measure the controller, not the stand-ins. Prints one port per line (the slow ones
last); records each StartRun's arrival time (run id and time, one per line) in ``--starts``
when given; runs until its stdin closes.
Usage: python tests/support/fake_agents.py --count 50 [--slow 1] [--starts FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "proto"))

from tunelab.v1 import agent_pb2, agent_pb2_grpc, run_pb2

RESULT = json.dumps(
    {"status": "completed", "points": [{"concurrency": 1, "output_throughput": 1.0}]}
)


class InstantAgents(agent_pb2_grpc.AgentServicer):
    """Every agent of this process: runs keyed by id (attempt ids are unique across hosts)."""

    def __init__(self, starts: Path | None = None, slow: bool = False) -> None:
        self.instance_id = uuid.uuid4().hex
        self.runs: dict[str, run_pb2.Run] = {}
        self._starts = starts.open("a", buffering=1) if starts else None
        self._slow = slow

    async def _maybe_hang(self, context: grpc.aio.ServicerContext[object, object]) -> None:
        remaining = context.time_remaining()
        if self._slow and remaining is not None:
            await asyncio.sleep(max(0.0, remaining - 0.05))  # answer at the deadline

    async def GetInfo(
        self, request: agent_pb2.GetInfoRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> agent_pb2.GetInfoResponse:
        await self._maybe_hang(context)
        return agent_pb2.GetInfoResponse(
            instance_id=self.instance_id, version="fake", hostname="fake"
        )

    async def StartRun(
        self, request: agent_pb2.StartRunRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> agent_pb2.StartRunResponse:
        if self._starts is not None:
            self._starts.write(f"{request.run_id} {time.time()}\n")
        await self._maybe_hang(context)
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

    async def GetRun(
        self, request: agent_pb2.GetRunRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> agent_pb2.GetRunResponse:
        await self._maybe_hang(context)
        run = self.runs.get(request.run_id)
        if run is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no run {request.run_id}")
        return agent_pb2.GetRunResponse(run=run)

    async def CancelRun(
        self, request: agent_pb2.CancelRunRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> agent_pb2.CancelRunResponse:
        run = self.runs.get(request.run_id)
        if run is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no run {request.run_id}")
        return agent_pb2.CancelRunResponse(run=run)


async def serve(count: int, slow: int, starts: Path | None) -> None:
    servers = []
    ports = []
    for is_slow, n in ((False, count), (True, slow)):
        if n == 0:
            continue
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        # the fake answers the RPCs a scheduler sends; the rest stay the generated base's
        # UNIMPLEMENTED, which the stubs declare abstract
        agents = InstantAgents(starts, slow=is_slow)  # type: ignore[abstract]
        agent_pb2_grpc.add_AgentServicer_to_server(agents, server)
        ports += [server.add_insecure_port("127.0.0.1:0") for _ in range(n)]
        servers.append(server)
    for server in servers:
        await server.start()
    for port in ports:
        print(port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # closed = stop
    for server in servers:
        await server.stop(0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=50)
    parser.add_argument("--slow", type=int, default=0, help="agents that answer at the deadline")
    parser.add_argument("--starts", type=Path, help="append 'run_id time' per StartRun here")
    args = parser.parse_args()
    asyncio.run(serve(args.count, args.slow, args.starts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
