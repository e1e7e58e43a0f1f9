"""The model to benchmark when none is given: the first id the server lists at ``/v1/models``
(what ``vllm bench serve`` and guidellm do)."""

from __future__ import annotations

import json

from tunelab.common.boundedhttp import HttpFailure, get

MAX_BODY = 1 << 20


class ModelLookupError(Exception):
    """The server could not be asked, or listed no model."""

    def __init__(self, message: str, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


def models_url(base: str) -> str:
    return base.rstrip("/").removesuffix("/v1") + "/v1/models"


def first_model_id(base: str, timeout: float = 10.0) -> str:
    url = models_url(base)
    try:
        reply = get(url, seconds=timeout, max_body=MAX_BODY)  # tunelab.common.boundedhttp
    except HttpFailure as exc:
        if exc.protocol:
            raise  # something that is not an HTTP server answered: the caller says so
        raise ModelLookupError(f"cannot reach {url}: {exc}", unreachable=True) from None
    if reply.status != 200:
        raise ModelLookupError(f"GET {url}: HTTP {reply.status}; give --model")
    body = reply.body
    try:
        data = json.loads(body).get("data")
        first = data[0]["id"] if isinstance(data, list) and data else None
    except (ValueError, AttributeError, TypeError, KeyError):
        first = None
    if not isinstance(first, str) or not first or any(c.isspace() for c in first):
        raise ModelLookupError(f"GET {url} lists no model id; give --model")
    return first
