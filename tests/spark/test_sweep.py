"""Simulation sweeps on Spark give the same report as a local run."""

from __future__ import annotations

import hashlib
from typing import Any

from trio_kafka.sim.runner import run_seed
from trio_kafka.spark import run_seeds_on_spark, simulate_on_spark

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
