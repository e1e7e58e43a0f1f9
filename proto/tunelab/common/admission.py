"""Admission: what a call may cost a daemon before its request message has arrived.

The sync gRPC server learns of a call when its headers arrive; its interceptors run then, on the
server's own loop, but every handler (a refusal included) is then given a pool thread that first
waits for the request message — with no limit. A caller that opens calls and never sends a
message could hold every thread (issue 23). So the daemon's pool is a ``RequestGate``, which
sees each call as it is handed to the pool, before a thread is spent on it, and:

- **refuses at once** a call whose handler is a ``Refusal`` (no token, a wrong token): the status
  goes out from the server's loop and no thread ever waits for that caller's message;
- **caps the calls still awaiting their message** from callers not proven (``Trusted``): at most
  ``Admission.per_peer`` per source address and ``Admission.awaiting`` in all, beyond which a
  call is answered RESOURCE_EXHAUSTED from the loop;
- **bounds the request read**: a call whose request has not arrived within
  ``Admission.read_timeout`` seconds is ended DEADLINE_EXCEEDED and its thread freed (a keepalive
  ping does not count as progress).

Proven callers (a matching bearer token, or every caller when client certificates are required)
are never refused by the caps: with a token configured nobody without it can take their threads.
A method whose caller proves itself only in its message (``ReportRun``: a Slurm job's per-attempt
token, checked by the handler) is never ``Trusted`` at the header stage; it is marked ``OwnShare``
and counted against awaiting slots of its own (``Admission.own``), so strangers holding every
common slot cannot get Slurm reports refused (they can still take that method's own slots, at
most ``Share.per_peer`` per address, each for one read deadline).

This leans on how grpcio's sync server hands a call to its pool (``submit(context.run, in_pool,
rpc_event, state, behavior, argument_thunk, ...)``); ``engaged`` is False and the gate passes
calls through unchanged (logging once) if that layout is not found, and a test fails then.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
import structlog

log = structlog.get_logger(__name__)

DEFAULT_READ_TIMEOUT_S = 10.0  # a request of a few MiB on a slow link; real clients send at once
DEFAULT_PER_PEER_AWAITING = 8
DEFAULT_AWAITING = 16
_IN_POOL = {"_unary_response_in_pool", "_stream_response_in_pool"}
# Slurm jobs' reports: their per-attempt token is in the message, checked by the controller.
REPORT_RUN = "/tunelab.v1.Controller/ReportRun"


@dataclass(frozen=True)
class Share:
    """Awaiting slots of a method's own: at most ``awaiting`` calls, ``per_peer`` per address."""

    awaiting: int
    per_peer: int


# a job reports once a few seconds, each from its node: 4 per address lets 4 strangers' addresses
# at most fill it, and a node's own burst of reports is never more than a retry away
DEFAULT_OWN_SHARES: tuple[tuple[str, Share], ...] = ((REPORT_RUN, Share(awaiting=16, per_peer=4)),)


@dataclass(frozen=True)
class Admission:
    """Bounds on calls that have sent their headers but not yet their request message."""

    read_timeout: float = DEFAULT_READ_TIMEOUT_S
    per_peer: int = DEFAULT_PER_PEER_AWAITING
    awaiting: int = DEFAULT_AWAITING
    own: tuple[tuple[str, Share], ...] = field(default=DEFAULT_OWN_SHARES)

    def share(self, method: str) -> Share | None:
        """The slots of its own ``method`` has, if any."""
        return dict(self.own).get(method)

    @property
    def threads(self) -> int:
        """Pool threads that may wait for a request at once: the common slots and each share's."""
        return self.awaiting + sum(share.awaiting for _, share in self.own)


class Refusal:
    """A handler behavior that refuses its call; the gate answers it before reading anything."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self.code = code
        self.details = details

    def __call__(self, request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(self.code, self.details)  # only when the gate is not engaged


class Trusted:
    """A handler behavior whose caller is proven (its token matched): never capped."""

    def __init__(self, behavior: Callable[..., Any]) -> None:
        self.behavior = behavior

    def __call__(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self.behavior(request, context)


class OwnShare:
    """A handler behavior whose unproven calls are counted against ``method``'s own share."""

    def __init__(self, behavior: Callable[..., Any], method: str) -> None:
        self.behavior = behavior
        self.method = method

    def __call__(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self.behavior(request, context)


def peer_address(peer: str) -> str:
    """``ipv4:10.0.0.1:5555`` → ``ipv4:10.0.0.1`` (the port is the caller's to choose)."""
    kind, _, rest = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        return f"{kind}:{rest.rpartition(':')[0]}"
    return peer


class _Deadlines:
    """One thread that runs each armed action once its time has come, unless disarmed first."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._armed: set[int] = set()
        self._ids = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="rpc-read-deadlines", daemon=True)
        self._thread.start()

    def arm(self, after: float, action: Callable[[], None]) -> int:
        with self._cond:
            key = next(self._ids)
            heapq.heappush(self._heap, (self._clock() + after, key, action))
            self._armed.add(key)
            self._cond.notify()
            return key

    def disarm(self, key: int) -> None:
        with self._cond:
            self._armed.discard(key)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(5)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > self._clock()):
                    self._cond.wait(self._heap[0][0] - self._clock() if self._heap else None)
                if self._stopped:
                    return
                _, key, action = heapq.heappop(self._heap)
                if key not in self._armed:
                    continue
                self._armed.discard(key)
            action()


class RequestGate(futures.ThreadPoolExecutor):
    """The server's thread pool, admitting each call before a thread waits on it."""

    def __init__(
        self,
        max_workers: int,
        admission: Admission | None = None,
        *,
        all_trusted: bool = False,
        thread_name_prefix: str = "rpc",
    ) -> None:
        super().__init__(max_workers=max_workers, thread_name_prefix=thread_name_prefix)
        self.admission = admission or Admission()
        self.all_trusted = all_trusted
        self.engaged = True
        self.refused = Counter[str]()  # reason → calls answered from the loop
        self._awaiting = Counter[tuple[str, str]]()  # (share, peer) → untrusted calls awaiting
        self._lock = threading.Lock()
        self._deadlines = _Deadlines()

    def awaiting(self, share: str = "") -> int:
        """Untrusted calls awaiting their message in the common slots, or in ``share``'s own."""
        with self._lock:
            return sum(n for (name, _), n in self._awaiting.items() if name == share)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> futures.Future[Any]:
        if not (
            len(args) >= 5
            and getattr(args[0], "__name__", "") in _IN_POOL
            and hasattr(args[1], "call")
            and callable(args[4])
        ):
            if self.engaged:
                self.engaged = False
                log.warning("rpc_admission_off", reason="unknown grpcio pool layout")
            return super().submit(fn, *args, **kwargs)
        call = args[1].call
        behavior = args[3]
        if isinstance(behavior, Refusal):
            return self._refuse(call, behavior.code, behavior.details, "unauthenticated")
        trusted = self.all_trusted or isinstance(behavior, Trusted)
        own = self.admission.share(behavior.method) if isinstance(behavior, OwnShare) else None
        name = behavior.method if own is not None else ""
        per_peer, awaiting = (
            (own.per_peer, own.awaiting)
            if own
            else (
                self.admission.per_peer,
                self.admission.awaiting,
            )
        )
        key = (name, peer_address(_text(call.peer())))
        with self._lock:
            if not trusted:
                held = sum(n for (share, _), n in self._awaiting.items() if share == name)
                if self._awaiting[key] >= per_peer:
                    busy = f"{per_peer} calls from {key[1]}"
                elif held >= awaiting:
                    busy = f"{awaiting} calls in all"
                else:
                    busy = ""
                if busy:
                    return self._refuse(
                        call,
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"too many calls awaiting their request ({busy}); send the request "
                        "with the call, or retry shortly",
                        "awaiting",
                    )
                self._awaiting[key] += 1
        done = threading.Event()

        def arrived() -> None:
            with self._lock:
                if done.is_set():
                    return
                done.set()
                if not trusted:
                    self._awaiting[key] -= 1
                    if not self._awaiting[key]:
                        del self._awaiting[key]

        timeout = self.admission.read_timeout

        def expire() -> None:
            # the slot is given back before the caller can learn of the end: a caller that
            # retries on DEADLINE_EXCEEDED must find it free (a full run saw the count lag)
            arrived()
            call.cancel(
                _status(grpc.StatusCode.DEADLINE_EXCEEDED),
                f"request message not received within {timeout:g} s",
            )

        deadline = self._deadlines.arm(timeout, expire)
        read = args[4]

        def read_within_deadline() -> Any:
            try:
                return read()
            finally:
                self._deadlines.disarm(deadline)
                arrived()

        future = super().submit(fn, *args[:4], read_within_deadline, *args[5:], **kwargs)

        def finished(_: futures.Future[Any]) -> None:  # also when the read never ran
            self._deadlines.disarm(deadline)
            arrived()

        future.add_done_callback(finished)
        return future

    def _refuse(
        self, call: Any, code: grpc.StatusCode, details: str, reason: str
    ) -> futures.Future[Any]:
        self.refused[reason] += 1
        call.cancel(_status(code), details)
        answered: futures.Future[Any] = futures.Future()
        answered.set_result(None)
        return answered

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._deadlines.stop()
        super().shutdown(wait, cancel_futures=cancel_futures)


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _status(code: grpc.StatusCode) -> int:
    number: int = code.value[0]
    return number
