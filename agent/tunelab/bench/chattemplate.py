"""Prompts of a file wrapped in the served model's chat template, as ``vllm bench serve
--dataset-name custom`` sends them (its ``CustomDataset`` applies the tokenizer's chat template
unless ``--skip-chat-template``). tunelab renders nothing itself: the server does, through
vLLM's ``POST /tokenize`` with ``messages`` (the template applied with a generation prompt),
then ``POST /detokenize`` gives that text back, which is what is sent to ``/v1/completions``.
A server that answers ``/tokenize`` with a 4xx has no template (or no such endpoint): the
prompts go as they are, and the result says so (``dataset.chat_template``: false)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

MAX_BODY = 64 << 20


class ChatTemplateError(Exception):
    """The server could not be asked (unreachable, or a 5xx mid-way)."""


def _post(url: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"{url}: not an http(s) URL")
    headers = {"Content-Type": "application/json"}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)  # noqa: S310
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - http(s)
        found = json.loads(response.read(MAX_BODY))
    if not isinstance(found, dict):
        raise ValueError(f"{url} answered {type(found).__name__}, not an object")
    return found


def server_chat_prompts(
    server_url: Callable[[str], str], model: str, prompts: Sequence[str], timeout: float = 30.0
) -> list[str] | None:
    """Each prompt as the server's chat template renders it (a user message, then the
    assistant's turn opened); None when the server has no chat template."""
    out = []
    for i, prompt in enumerate(prompts):
        messages = [{"role": "user", "content": prompt}]
        try:
            found = _post(
                server_url("/tokenize"),
                {"model": model, "messages": messages, "add_generation_prompt": True},
                timeout,
            )
            text = _post(
                server_url("/detokenize"), {"model": model, "tokens": found["tokens"]}, timeout
            )["prompt"]
        except urllib.error.HTTPError as exc:
            if i == 0 and 400 <= exc.code < 500:
                return None  # no template (vLLM answers 400) or no /tokenize (404)
            raise ChatTemplateError(
                f"the server's chat template, prompt {i + 1}: HTTP {exc.code}"
            ) from None
        except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError) as exc:
            raise ChatTemplateError(
                f"the server's chat template, prompt {i + 1}: {getattr(exc, 'reason', exc)}"
            ) from None
        if not isinstance(text, str):
            raise ChatTemplateError(f"the server's chat template, prompt {i + 1}: no text")
        out.append(text)
    return out
