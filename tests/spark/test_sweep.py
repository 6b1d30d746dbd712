"""Simulation sweeps on Spark give the same report as a local run."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from trio_kafka.sim.runner import run_seed
from trio_kafka.spark import (
    iter_seeds_on_spark,
    run_seeds_on_spark,
    simulate_on_spark,
    sweep_on_spark,
)

SEEDS = range(400)


def _comparable(result: Any) -> dict[str, Any]:
    report: dict[str, Any] = result.to_json()
    del report["wall_time"]  # the one field that depends on the machine
    return report


def _digest(seed: int) -> str:
    return hashlib.sha256(b"seed %d" % seed).hexdigest()


def test_seeds_come_back_in_seed_order(spark: Any) -> None:
    seeds = [7, 3, 99, 0, 42, 5]
    assert run_seeds_on_spark(spark, seeds, _digest, slices=3) == [_digest(s) for s in seeds]


def test_sweep_of_400_seeds_on_spark_equals_the_local_run(spark: Any) -> None:
    on_spark = simulate_on_spark("idempotent", SEEDS, "lite", spark=spark)
    local = [run_seed("idempotent", seed, profile="lite").result for seed in SEEDS]
    assert [r.seed for r in on_spark] == list(SEEDS)
    differences = {
        a.seed: {
            k: (v, _comparable(b)[k]) for k, v in _comparable(a).items() if v != _comparable(b)[k]
        }
        for a, b in zip(on_spark, local)
        if _comparable(a) != _comparable(b)
    }
    assert not differences
    assert len({r.trace_digest for r in local}) == len(SEEDS)  # 400 distinct runs


def test_a_big_sweep_runs_a_job_at_a_time(spark: Any) -> None:
    """The driver holds one job's results, not the sweep's: the second job starts only
    when the first one's results have been taken."""
    context = spark.sparkContext
    context.setJobGroup("sweep-in-jobs", "a sweep of 250 seeds, 100 a job")
    try:
        results = iter_seeds_on_spark(spark, range(250), _digest, per_job=100)
        first = next(results)
        assert len(context.statusTracker().getJobIdsForGroup("sweep-in-jobs")) == 1
        rest = list(results)
        assert len(context.statusTracker().getJobIdsForGroup("sweep-in-jobs")) == 3
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]  # (no group)
    assert [first, *rest] == [_digest(s) for s in range(250)]
    with pytest.raises(ValueError, match="per_job must be at least 1, got 0"):
        next(iter_seeds_on_spark(spark, range(3), _digest, per_job=0))


def test_sweep_on_spark_yields_what_simulate_on_spark_returns(spark: Any) -> None:
    swept = list(sweep_on_spark("cas", range(30, 36), "lite", spark=spark, per_job=4))
    listed = simulate_on_spark("cas", range(30, 36), "lite", spark=spark)
    assert [_comparable(r) for r in swept] == [_comparable(r) for r in listed]
    assert [r.seed for r in swept] == list(range(30, 36))
