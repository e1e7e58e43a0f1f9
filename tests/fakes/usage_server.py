"""A stand-in OpenAI-compatible engine whose streamed answers end with a usage block saying
``completion_tokens = --completion-tokens`` (default 10**200: issue 45's first trigger, which
once failed every control-loop tick through an OverflowError in the statistics). Stdlib only.
  GET /health, GET /v1/models (lists --model), POST /v1/completions (streamed: 4 chunks, then
  the usage event, then [DONE])."""

from __future__ import annotations

import argparse
import json
import os
import signal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model", default="hostile")
    p.add_argument("--completion-tokens", default=str(10**200))
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    tokens = int(args.completion_tokens)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: object) -> None:
            pass

        def _send(self, body: bytes, kind: str = "application/json") -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/v1/models":
                self._send(json.dumps({"object": "list", "data": [{"id": args.model}]}).encode())
            else:
                self._send(b"{}")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            events: list[dict[str, Any]] = [
                {"choices": [{"index": 0, "text": " a", "finish_reason": None}]} for _ in range(3)
            ]
            events.append({"choices": [{"index": 0, "text": " b", "finish_reason": "length"}]})
            events.append(
                {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": tokens}}
            )
            body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
            self._send(body + b"data: [DONE]\n\n", "text/event-stream")

    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
