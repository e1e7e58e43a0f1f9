"""Domain errors → gRPC status codes, in one table per service, applied by two decorators
(unary and server-streaming handlers). A handler raises plain domain errors; the caller sees a
status code and a message a person can act on."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import grpc

T = TypeVar("T")
StatusTable = Sequence[tuple[type[BaseException], grpc.StatusCode]]


class StatusMapper:
    """``@mapper.unary`` / ``@mapper.stream`` turn the table's errors into ``context.abort``.

    ``proxy`` (the controller's calls to agents): a ``grpc.RpcError`` raised inside a handler
    passes its own status through, prefixed with ``proxy``.
    """

    def __init__(self, table: StatusTable, proxy: str = "") -> None:
        self._table = tuple(table)
        self._handled = tuple(kind for kind, _ in self._table)
        self._proxy = proxy

    def _abort(self, context: grpc.ServicerContext, exc: BaseException) -> None:
        if isinstance(exc, grpc.RpcError):
            context.abort(exc.code(), f"{self._proxy}: {exc.details()}")
        code = next(code for kind, code in self._table if isinstance(exc, kind))
        context.abort(code, str(exc))

    def _caught(self) -> tuple[type[BaseException], ...]:
        return (*self._handled, grpc.RpcError) if self._proxy else self._handled

    def unary(self, method: Callable[..., T]) -> Callable[..., T]:
        caught = self._caught()

        @functools.wraps(method)
        def wrapper(service: Any, request: Any, context: grpc.ServicerContext) -> T:
            try:
                return method(service, request, context)
            except caught as exc:
                self._abort(context, exc)
                raise  # abort() raises; this line is for type checkers

        return wrapper

    def stream(self, method: Callable[..., Iterator[T]]) -> Callable[..., Iterator[T]]:
        caught = self._caught()

        @functools.wraps(method)
        def wrapper(service: Any, request: Any, context: grpc.ServicerContext) -> Iterator[T]:
            try:
                yield from method(service, request, context)
            except caught as exc:
                self._abort(context, exc)

        return wrapper
