"""The mutant search: does the simulator catch each planted client bug, and how fast?

Theory of operation
-------------------
`producer/_mutants.py` plants known bugs behind a switch. For each mutant, `hunt` runs
the seeds of each workload that can expose it (0, 1, 2... up to a budget) with the
mutant enabled, until the first seed whose check fails: the mutant is *killed*, and the
number of seeds it took is the simulator's cost to find that bug. The failing seed is
then minimized as any failure is (ddmin over the faults it fired, the mutant still
enabled, keeping the failure class). The kill rate over all mutants, the seeds each
needed and the median minimized fault list are the simulator's own quality measure
(research/simulation.md: every bug within 2,000 seeds, median at most 3 faults).

Seeds run in worker processes in chunks (`jobs`); each worker enables the mutant
itself, so nothing depends on how processes are started. Chunks are consumed in seed
order and the lowest failing seed wins, so the answer does not depend on `jobs`.
"""

from __future__ import annotations

import concurrent.futures
import statistics
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs

from trio_kafka.producer import _mutants
from trio_kafka.sim.faults import FaultIdentity
from trio_kafka.sim.minimize import ddmin, fault_id
from trio_kafka.sim.runner import SeedResult, run_seed

#: Seeds a mutant may take before it counts as surviving.
BUDGET = 2000


@attrs.frozen(slots=True)
class Hunt:
    """What the search found for one mutant."""

    mutant: str
    description: str
    killed: bool
    #: The workload and seed that killed it (None: survived), and seeds run to find it.
    workload: str | None
    seed: int | None
    seeds_run: int
    failure_class: str | None = None
    violation: str | None = None
    #: Faults the failing seed fired, and the minimized list (fault ids).
    faults_before: int = 0
    minimized: tuple[str, ...] = ()
    replays: int = 0

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def run_with_mutant(args: tuple[str, str, int, str]) -> SeedResult:
    """One seed of `workload` with `mutant` enabled (a worker's task)."""
    mutant, workload, seed, profile = args
    with _mutants.enabled(mutant):
        return run_seed(workload, seed, profile=profile).result


def _results(
    mutant: str,
    workload: str,
    seeds: Sequence[int],
    profile: str,
    pool: concurrent.futures.Executor | None,
    chunk: int,
) -> Iterator[SeedResult]:
    tasks = [(mutant, workload, s, profile) for s in seeds]
    if pool is None:
        for task in tasks:
            yield run_with_mutant(task)
        return
    for start in range(0, len(tasks), chunk):
        yield from pool.map(run_with_mutant, tasks[start : start + chunk])


def hunt(
    mutant: str,
    *,
    budget: int = BUDGET,
    profile: str = "lite",
    first_seed: int = 0,
    pool: concurrent.futures.Executor | None = None,
    chunk: int = 16,
    minimize: bool = True,
    max_replays: int = 100,
    progress: Callable[[str, int], None] | None = None,
) -> Hunt:
    """Search seeds for the first that catches `mutant` (see the module doc)."""
    description, workloads = _mutants.MUTANTS[mutant]
    per_workload = max(1, budget // len(workloads))
    run = 0
    for workload in workloads:
        seeds = range(first_seed, first_seed + per_workload)
        for result in _results(mutant, workload, seeds, profile, pool, chunk):
            run += 1
            if progress is not None:
                progress(mutant, run)
            if result.ok:
                continue
            found = Hunt(
                mutant,
                description,
                True,
                workload,
                result.seed,
                run,
                result.failure_class,
                result.violations[0] if result.violations else None,
                len(result.fired),
            )
            return _minimized(found, result, profile, max_replays) if minimize else found
    return Hunt(mutant, description, False, None, None, run)


def _minimized(found: Hunt, result: SeedResult, profile: str, max_replays: int) -> Hunt:
    assert found.workload is not None and found.seed is not None
    assert result.failure_class is not None
    workload, seed, wanted = found.workload, found.seed, result.failure_class

    def still_fails(faults: tuple[FaultIdentity, ...]) -> bool:
        with _mutants.enabled(found.mutant):
            replay = run_seed(workload, seed, profile=profile, faults=faults).result
        return wanted in replay.classes

    shrunk = ddmin(result.fired_identities(), still_fails, max_replays=max_replays)
    return attrs.evolve(
        found, minimized=tuple(fault_id(f) for f in shrunk.minimal), replays=shrunk.replays
    )


@attrs.frozen(slots=True)
class Summary:
    hunts: tuple[Hunt, ...]

    @property
    def killed(self) -> int:
        return sum(h.killed for h in self.hunts)

    @property
    def kill_rate(self) -> float:
        return self.killed / len(self.hunts) if self.hunts else 0.0

    @property
    def median_minimized(self) -> float | None:
        sizes = [len(h.minimized) for h in self.hunts if h.killed]
        return statistics.median(sizes) if sizes else None

    @property
    def median_seeds(self) -> float | None:
        seeds = [h.seeds_run for h in self.hunts if h.killed]
        return statistics.median(seeds) if seeds else None

    def to_json(self) -> dict[str, Any]:
        return {
            "mutants": len(self.hunts),
            "killed": self.killed,
            "kill_rate": self.kill_rate,
            "median_seeds": self.median_seeds,
            "median_minimized_faults": self.median_minimized,
            "hunts": [h.to_json() for h in self.hunts],
        }


#: name -> (the bug, the workloads that can expose it): the planted bugs `hunt` knows.
MUTANTS = _mutants.MUTANTS

__all__ = ["BUDGET", "MUTANTS", "Hunt", "Summary", "hunt", "run_with_mutant"]
