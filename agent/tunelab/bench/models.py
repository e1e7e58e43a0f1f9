"""The model to benchmark when none is given: the first id the server lists at ``/v1/models``
(what ``vllm bench serve`` and guidellm do)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

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
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - http(s) only
            body = response.read(MAX_BODY)
    except urllib.error.HTTPError as exc:
        raise ModelLookupError(f"GET {url}: HTTP {exc.code}; give --model") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ModelLookupError(f"cannot reach {url}: {reason}", unreachable=True) from None
    try:
        data = json.loads(body).get("data")
        first = data[0]["id"] if isinstance(data, list) and data else None
    except (ValueError, AttributeError, TypeError, KeyError):
        first = None
    if not isinstance(first, str) or not first or any(c.isspace() for c in first):
        raise ModelLookupError(f"GET {url} lists no model id; give --model")
    return first
