"""Specs a hostile or careless user submits, each with the words its refusal must contain.
Shared by the integration test (refused, queue untouched, RSS bounded) and
benchmarks/hostile_specs.py (time and RSS of each refusal)."""

from __future__ import annotations

BASE = """
name: hostile
server:
  command: [python, -m, tunelab.bench.simulator]
  flags: {--port: "{port}"}
  ready: {model: sim}
benchmark: {concurrency: [1], requests: 20, input_len: 64, output_len: 32}
"""
# The bomb: ten levels of nine aliases each (9**10 strings expanded) in 489 bytes.
BOMB = (
    "\n".join(
        ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
        + [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    )
    + "\nname: bomb\n"
)
MATRIX_AXES = "".join(f"  server.env.V{i}: [a,b,c,d,e,f,g,h,i,j]\n" for i in range(9))

HOSTILE: dict[str, tuple[str, str]] = {
    "repeat-1e9": (BASE + "repeat: 1000000000\n", "more than 10000 experiments"),
    "matrix-1e9": (BASE + "matrix:\n" + MATRIX_AXES, "more than 10000 experiments"),
    "alias-bomb": (BOMB, "once aliases are expanded"),
    "recursive-alias": (BASE.replace("ready: {model: sim}", "ready: &r {x: [*r]}"), "contains it"),
    "input_len-1e12": (
        BASE.replace("input_len: 64", "input_len: 1000000000000"),
        "benchmark.input_len: must be in 0-10000000",
    ),
    "max_duration-nan": (BASE + "max_duration: .nan\n", "max_duration: expected a finite"),
    "rate-inf": (
        BASE.replace("concurrency: [1], ", "rate: .inf, "),
        "benchmark.rate: must be a finite number",
    ),
    "deep-nesting": (BASE + "x: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than 64"),
    "two-megabytes": (BASE + "#" + "x" * 2_000_000 + "\n", "the limit is 1048576"),
}
