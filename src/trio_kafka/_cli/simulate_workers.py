"""How `trio-kafka simulate` runs its seeds: in this process, in `--jobs` worker
processes, or as Spark tasks (`--spark [--master URL]`, the spark extra), with a progress
display. Each seed is independent and a pure function of its number, so the order in
which workers finish does not matter: results come back in seed order."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import click

from trio_kafka._cli.simulate_options import import_workloads, quiet_client_logs
from trio_kafka.sim.runner import SeedResult, run_seed


def _init_worker(imports: Sequence[str]) -> None:
    quiet_client_logs()
    import_workloads(imports)


def _run_one(args: tuple[str, int, str]) -> SeedResult:
    workload, seed, profile = args
    return run_seed(workload, seed, profile=profile).result


def run_many(
    workload: str,
    seeds: Sequence[int],
    profile: str,
    jobs: int,
    imports: Sequence[str] = (),
) -> Iterator[SeedResult]:
    """Results in seed order (workers may finish out of order; `map` keeps the order)."""
    tasks = [(workload, s, profile) for s in seeds]
    if jobs <= 1:
        for task in tasks:
            yield _run_one(task)
        return
    with concurrent.futures.ProcessPoolExecutor(
        max_workers=jobs, initializer=_init_worker, initargs=(tuple(imports),)
    ) as pool:
        yield from pool.map(_run_one, tasks, chunksize=max(1, min(16, len(tasks) // (4 * jobs))))


def run_for(
    workload: str,
    first_seed: int,
    profile: str,
    jobs: int,
    seconds: float,
    *,
    max_seeds: int | None = None,
    imports: Sequence[str] = (),
) -> Iterator[SeedResult]:
    """Seeds first_seed, first_seed + 1... until `seconds` of wall time are spent (the
    seeds started by then finish), in seed order; at most `max_seeds`."""
    deadline = time.monotonic() + seconds
    chunk = 8 * max(1, jobs)
    next_seed = first_seed
    limit = None if max_seeds is None else first_seed + max_seeds
    pool = (
        concurrent.futures.ProcessPoolExecutor(
            max_workers=jobs, initializer=_init_worker, initargs=(tuple(imports),)
        )
        if jobs > 1
        else None
    )
    try:
        while time.monotonic() < deadline and (limit is None or next_seed < limit):
            stop = next_seed + chunk if limit is None else min(next_seed + chunk, limit)
            tasks = [(workload, s, profile) for s in range(next_seed, stop)]
            next_seed = stop
            if pool is None:
                for task in tasks:
                    yield _run_one(task)
                    if time.monotonic() >= deadline:
                        return
            else:
                yield from pool.map(_run_one, tasks)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)


def _collect_with_progress(
    console: Any,
    description: str,
    total: int | None,
    columns: Sequence[Any],
    runs: Iterable[SeedResult],
) -> tuple[list[SeedResult], float]:
    """Collect `runs` under a rich progress line (the description, `columns`, the
    elapsed time), counting failures as they come; returns them and the seconds spent."""
    from rich.progress import Progress, TextColumn, TimeElapsedColumn

    results: list[SeedResult] = []
    failed = 0
    started = time.perf_counter()
    with Progress(
        TextColumn("[bold]{task.description}"),
        *columns,
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        task = progress.add_task(description, total=total, failed=0)
        for result in runs:
            results.append(result)
            failed += not result.ok
            progress.update(task, advance=1, failed=failed)
    return results, time.perf_counter() - started


def run_for_budget(
    console: Any,
    workload: str,
    first_seed: int,
    profile: str,
    jobs: int,
    seconds: float,
    max_seeds: int | None,
    imports: tuple[str, ...],
) -> tuple[list[SeedResult], float]:
    from rich.progress import TextColumn

    return _collect_with_progress(
        console,
        f"{workload}/{profile} for {seconds:g} s ({jobs} jobs)",
        None,
        [TextColumn("{task.completed} seeds, {task.fields[failed]} failed")],
        run_for(workload, first_seed, profile, jobs, seconds, max_seeds=max_seeds, imports=imports),
    )


def run_with_progress(
    console: Any,
    workload: str,
    seeds: list[int],
    profile: str,
    jobs: int,
    imports: Sequence[str] = (),
) -> tuple[list[SeedResult], float]:
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn

    return _collect_with_progress(
        console,
        f"{workload}/{profile}",
        len(seeds),
        [BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[failed]} failed")],
        run_many(workload, seeds, profile, jobs, imports),
    )


def run_on_spark(
    console: Any, workload: str, seeds: list[int], profile: str, master: str | None
) -> tuple[list[SeedResult], float]:
    """The seeds as Spark tasks (`trio_kafka.spark.simulate_on_spark`), in seed order."""
    try:
        import pyspark  # noqa: F401  (only to say clearly what is missing)

        from trio_kafka import spark
    except ImportError as exc:
        raise click.UsageError(
            f"--spark needs PySpark, which is not installed ({exc}): "
            "pip install 'trio-kafka[spark]'"
        ) from exc
    where = master or "the active Spark session, else local[*]"
    console.print(f"{workload}/{profile}: {len(seeds)} seeds on Spark ({where})")
    started = time.perf_counter()
    results = list(spark.simulate_on_spark(workload, seeds, profile, master=master))
    return results, time.perf_counter() - started
