"""The RPC edge's capacity: long streams can never starve unary calls or health checks.

The sync gRPC server runs every handler on one thread pool, and a stream (``logs -f``, a watch)
holds its thread for its whole life. So the pool is sized ``unary + streams + health_watches +
awaiting + HEALTH_RESERVE`` and three counters keep each kind inside its share: a call beyond its
share is answered RESOURCE_EXHAUSTED at once (never queued behind the others, never silence);
``grpc.health.v1.Health/Watch`` has its own small share (anyone may open one where no token is
configured, and they must never take the slots of ``logs -f`` and experiment watches), and
``grpc.health.v1.Health/Check`` is counted in none, so the reserve threads always answer it.
``awaiting`` threads are those the admission gate (``admission.py``) lets wait for a request (the
common slots and a method's own share, ReportRun's).

A stream's slot is released when its handler ends (returns, raises, or is closed once its client
has gone), so slots never undercount the threads streams hold; every streaming handler wakes
on its call's end (``context.add_callback``) to end promptly.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc

from tunelab.common.admission import Admission, OwnShare

HEALTH_CHECK = "/grpc.health.v1.Health/Check"
HEALTH_WATCH = "/grpc.health.v1.Health/Watch"
HEALTH_RESERVE = 4  # threads only health checks (and quick rejections) ever need
DEFAULT_UNARY_CALLS = 32
DEFAULT_MAX_STREAMS = 256
DEFAULT_HEALTH_WATCHES = 8


@dataclass(frozen=True)
class Limits:
    """How many calls of each kind one daemon runs at once (``max_streams`` is configurable)."""

    unary: int = DEFAULT_UNARY_CALLS
    streams: int = DEFAULT_MAX_STREAMS
    health_watches: int = DEFAULT_HEALTH_WATCHES
    admission: Admission = field(default_factory=Admission)

    @property
    def threads(self) -> int:
        return (
            self.unary
            + self.streams
            + self.health_watches
            + self.admission.threads
            + HEALTH_RESERVE
        )


class _Slots:
    """A non-blocking counter with a name, for the RESOURCE_EXHAUSTED message."""

    def __init__(self, limit: int, what: str, hint: str) -> None:
        self._free = threading.BoundedSemaphore(limit)
        self._lock = threading.Lock()
        self.limit = limit
        self.open = 0
        self._what = what
        self._hint = hint

    def take(self, context: grpc.ServicerContext) -> Callable[[], None]:
        """A slot and its one-shot release, or abort RESOURCE_EXHAUSTED."""
        if not self._free.acquire(blocking=False):
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"too many {self._what} in progress (limit {self.limit}); {self._hint}",
            )
        with self._lock:
            self.open += 1
        done = threading.Event()

        def release() -> None:
            with self._lock:
                if done.is_set():
                    return
                done.set()
                self.open -= 1
            self._free.release()

        return release


class CapacityInterceptor(grpc.ServerInterceptor):
    """Wraps every handler with its kind's slot (see the module docstring)."""

    def __init__(self, limits: Limits, stream_hint: str = "close another stream and retry") -> None:
        self.limits = limits
        self.unary = _Slots(limits.unary, "calls", "retry shortly")
        self.streams = _Slots(limits.streams, "open streams", stream_hint)
        self.health_watches = _Slots(
            limits.health_watches, "health watches", "use grpc.health.v1.Health/Check"
        )

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = continuation(handler_call_details)
        if handler is None or handler_call_details.method == HEALTH_CHECK:
            return handler
        if handler_call_details.method == HEALTH_WATCH:
            return _wrap_stream(handler, self.health_watches)
        if handler.response_streaming:
            return _wrap_stream(handler, self.streams)
        method = handler_call_details.method
        own = method if self.limits.admission.share(method) is not None else ""
        return _wrap_unary(handler, self.unary, own)


_MAKERS: dict[tuple[bool, bool], Callable[..., grpc.RpcMethodHandler[Any, Any]]] = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def with_behavior(
    handler: grpc.RpcMethodHandler[Any, Any], behavior: Callable[..., Any]
) -> grpc.RpcMethodHandler[Any, Any]:
    """``handler`` of the same kind and (de)serializers, with ``behavior`` in its place."""
    make = _MAKERS[(handler.request_streaming, handler.response_streaming)]
    return make(
        behavior,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


def _wrap_unary(
    handler: grpc.RpcMethodHandler[Any, Any], slots: _Slots, own: str = ""
) -> grpc.RpcMethodHandler[Any, Any]:
    """``own``: the method, where it awaits its request in a share of its own (admission)."""
    inner = handler.unary_unary or handler.stream_unary
    assert inner is not None  # a non-streaming response has one of the two

    def behavior(request: Any, context: grpc.ServicerContext) -> Any:
        release = slots.take(context)
        try:
            return inner(request, context)
        finally:
            release()

    return with_behavior(handler, OwnShare(behavior, own) if own else behavior)


def _wrap_stream(
    handler: grpc.RpcMethodHandler[Any, Any], slots: _Slots
) -> grpc.RpcMethodHandler[Any, Any]:
    inner = handler.unary_stream or handler.stream_stream
    assert inner is not None  # a streaming response has one of the two

    def behavior(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        release = slots.take(context)
        try:  # freed when the handler ends, not when the client goes: the thread is held till then
            yield from inner(request, context)
        finally:
            release()

    return with_behavior(handler, behavior)
