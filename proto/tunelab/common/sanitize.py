"""The one sanitiser for strings from outside (issue 45.6): what a server, a checkpoint or a
user supplies (an engine's version from its package ``METADATA``, a model's architecture, an
HTTP answer's words, a metric's name) is made printable and cut to a stated length before a
terminal, a log, Slack or Prometheus sees it, and where it enters the store.

- :func:`printable`: control characters (C0 and C1, DEL, so ``ESC]52`` clipboard writes and
  ``ESC]0`` title changes), Unicode format characters (bidirectional overrides, zero-width
  ones) and line breaks are dropped (a line break becomes a space: a forged log line cannot
  begin); the rest is cut to ``limit`` characters, ``…`` marking the cut.
- :func:`slack_text`: Slack's mrkdwn control characters escaped as Slack documents (``&``,
  ``<``, ``>``: no ``<!channel>``, no forged link) and ``@`` kept from mentioning anyone.
"""

from __future__ import annotations

import unicodedata

ONE_LINE = 256  # a name, a version, a short reason
LINE_BREAKS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")
SLACK = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "@": "@\u200b"}  # zero-width space after @


def _keep(char: str) -> bool:
    if char.isascii():
        return char.isprintable()
    return unicodedata.category(char) not in ("Cc", "Cf", "Cs", "Co", "Cn")


def printable(text: object, limit: int = ONE_LINE) -> str:
    """``text`` as one printable line of at most ``limit`` characters."""
    value = text if isinstance(text, str) else str(text)
    out = "".join(
        " " if char in LINE_BREAKS or char == "\t" else char
        for char in value[: limit * 4 + 16]  # a bound on the work, whatever is dropped
        if char in LINE_BREAKS or char == "\t" or _keep(char)
    )
    return out if len(out) <= limit else out[: max(limit - 1, 0)] + "…"


def printable_lines(text: str, limit: int) -> str:
    """``text`` with its line breaks kept (``\\n`` only), each line made :func:`printable`, the
    whole at most ``limit`` characters."""
    lines = [printable(line, limit) for line in text[: limit * 4 + 16].split("\n")]
    return _cut("\n".join(lines), limit)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def slack_text(text: str, limit: int) -> str:
    """Text for a Slack-compatible ``{"text": ...}``: printable lines, escaped, ``limit`` long."""
    safe = printable_lines(text, limit)
    return _cut("".join(SLACK.get(char, char) for char in safe), limit)
