"""Simulation sweeps on Spark: seeds spread over Spark tasks, one report gathered.

Each seed is a pure function of its number (and the code), so where it runs does not
matter: `run_seeds_on_spark` parallelizes the seed list into `slices` Spark partitions,
maps `fn` over each, and collects the results back in seed order. The report is then
the same as a local run's, whatever the cluster's task order, retries or speculation
(a retried task simply computes the same results again).

A sweep of millions of seeds is not one job: collected at once, its results (about 1 KB
a passing seed, pickled in the driver's JVM and again as Python objects) would outgrow
a driver's memory (Spark's default `spark.driver.memory` is 1g). `sweep_on_spark` (and
`iter_seeds_on_spark` for any function) runs the seeds a job of `SEEDS_PER_JOB` at a
time, each job spread over the cluster, and yields each job's results in seed order
before the next starts: the driver holds one job's results, and `trio-kafka simulate
--spark` folds them into its report's counts as they come.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

_T = TypeVar("_T")

#: Seeds per Spark job in a sweep (`iter_seeds_on_spark`): enough to keep a cluster's
#: executors busy (a lite seed takes tens of milliseconds, a standard one about a
#: second), few enough that one job's results are megabytes on the driver.
SEEDS_PER_JOB = 20_000


def run_seeds_on_spark(
    spark: Any,
    seeds: Iterable[int],
    fn: Callable[[int], _T],
    *,
    slices: int | None = None,
) -> list[_T]:
    """`[fn(seed) for seed in seeds]`, computed by Spark tasks (in seed order).

    `fn` must be picklable by cloudpickle (a module-level function or a closure over
    picklable values) and its results picklable."""
    seed_list = list(seeds)
    if not seed_list:
        return []
    context = spark.sparkContext
    count = slices or max(1, min(len(seed_list), context.defaultParallelism * 4))

    def run_slice(part: Iterator[tuple[int, int]]) -> Iterator[tuple[int, _T]]:
        for index, seed in part:
            yield index, fn(seed)

    indexed = list(enumerate(seed_list))
    results = context.parallelize(indexed, count).mapPartitions(run_slice).collect()
    results.sort(key=lambda item: item[0])
    return [result for _, result in results]


def simulate_seed(workload: str, profile: str) -> Callable[[int], Any]:
    """The simulator's per-seed function: `seed -> SeedResult` (picklable; kept as a
    sweep keeps it, `SeedResult.for_sweep`)."""

    def run(seed: int) -> Any:
        from trio_kafka.sim.runner import run_seed

        return run_seed(workload, seed, profile=profile).result.for_sweep()

    return run


def iter_seeds_on_spark(
    spark: Any,
    seeds: Iterable[int],
    fn: Callable[[int], _T],
    *,
    per_job: int = SEEDS_PER_JOB,
) -> Iterator[_T]:
    """`fn(seed) for seed in seeds`, computed by Spark tasks and yielded in seed order,
    `per_job` seeds a Spark job (the next job starts when the previous one's results
    have been taken; module doc)."""
    if per_job < 1:
        raise ValueError(f"per_job must be at least 1, got {per_job}")
    pending = iter(seeds)
    while job := list(itertools.islice(pending, per_job)):
        yield from run_seeds_on_spark(spark, job, fn)


def sweep_on_spark(
    workload: str,
    seeds: Iterable[int],
    profile: str = "lite",
    *,
    spark: Any = None,
    master: str | None = None,
    per_job: int = SEEDS_PER_JOB,
) -> Iterator[Any]:
    """Simulator seeds on Spark, their `SeedResult`s yielded in seed order, a job of
    `per_job` seeds at a time (module doc). Uses `spark`, else the active session, else
    starts one on `master` (default `local[*]`) and stops it when the sweep ends (or
    the generator is closed)."""
    run = simulate_seed(workload, profile)
    if spark is None:
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        spark = active if active is not None and master is None else None
    if spark is not None:
        yield from iter_seeds_on_spark(spark, seeds, run, per_job=per_job)
        return
    session = spark_session(master or "local[*]", "trio-kafka simulate")
    try:
        yield from iter_seeds_on_spark(session, seeds, run, per_job=per_job)
    finally:
        session.stop()


def simulate_on_spark(
    workload: str,
    seeds: Iterable[int],
    profile: str = "lite",
    *,
    spark: Any = None,
    master: str | None = None,
) -> list[Any]:
    """Run simulator seeds on Spark: the `SeedResult`s in seed order, as `run_many`
    gives locally (`sweep_on_spark`, gathered in a list: for a sweep too big to hold,
    take `sweep_on_spark`'s results as they come). Uses `spark`, else the active
    session, else starts one on `master` (default `local[*]`) and stops it afterwards."""
    return list(sweep_on_spark(workload, seeds, profile, spark=spark, master=master))


def spark_session(master: str, name: str = "trio-kafka", **conf: str) -> Any:
    """A quiet Spark session whose Python workers run this interpreter."""
    import os
    import sys

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.showConsoleProgress", "false")
    )
    for key, setting in conf.items():
        builder = builder.config(key, setting)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


__all__ = [
    "SEEDS_PER_JOB",
    "iter_seeds_on_spark",
    "run_seeds_on_spark",
    "simulate_on_spark",
    "simulate_seed",
    "spark_session",
    "sweep_on_spark",
]
