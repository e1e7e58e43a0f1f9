"""Prompts of a file wrapped in the served model's chat template, as ``vllm bench serve
--dataset-name custom`` sends them (its ``CustomDataset`` applies the tokenizer's chat template
unless ``--skip-chat-template``). tunelab renders nothing itself: the server does, through
vLLM's ``POST /tokenize`` with ``messages`` (the template applied with a generation prompt),
then ``POST /detokenize`` gives that text back, which is what is sent to ``/v1/completions``.
A server that answers ``/tokenize`` with a 4xx has no template (or no such endpoint): the
prompts go as they are, and the result says so (``dataset.chat_template``: false)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from tunelab.common.boundedhttp import HttpFailure, post_json
from tunelab.common.sanitize import printable

MAX_BODY = 64 << 20  # a 10M-token prompt's ids as JSON fit; a 302 with an endless body stops here


class ChatTemplateError(Exception):
    """The server could not be asked (unreachable, or a 5xx mid-way)."""


class _Refused(Exception):
    def __init__(self, status: int) -> None:
        self.status = status


def _post(url: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    """The server's JSON answer (a 4xx/5xx: _Refused; no answer: HttpFailure), bounded by
    tunelab.common.boundedhttp: ``timeout`` in all, at most ``MAX_BODY`` bytes."""
    reply = post_json(url, body, seconds=timeout, max_body=MAX_BODY)
    if reply.status != 200:
        raise _Refused(reply.status)
    found = json.loads(reply.whole(f"{url}'s answer"))
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
        except _Refused as exc:
            if i == 0 and 400 <= exc.status < 500:
                return None  # no template (vLLM answers 400) or no /tokenize (404)
            raise ChatTemplateError(
                f"the server's chat template, prompt {i + 1}: HTTP {exc.status}"
            ) from None
        except (HttpFailure, ValueError, KeyError, TypeError) as exc:
            raise ChatTemplateError(
                f"the server's chat template, prompt {i + 1}: {printable(str(exc), 200)}"
            ) from None
        if not isinstance(text, str):
            raise ChatTemplateError(f"the server's chat template, prompt {i + 1}: no text")
        out.append(text)
    return out
