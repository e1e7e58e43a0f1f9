"""Human output fits the terminal: at most ``width()`` columns (100 where no terminal says, or
``COLUMNS``), for every command's text. One place wraps a sentence, cuts a cell and lays out a
table, so a long name, message or argv never makes a line run past the edge."""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from collections.abc import Sequence

WIDTH = 100  # the width promised where the terminal does not say (a pipe, a log)
NARROWEST = 40  # below this a table is unreadable anyway: lines may be longer
SHORT = 20  # a last column this narrow is kept on its row (a name is cut for it)


def width() -> int:
    """The terminal's columns (``COLUMNS`` first), 100 on a pipe."""
    return max(NARROWEST, shutil.get_terminal_size((WIDTH, 24)).columns)


def error_line(text: str) -> str:
    """An error as printed: wrapped to the width on a terminal or where ``COLUMNS`` says one;
    one line on a plain pipe, where a script greps it."""
    asked = "COLUMNS" in os.environ or sys.stderr.isatty()
    return wrapped(text, "", "  ") if asked else text


def wrap(text: str, indent: str = "", later: str = "  ", columns: int | None = None) -> list[str]:
    """``text`` as lines of at most ``columns``, continued under ``indent + later``; a word
    longer than a line (a URL, a path) is cut across lines rather than run past the edge."""
    return textwrap.wrap(
        text, columns or width(), initial_indent=indent, subsequent_indent=indent + later,
        break_long_words=True, break_on_hyphens=False,
    ) or [indent.rstrip()]  # fmt: skip


def wrapped(text: str, indent: str = "", later: str = "  ", columns: int | None = None) -> str:
    """``wrap``'s lines as one string, each line of ``text`` wrapped on its own."""
    return "\n".join(out for line in text.split("\n") for out in wrap(line, indent, later, columns))


def clip(text: str, columns: int) -> str:
    """``text`` cut to ``columns`` with an ellipsis where it was longer."""
    return text if len(text) <= columns else text[: max(columns - 1, 0)] + "…"


def table(rows: Sequence[Sequence[str]], columns: int | None = None, cut: int = -2) -> list[str]:
    """Aligned columns within ``columns``. The last column (a message) wraps under itself, or
    onto the lines below the row when little room is left; where the other columns do not fit
    (with the last, when it is short), the column ``cut`` (a name) is cut with an ellipsis."""
    limit = columns or width()
    count = len(rows[0])
    widths = [max(len(r[i]) for r in rows) for i in range(count)]
    lead = sum(widths[:-1]) + 2 * (count - 1)
    short = widths[-1] if widths[-1] <= SHORT else 0  # a short last column stays on its row
    if lead + short > limit and count > 1:
        at = cut % count
        keep = max(8, widths[at] - (lead + short - limit))
        rows = [[*r[:at], clip(r[at], keep), *r[at + 1 :]] for r in rows]
        lead -= widths[at] - keep
        widths[at] = keep
    room = limit - lead - 2
    out = []
    for r in rows:
        head = "  ".join(c.ljust(widths[i]) for i, c in enumerate(r[:-1]))
        last = r[-1]
        if len(head) + 2 + len(last) <= limit:
            out.append(f"{head}  {last}".rstrip())
        elif room >= 40:
            first, *rest = wrap(last, "", "", room)
            out.append(f"{head}  {first}".rstrip())
            out += [" " * (lead + 2) + line for line in rest]
        else:
            out.append(head.rstrip())
            out += wrap(last, "    ", "", limit)
    return out
