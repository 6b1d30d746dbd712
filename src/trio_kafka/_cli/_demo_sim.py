"""Demo step 4: seeds of the simulator over the idempotent, transactional and CAS
workloads, in `jobs` worker processes, and the summary table.

Each seed is the real client against three simulated brokers over a simulated network
that injects this seed's mix of the 14 fault kinds, then a heal, final reads and the
checker (docs/simulator.md). Runs after the broker and the trio loop are gone: the
workers are forked from a process with no threads and no event loop.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from trio_kafka._cli._demo_ui import Bar, Check

#: The workloads the demo runs, in order, and what each checks.
WANTED = {
    "idempotent": "idempotent producer: no loss, no duplicate, order per partition",
    "transactional": "transactions: atomic, aborted invisible, no hanging transaction",
    "cas": "CAS writers: at most one applied attempt per offset",
}


def _one(task: tuple[str, int]) -> Any:
    import logging

    from trio_kafka.sim.runner import run_seed

    # The client's own log lines (a fenced producer's warning is what a fencing fault
    # is for) would land in the middle of the progress display; the checker reports.
    quiet = logging.getLogger("trio_kafka")
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False

    workload, seed = task
    return run_seed(workload, seed, profile="lite").result


def _results(
    pool: concurrent.futures.Executor | None, workload: str, seeds: Sequence[int]
) -> Iterator[Any]:
    tasks = [(workload, s) for s in seeds]
    if pool is None:
        yield from map(_one, tasks)
    else:
        yield from pool.map(_one, tasks, chunksize=max(1, min(8, len(tasks) // 8)))


def simulate_step(console: Console, seeds: int, jobs: int) -> list[Check]:
    from trio_kafka.sim.workloads import WORKLOADS

    available = [w for w in WANTED if w in WORKLOADS]
    missing = [w for w in WANTED if w not in WORKLOADS]
    checks: list[Check] = []
    per = max(1, seeds // max(1, len(available)))
    console.print(
        f"{per} seeds per workload ({', '.join(available)}), profile lite, {jobs} worker "
        "process(es); each seed: 3 simulated brokers, its own mix of 14 fault kinds, heal, "
        "final reads, the checker",
        highlight=False,
    )
    rows: list[tuple[str, int, int, dict[str, int], int, int, float, float]] = []
    kinds_seen: dict[str, int] = {}
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=jobs) if jobs > 1 else None
    try:
        for workload in available:
            failed: list[Any] = []
            ops: dict[str, int] = {}
            fired = 0
            virtual = 0.0
            kinds: set[str] = set()
            started = time.perf_counter()
            with Bar(console, f"simulate {workload}", per, unit="seeds") as bar:
                for result in _results(pool, workload, range(per)):
                    if not result.ok:
                        failed.append(result)
                    for status, count in result.ops.items():
                        ops[status] = ops.get(status, 0) + count
                    for kind, count in result.faults.items():
                        fired += count
                        if count:
                            kinds.add(kind)
                            kinds_seen[kind] = kinds_seen.get(kind, 0) + 1
                    virtual += result.virtual_time
                    bar.add(1, failed=not result.ok)
            wall = time.perf_counter() - started
            rows.append((workload, per, len(failed), ops, fired, len(kinds), virtual, wall))
            for result in failed[:3]:
                console.print(
                    f"[red]{workload} seed {result.seed} failed[/]: {result.failure_class}; "
                    f"replay: trio-kafka simulate -w {workload} --seed {result.seed}",
                    highlight=False,
                )
            checks.append(
                Check(
                    f"simulator: {WANTED[workload]}",
                    f"{per} seeds of the {workload} workload under injected faults",
                    f"{per - len(failed)}/{per} seeds pass, {fired:,} faults fired "
                    f"({len(kinds)} kinds), {virtual:,.0f} s virtual in {wall:.0f} s",
                    not failed,
                )
            )
    finally:
        if pool is not None:
            # Interrupted (a signal): the seeds not started are dropped, not waited for.
            pool.shutdown(cancel_futures=True)
    table = Table(title="simulator summary (profile lite)")
    for column in (
        "workload",
        "seeds",
        "failed",
        "ops ok/fail/ambiguous",
        "faults fired",
        "kinds",
        "virtual time",
        "wall",
    ):
        table.add_column(column, justify="left" if column == "workload" else "right")
    for workload, n, bad, ops, fired, kinds_count, virtual, wall in rows:
        table.add_row(
            workload,
            str(n),
            str(bad),
            f"{ops.get('ok', 0)}/{ops.get('fail', 0)}/{ops.get('info', 0)}",
            f"{fired:,}",
            str(kinds_count),
            f"{virtual:,.0f} s",
            f"{wall:.1f} s",
        )
    console.print(table)
    if kinds_seen:
        console.print(
            "fault kinds fired (seeds): "
            + ", ".join(f"{k} {v}" for k, v in sorted(kinds_seen.items(), key=lambda kv: -kv[1])),
            highlight=False,
        )
    for workload in missing:
        console.print(f"[yellow]the {workload} workload is not available in this build yet[/]")
        checks.append(
            Check(f"simulator: {WANTED[workload]}", "not yet available in this build", "-", None)
        )
    return checks


__all__ = ["WANTED", "simulate_step"]
