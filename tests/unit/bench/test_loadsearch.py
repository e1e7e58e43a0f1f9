"""The load-search planner: ladder, bisection, a confirming repeat, and the step down when the
repeat breaks an SLO — against a server model whose p99 TPOT is known at every load."""

from __future__ import annotations

from tunelab.bench.loadsearch import LoadSearch, meets, probe_count_bound


def point(tpot: float) -> dict[str, float]:
    return {"completed": 10, "failed": 0, "p99_tpot_ms": tpot}


def run(
    search: LoadSearch, tpot_at: dict[float, list[float]] | None = None, slope: float = 1.0
) -> list[float]:
    loads = []
    while (load := search.next_load()) is not None:
        loads.append(load)
        queued = (tpot_at or {}).get(load)
        tpot = queued.pop(0) if queued else 10 + slope * load
        search.tell(load, point(tpot))
    return loads


def test_a_concurrency_search_brackets_bisects_and_confirms() -> None:
    # TPOT = 10 + c ms: c <= 40 meets 50 ms
    search = LoadSearch("concurrency", 1024, {"p99_tpot_ms": 50})
    loads = run(search)
    assert loads[:7] == [1, 2, 4, 8, 16, 32, 64]  # the ladder stops at the first miss
    assert search.answer() in range(36, 41)  # within 1/8 of the true 40
    answer = search.answer()
    assert answer is not None
    assert loads[-1] == answer and loads.count(answer) == 2  # confirmed
    doc = search.document({answer: [0, 1]})
    assert doc["met"] and doc["confirmed"] and doc["answer_points"] == [0, 1]
    assert len(loads) <= probe_count_bound(1024)


def test_the_maximum_is_the_answer_when_every_load_meets_the_slo() -> None:
    search = LoadSearch("concurrency", 16, {"p99_tpot_ms": 500})
    assert run(search) == [1, 2, 4, 8, 16, 16]
    assert search.answer() == 16


def test_a_failed_confirmation_steps_down_to_the_next_load_that_met_the_slo() -> None:
    search = LoadSearch("concurrency", 8, {"p99_tpot_ms": 50})
    loads = run(search, {8: [20, 90]})  # 8 met once, then the repeat broke it
    assert loads == [1, 2, 4, 8, 8]
    assert search.answer() == 4 and search.confirmed is False


def test_no_load_meets_the_slo() -> None:
    search = LoadSearch("rate", 64, {"p99_tpot_ms": 5})
    assert run(search) == [1.0]
    assert search.answer() is None and not search.document({})["met"]


def test_a_point_with_failed_requests_never_meets_the_slo() -> None:
    assert not meets({"p99_tpot_ms": 50}, {"completed": 9, "failed": 1, "p99_tpot_ms": 1})
    assert not meets({"p99_tpot_ms": 50}, {"completed": 9, "failed": 0})


def batched(slots: int) -> dict[float, dict[str, float]]:
    """A server with ``slots`` batch slots: throughput grows with the load up to the slots,
    then stays flat; TPOT does not move (queueing shows in TTFT, which has no SLO here)."""
    return {
        float(c): {
            "completed": 10,
            "failed": 0,
            "p99_tpot_ms": 10.0,
            "output_throughput": 100.0 * min(c, slots),
        }
        for c in (2**i for i in range(12))
    }


def run_batched(search: LoadSearch, slots: int) -> list[float]:
    loads = []
    while (load := search.next_load()) is not None:
        loads.append(load)
        search.tell(load, batched(slots)[load])
    return loads


def test_without_a_plateau_a_tpot_slo_walks_to_the_maximum_past_the_batch() -> None:
    search = LoadSearch("concurrency", 1024, {"p99_tpot_ms": 25})
    run_batched(search, 8)
    assert search.answer() == 1024  # every point past 8 measured queueing


def test_a_plateau_stops_the_ladder_where_doubling_stops_paying() -> None:
    search = LoadSearch("concurrency", 1024, {"p99_tpot_ms": 25}, plateau=0.05)
    loads = run_batched(search, 8)
    assert loads == [1, 2, 4, 8, 16, 32, 8]  # 16 and 32 gave +0 %: the answer is 8, confirmed
    assert search.answer() == 8 and search.confirmed
    doc = search.document({8.0: [3, 6]})
    assert doc["plateau"] == 0.05 and doc["plateau_at"] == 16
    assert [p.get("plateau", False) for p in doc["probes"]] == [False] * 5 + [True, False]


def test_one_flat_doubling_at_a_small_load_does_not_stop_the_ladder() -> None:
    """A short first point can come out flat by chance; the next doubling gains again."""
    search = LoadSearch("concurrency", 1024, {"p99_tpot_ms": 25}, plateau=0.05)
    summaries = batched(8)
    summaries[2.0] = {**summaries[2.0], "output_throughput": 101.0}  # 1 -> 2: +1 %
    loads = []
    while (load := search.next_load()) is not None:
        loads.append(load)
        search.tell(load, summaries[load])
    assert loads == [1, 2, 4, 8, 16, 32, 8] and search.answer() == 8


def test_a_plateau_does_not_stop_a_ladder_that_still_gains() -> None:
    search = LoadSearch("concurrency", 64, {"p99_tpot_ms": 25}, plateau=0.05)
    run_batched(search, 1024)  # throughput doubles with every doubling up to the maximum
    assert search.answer() == 64 and search.plateau_at is None


def test_an_slo_miss_before_the_plateau_bisects_as_before() -> None:
    search = LoadSearch("concurrency", 1024, {"p99_tpot_ms": 50}, plateau=0.05)
    loads = run(search)  # TPOT = 10 + c, no throughput reported: the plateau never applies
    assert loads[:7] == [1, 2, 4, 8, 16, 32, 64] and search.answer() in range(36, 41)


def test_a_failed_confirmation_below_a_plateau_steps_down() -> None:
    search = LoadSearch("concurrency", 1024, {"p99_tpot_ms": 25}, plateau=0.05)
    summaries = batched(8)
    loads = []
    while (load := search.next_load()) is not None:
        loads.append(load)
        repeat = load in loads[:-1]
        search.tell(load, {**summaries[load], "p99_tpot_ms": 90.0} if repeat else summaries[load])
    assert loads == [1, 2, 4, 8, 16, 32, 8] and search.answer() == 4
