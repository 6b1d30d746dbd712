"""How `trio-kafka simulate` hands seeds to its worker processes: in seed order, a
bounded window of tasks ahead (a run of a million seeds holds a few dozen, not a future
per seed), chunks sized by how long the seeds take, and a budget's end drops the tasks
not started."""

from __future__ import annotations

import gc
import itertools
import time
from collections.abc import Iterator

from trio_kafka._cli import simulate_workers
from trio_kafka._cli.simulate_workers import _chunk_size, run_for, run_many
from trio_kafka.sim.runner import run_seed


def _a_million_seeds_from(first: int, taken: list[int]) -> Iterator[int]:
    for seed in range(first, first + 1_000_000):
        if len(taken) >= 1_000:
            raise AssertionError("the run took 1,000 seeds ahead of its workers")
        taken.append(seed)
        yield seed


def test_seeds_are_taken_as_the_workers_need_them() -> None:
    """A run of a million seeds takes from them only what its window needs (taking
    them all up front, as `Executor.map` does, holds a task and a future per seed)."""
    taken: list[int] = []
    results = run_many("idempotent", _a_million_seeds_from(100, taken), "lite", 2)
    first = list(itertools.islice(results, 6))
    results.close()
    assert [r.seed for r in first] == list(range(100, 106))
    ahead = simulate_workers._AHEAD * 2 * simulate_workers._MAX_CHUNK
    assert 6 <= len(taken) <= 6 + ahead, len(taken)
    alone = run_seed("idempotent", 103, profile="lite").result.for_sweep()
    assert first[3].trace_digest == alone.trace_digest


def test_chunks_hold_about_a_quarter_second_of_seeds() -> None:
    assert _chunk_size(0, 0.0) == 1  # nothing known yet: one seed a task
    assert _chunk_size(100, 50.0) == 1  # standard seeds, 0.5 s each
    assert _chunk_size(100, 2.5) == 10  # 25 ms each
    assert _chunk_size(1000, 1.0) == simulate_workers._MAX_CHUNK  # 1 ms each: capped
    assert _chunk_size(5, 0.0) == simulate_workers._MAX_CHUNK


def test_a_budget_runs_a_contiguous_range_and_stops_soon_after_its_end() -> None:
    started = time.monotonic()
    results = list(run_for("idempotent", 500, "lite", 2, 3.0))
    took = time.monotonic() - started
    assert results, "no seed in 3 s"
    assert [r.seed for r in results] == list(range(500, 500 + len(results)))
    # Past the end only the tasks started by then run (a few seeds, ~0.25 s a task).
    assert took < 3.0 + 10.0, took
    capped = list(run_for("idempotent", 700, "lite", 2, 60.0, max_seeds=5))
    assert [r.seed for r in capped] == [700, 701, 702, 703, 704]


def test_a_worker_runs_its_seeds_with_what_it_started_with_frozen() -> None:
    """A worker's modules and inherited objects are out of the collector's sight (a
    full collection traverses a seed's objects only)."""
    with simulate_workers._worker_pool(1, ()) as pool:
        frozen = pool.submit(gc.get_freeze_count).result()
    assert frozen > 10_000, frozen


def test_a_run_in_this_process_gives_back_what_it_froze_and_its_thresholds() -> None:
    assert gc.get_freeze_count() == 0
    thresholds = gc.get_threshold()
    results = list(run_many("idempotent", range(40, 42), "lite", 1))
    assert [r.seed for r in results] == [40, 41]
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == thresholds


def test_seeds_run_without_a_collection_and_each_seeds_garbage_is_collected_after_it() -> None:
    collections: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.callbacks.append(note)
    try:
        results = list(run_many("idempotent", range(40, 43), "lite", 1))
    finally:
        gc.callbacks.remove(note)
    assert [r.seed for r in results] == [40, 41, 42]
    assert collections == [1, 1, 1]  # one young collection after each seed, none during


def test_a_worker_collects_between_seeds_not_during_them() -> None:
    with simulate_workers._worker_pool(1, ()) as pool:
        thresholds = pool.submit(gc.get_threshold).result()
    assert thresholds[0] == simulate_workers._SEED_GC_THRESHOLD
