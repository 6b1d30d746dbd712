"""Determinism of whole simulated runs (D1, D2): the same seed gives a byte-identical
trace (history, faults, network, logs, reads, check) twice in one process and in another
process with another PYTHONHASHSEED."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from typing import Any

import pytest

from tests.conftest import REPO
from trio_kafka.errors import ErrorCode
from trio_kafka.records import BatchBuilder, decode_batches
from trio_kafka.sim import runner
from trio_kafka.sim.runner import run_seed

SEEDS = range(200)
_SCRIPT = """
import hashlib, sys
from trio_kafka.sim.runner import run_seed
for seed in range({start}, {stop}):
    trace = run_seed("idempotent", seed, profile="lite", trace=True).trace
    print(seed, hashlib.blake2b(trace.encode(), digest_size=16).hexdigest())
"""


def _digests(seeds: range) -> list[str]:
    out = []
    for seed in seeds:
        trace = run_seed("idempotent", seed, profile="lite", trace=True).trace
        out.append(f"{seed} {hashlib.blake2b(trace.encode(), digest_size=16).hexdigest()}")
    return out


def _digests_in_subprocess(seeds: range, hash_seed: str) -> list[str]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT.format(start=seeds.start, stop=seeds.stop)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return done.stdout.splitlines()


def test_one_seed_traced_twice_is_byte_identical() -> None:
    first = run_seed("idempotent", 7, profile="lite", trace=True)
    second = run_seed("idempotent", 7, profile="lite", trace=True)
    assert first.trace == second.trace
    assert "# network" in first.trace and "# faults" in first.trace
    assert first.result.trace_digest == second.result.trace_digest


def test_tracing_does_not_change_the_run() -> None:
    traced = run_seed("idempotent", 3, profile="lite", trace=True).result
    untraced = run_seed("idempotent", 3, profile="lite").result
    assert traced.trace_digest == untraced.trace_digest


def test_200_seeds_twice_in_process_and_once_under_another_hash_seed() -> None:
    here = _digests(SEEDS)
    assert _digests(SEEDS) == here
    # Half the seeds in each of two processes with different PYTHONHASHSEEDs.
    middle = SEEDS.start + len(SEEDS) // 2
    other = _digests_in_subprocess(range(SEEDS.start, middle), "1") + _digests_in_subprocess(
        range(middle, SEEDS.stop), "12345"
    )
    assert other == here
    assert len({line.split()[1] for line in here}) == len(here)


_BUILT_IN = ["idempotent", "transactional", "cas", "bulk", "bulk-txn", "cas-txn"]


def _run_keeping_cluster(monkeypatch: pytest.MonkeyPatch, workload: str, seed: int) -> Any:
    """`run_seed` (lite), which must pass; returns its outcome and its simulated cluster."""
    clusters: list[Any] = []
    finish = runner.finish

    def keep_cluster(*args: Any) -> Any:
        clusters.append(args[4].cluster)
        return finish(*args)

    monkeypatch.setattr(runner, "finish", keep_cluster)
    out = run_seed(workload, seed, profile="lite")
    assert out.result.ok, out.result.violations
    (cluster,) = clusters
    return out, cluster


@pytest.mark.parametrize("workload", _BUILT_IN)
def test_record_timestamps_come_from_the_virtual_wall_clock(
    workload: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The trace leaves timestamps out, so D1 and D2 cannot see a producer that reads the
    # real clock: every record of a seed must be stamped between the run's virtual start
    # and end (`runner.EPOCH` plus trio's virtual seconds).
    out, cluster = _run_keeping_cluster(monkeypatch, workload, 12_000_001)
    stamps = [
        record.timestamp
        for topic in cluster.state.topics.values()
        for partition in topic.partitions
        for stored in partition.log.batches
        for batch in decode_batches(stored.data)
        if not batch.is_control
        for record in batch.records
    ]
    assert stamps
    low, high = runner.EPOCH * 1000, (runner.EPOCH + out.result.virtual_time) * 1000
    outside = [t for t in stamps if not low <= t <= high]
    assert not outside, f"{len(outside)} of {len(stamps)} records stamped outside [{low}, {high}]"


def test_the_simulated_brokers_take_records_stamped_with_the_real_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Their clock is the run's virtual one (2023-11-14 plus its seconds), years behind
    # the real one. At Kafka 4's default (message.timestamp.after.max.ms, an hour) a user
    # workload that stamps records with time.time() would be refused in the simulator
    # and not on a cluster.
    _, cluster = _run_keeping_cluster(monkeypatch, "idempotent", 12_000_001)
    topic = next(iter(cluster.state.topics.values()))
    builder = BatchBuilder()
    builder.append(int(time.time() * 1000) + 86_400_000, None, b"stamped by the real clock")
    answer = topic.partitions[0].produce(
        builder.build(base_offset=0), topic.config, int(runner.EPOCH * 1000)
    )
    assert answer.error is ErrorCode.NONE, answer.message
