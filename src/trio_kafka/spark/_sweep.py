"""Simulation sweeps on Spark: seeds spread over Spark tasks, one report gathered.

Each seed is a pure function of its number (and the code), so where it runs does not
matter: `run_seeds_on_spark` parallelizes the seed list into `slices` Spark partitions,
maps `fn` over each, and collects the results back in seed order. The report is then
the same as a local run's, whatever the cluster's task order, retries or speculation
(a retried task simply computes the same results again).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

_T = TypeVar("_T")


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


def simulate_on_spark(
    workload: str,
    seeds: Iterable[int],
    profile: str = "lite",
    *,
    spark: Any = None,
    master: str | None = None,
) -> list[Any]:
    """Run simulator seeds on Spark: the `SeedResult`s in seed order, as `run_many`
    gives locally. Uses `spark`, else the active session, else starts one on `master`
    (default `local[*]`) and stops it afterwards."""
    if spark is not None:
        return run_seeds_on_spark(spark, seeds, simulate_seed(workload, profile))
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        return run_seeds_on_spark(active, seeds, simulate_seed(workload, profile))
    session = spark_session(master or "local[*]", "trio-kafka simulate")
    try:
        return run_seeds_on_spark(session, seeds, simulate_seed(workload, profile))
    finally:
        session.stop()


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


__all__ = ["run_seeds_on_spark", "simulate_on_spark", "simulate_seed", "spark_session"]
