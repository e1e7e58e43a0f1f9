"""Domain errors → gRPC status codes, in one table per service, applied by two decorators
(unary and server-streaming handlers). A handler raises plain domain errors; the caller sees a
status code and a message a person can act on.

Anything else a handler raises is a bug: it is logged in full with an error id, and the caller
gets INTERNAL with that id only — never the exception's text, which can hold paths, SQL or
secrets.

No message is longer than ``MESSAGE_CHARS``: gRPC sends it as trailing metadata, and an id of
100 KB echoed whole made the caller's answer a metadata-size error (issue 36.6). An id or name
put in a message goes through ``shown``.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn, TypeVar

import grpc
import structlog

T = TypeVar("T")
StatusTable = Sequence[tuple[type[BaseException], grpc.StatusCode]]
log = structlog.get_logger(__name__)
SHOWN_CHARS = 80  # an id or name echoed in an error
MESSAGE_CHARS = 2000  # any error message (the default metadata limit is 8 KiB)

# What a proxied agent's transport failure means to the person who asked the controller: the
# controller answered, so the caller gets FAILED_PRECONDITION (not "cannot reach" the controller).
PROXY_MESSAGES = {
    grpc.StatusCode.DEADLINE_EXCEEDED: "did not answer in time (deadline exceeded); "
    "the host may be overloaded or hung — `tunelab hosts ls` shows its state",
    grpc.StatusCode.UNAVAILABLE: "cannot be reached; check that it runs and its address "
    "(`tunelab hosts ls`)",
}


def shown(value: str) -> str:
    """``value`` quoted for an error message, cut to ``SHOWN_CHARS``."""
    if len(value) <= SHOWN_CHARS:
        return repr(value)
    return f"{value[:SHOWN_CHARS]!r}… ({len(value)} characters)"


def capped(message: str) -> str:
    """``message`` cut to ``MESSAGE_CHARS``, saying how long it was."""
    if len(message) <= MESSAGE_CHARS:
        return message
    return f"{message[:MESSAGE_CHARS]}… (message cut, {len(message)} characters)"


class StatusMapper:
    """``@mapper.unary`` / ``@mapper.stream`` turn the table's errors into ``context.abort``.

    ``proxy`` (the controller's calls to agents): a ``grpc.RpcError`` raised inside a handler
    passes its own status through, its message prefixed with ``proxy`` (transport failures
    become FAILED_PRECONDITION, see PROXY_MESSAGES). ``daemon`` names whose
    log holds an internal error's details.
    """

    def __init__(self, table: StatusTable, proxy: str = "", daemon: str = "daemon") -> None:
        self._table = tuple(table)
        self._handled = tuple(kind for kind, _ in self._table)
        self._proxy = proxy
        self._daemon = daemon

    def _abort(self, context: grpc.ServicerContext, exc: BaseException, method: str) -> NoReturn:
        if self._proxy and isinstance(exc, grpc.RpcError):
            code = exc.code()
            if code in PROXY_MESSAGES:
                message = f"{self._proxy} {PROXY_MESSAGES[code]}"
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, message)
            context.abort(code, capped(f"{self._proxy}: {exc.details() or code.name}"))
        if isinstance(exc, self._handled):
            code = next(code for kind, code in self._table if isinstance(exc, kind))
            context.abort(code, capped(str(exc)))
        if context.code() is not None:  # type: ignore[attr-defined]  # the handler aborted itself
            raise exc
        error_id = secrets.token_hex(4)
        log.error("rpc_internal_error", method=method, error_id=error_id, exc_info=exc)
        context.abort(
            grpc.StatusCode.INTERNAL,
            f"internal error {error_id} in {method}; the {self._daemon}'s log has the details",
        )

    def unary(self, method: Callable[..., T]) -> Callable[..., T]:
        name = method.__name__

        @functools.wraps(method)
        def wrapper(service: Any, request: Any, context: grpc.ServicerContext) -> T:
            try:
                return method(service, request, context)
            except Exception as exc:  # the table's, or INTERNAL (logged in full)
                self._abort(context, exc, name)

        return wrapper

    def stream(self, method: Callable[..., Iterator[T]]) -> Callable[..., Iterator[T]]:
        name = method.__name__

        @functools.wraps(method)
        def wrapper(service: Any, request: Any, context: grpc.ServicerContext) -> Iterator[T]:
            try:
                yield from method(service, request, context)
            except Exception as exc:  # the table's, or INTERNAL (logged in full)
                self._abort(context, exc, name)

        return wrapper
