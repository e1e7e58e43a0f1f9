"""The one layout of human output (tunelab.common.textwidth): lines within the width."""

from __future__ import annotations

from tunelab.common.textwidth import clip, table, wrap


def test_a_long_message_wraps_under_itself_or_below_its_row() -> None:
    message = "waiting: no matching host can take runs now: " + "gpu-host UNREACHABLE " * 12
    rows = [("ID", "NAME", "MESSAGE"), ("x-1", "a-name", message)]
    lines = table(rows, 100)
    assert max(map(len, lines)) <= 100
    assert " ".join(" ".join(lines[1:]).split()) == "x-1 a-name " + " ".join(message.split())
    narrow = [("ID", "GROUP", "NAME", "MESSAGE"), ("x-" + "1" * 16, "g-" + "2" * 16,
              "sim-ablation/max-num-seqs=16#2" * 2, message)]  # fmt: skip
    lines = table(narrow, 100)
    assert max(map(len, lines)) <= 100
    assert any(x.startswith("    waiting:") for x in lines)  # no room beside the row: below


def test_a_short_last_column_stays_on_its_row_and_the_named_column_is_cut() -> None:
    rows = [("NAME", "ADDRESS", "LABELS", "CURRENT RUN"),
            ("h" * 40, "10.255.255.1:50051", "pool=dead,team=" + "x" * 40, "-")]  # fmt: skip
    lines = table(rows, 100, cut=2)
    assert len(lines) == 2 and max(map(len, lines)) <= 100
    assert "…" in lines[1] and lines[1].endswith("-")


def test_a_word_longer_than_a_line_is_cut_across_lines() -> None:
    lines = wrap("see http://" + "a" * 150, "  ", "  ", 100)
    assert max(map(len, lines)) <= 100 and "".join(x.strip() for x in lines).endswith("a" * 150)
    assert clip("abcdef", 4) == "abc…" and clip("abc", 4) == "abc"
