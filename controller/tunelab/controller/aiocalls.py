"""StartRun waves through ``grpc.aio`` on one event-loop thread.

A scheduling pass can place a run on every host at once. Issued from the sync API, each call
costs about 0.75 ms of controller CPU (a polling thread per channel, all contending for the
GIL), so 200 calls took 120-160 ms before the last left; one event loop issues and completes
them for about half of that (``benchmarks/controller_scale.py``). The other agent calls stay
on the sync client: they are one per host per poll, and streams want a blocking iterator.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import cast

import grpc

from tunelab.common.auth import ClientAuth
from tunelab.v1 import agent_pb2, agent_pb2_grpc, run_pb2

SEND_EVERY = 8  # calls made before the loop gets to send them


@dataclass(frozen=True)
class StartRunCall:
    address: str
    token: str | None
    run_id: str
    spec: run_pb2.RunSpec


class AioStartRuns:
    """Owns the loop thread and one aio channel per (address, token); everything on the loop
    is touched only from it."""

    def __init__(self, default_token: str | None, deadline: float) -> None:
        self._default_token = default_token
        self._deadline = deadline
        self._loop = asyncio.new_event_loop()
        self._stubs: dict[tuple[str, str | None], agent_pb2_grpc.AgentStub] = {}
        self._channels: list[grpc.aio.Channel] = []
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="agent-aio", daemon=True
        )
        self._thread.start()
        self._closed = False

    def start_runs(self, calls: Sequence[StartRunCall]) -> list[Future[agent_pb2.StartRunResponse]]:
        """One future per call, in order; a failed call's future raises its ``grpc.RpcError``
        (``grpc.aio.AioRpcError``: code and details as from the sync API)."""
        futures: list[Future[agent_pb2.StartRunResponse]] = [Future() for _ in calls]
        if self._closed:
            raise RuntimeError("the controller is stopping")
        asyncio.run_coroutine_threadsafe(self._issue(list(calls), futures), self._loop)
        return futures

    async def _issue(
        self, calls: list[StartRunCall], futures: list[Future[agent_pb2.StartRunResponse]]
    ) -> None:
        for n, (call, future) in enumerate(zip(calls, futures, strict=True)):
            if n and n % SEND_EVERY == 0:
                await asyncio.sleep(0)  # let the calls made so far leave while the rest are made
            try:
                token = call.token or self._default_token
                request = agent_pb2.StartRunRequest(run_id=call.run_id, spec=call.spec)
                pending = cast(  # the generated stub types the sync API only
                    "Awaitable[agent_pb2.StartRunResponse]",
                    self._stub(call.address, token).StartRun(
                        request,
                        timeout=self._deadline,
                        metadata=ClientAuth(token=token).call_metadata(),
                    ),
                )
                task = asyncio.ensure_future(pending)
            except Exception as exc:  # building the call failed: that call's future says so
                future.set_exception(exc)
                continue
            task.add_done_callback(partial(_settle, future))

    def _stub(self, address: str, token: str | None) -> agent_pb2_grpc.AgentStub:
        stub = self._stubs.get((address, token))
        if stub is None:
            channel = ClientAuth(token=token).aio_channel(address)
            self._channels.append(channel)
            stub = self._stubs[(address, token)] = agent_pb2_grpc.AgentStub(channel)
        return stub

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True

        async def shut() -> None:
            for channel in self._channels:
                await channel.close()

        try:
            asyncio.run_coroutine_threadsafe(shut(), self._loop).result(10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()


def _settle(
    future: Future[agent_pb2.StartRunResponse], task: asyncio.Future[agent_pb2.StartRunResponse]
) -> None:
    if task.cancelled():
        future.cancel()
    elif (exc := task.exception()) is not None:
        future.set_exception(exc)
    else:
        future.set_result(task.result())
