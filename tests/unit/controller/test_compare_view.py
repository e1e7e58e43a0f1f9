"""``tunelab compare`` tables fit 100 columns and say which load point each figure is at."""

from __future__ import annotations

from typing import Any

from tunelab.analysis.effects import effects_document
from tunelab.cli.compare_view import render_compare_table


def row(name: str, varied: dict[str, str], tput: float, index: int) -> dict[str, Any]:
    points = [
        {
            "key": f"c{c}",
            "concurrency": c,
            "output_throughput": tput * c * (1 + 0.002 * index),
            "median_ttft_ms": 41.234,
            "median_tpot_ms": 1000 / tput,
            "tpot_floor_ms": 2.917,
            "p99_itl_ms": 12.0,
        }
        for c in (1, 8, 256, 1024)
    ]
    return {
        "id": f"x-{name}-{index}",
        "name": f"{name}#{index}",
        "group": "g-1",
        "state": "SUCCEEDED",
        "host": "gpu-box-with-a-long-name-1",
        "varied": varied,
        "points": points,
        "mean_power_watts": 622.248,
        "power_share_of_limit": 0.889,
        "tokens_per_joule": 1.234,
    }


def document() -> dict[str, Any]:
    base = "glm5-moe-backends-with-a-rather-long-experiment-name"
    rows = [row(f"{base}/baseline", {}, 100.0, i) for i in range(1, 6)]
    long_change = "--moe-runner-backend=flashinfer_cutedsl"
    rows += [
        row(f"{base}/{long_change}", {"server.flags.--moe-runner-backend": "x"}, 200.0, i)
        for i in range(1, 6)
    ]
    doc = {
        "varied_fields": ["server.flags.--moe-runner-backend"],
        "experiments": rows,
        "repeats": [],
        "warnings": [
            "runs differ in driver, which the spec did not vary: 580.159.04 (a#1); 575.57.08 (a#2)"
        ],
    }
    doc.update(effects_document(rows))
    return doc


def test_every_line_fits_100_columns_and_names_the_load_point() -> None:
    text = render_compare_table(document())
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    assert "c=1024" in text and "c=8" in text
    assert "effect of --moe-runner-backend=flashinfer_cutedsl against the baseline" in text
    assert "better" in text and "+100.0%" in text
    assert "warning: runs differ in driver" in text


def name_cells(text: str) -> list[str]:
    """The experiments table's first column, each experiment's lines joined (blocks are
    separated by blank lines; a cell ends at the first run of two spaces)."""
    body = text.split("─\n", 1)[1]
    for end in ("\nrepeat spread", "\neffects", "\nanswer ("):  # what follows the table
        body = body.split(end, 1)[0]
    names = []
    for block in body.split("\n\n"):
        cells = [line[2:].split("  ", 1)[0] for line in block.splitlines() if line.strip()]
        names.append("".join(c for c in cells if c))
    return [name for name in names if name]


def test_names_are_never_broken_inside_a_word_at_any_width() -> None:
    """The flake of issue 24: the variant column's width follows the figures' widths, and rich
    folded a long variant name mid-word when the figures were a digit wider."""
    names = [
        "--itl-ms=4,--tokens-per-chunk=1",
        "--moe-runner-backend=flashinfer_cutedsl,--max-num-batched-tokens=16384",
        "baseline",
        "--enable-chunked-prefill/--kv-cache-dtype=fp8_e4m3",
    ]
    for scale in (1.0, 1234.5, 987654.3):
        rows = []
        for i, name in enumerate(names):
            r = row(f"g/{name}", {}, 100.0 * scale, i)
            r["name"] = f"g/{name}"
            r["host"] = ["gpu-a", "a-long-host-name.lab.example"][i % 2]
            rows.append(r)
        doc = {"varied_fields": [], "experiments": rows, "repeats": [], "warnings": []}
        for width in range(72, 161, 4):
            text = render_compare_table(doc, width)
            assert name_cells(text) == names, (width, scale, text)
            for line in text.splitlines():
                assert len(line) <= width, (width, line)
