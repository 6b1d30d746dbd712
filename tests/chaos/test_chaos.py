"""Jepsen-style runs: our producer against a real broker through the fault proxy, each
run's history checked by the simulator's checker (see _harness.py).

Brokers: the mock broker, Tansu and Apache Kafka 4.4 (one node started with
`kafka_broker(port=, advertised=proxy)`, transactions v1). Quick tier (always): one seed
per workload and broker, 6 s of faults each (Kafka: idempotent and transactional only).
Long tier (`--chaos-long`): more seeds, longer fault phases, the standard sizes, every
workload on every broker. Every run prints
its report (faults injected, records, outcomes per kind, violations); a failing run's
assertion message holds the report and the command that replays its seed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import pytest
import trio

from tests.chaos._bulk import (
    CAS_CONFIGS,
    PARTITIONS,
    BulkReport,
    BulkSize,
    bulk_run,
    topic_for,
)
from tests.chaos._harness import (
    ChaosReport,
    Target,
    Workload,
    assert_clean,
    chaos_run,
    kafka_target,
    mock_target,
    tansu_target,
)
from tests.chaos._workloads import IDEMPOTENT_PARTITIONS, IDEMPOTENT_TOPIC, idempotent_keyed
from trio_kafka.broker import CAS_CONFIG
from trio_kafka.core import Rules
from trio_kafka.sim.workloads import cas as sim_cas
from trio_kafka.sim.workloads import transactional as sim_txn

#: Every workload but cas (Apache Kafka and Tansu have no CAS) runs on these in the long
#: tier; the quick tier runs cas-txn and bulk on Kafka only there (a Kafka node takes 3 s
#: to start, a quick bulk run on it 40-110 s here: over the quick tier's budget).
BROKERS = ["mock", pytest.param("tansu", marks=pytest.mark.tansu), "kafka"]
QUICK_BROKERS = ["mock", pytest.param("tansu", marks=pytest.mark.tansu)]
#: Kafka's transactions v2 (KIP-890), what a fresh 4.x cluster finalizes and users get:
#: no AddPartitionsToTxn, the epoch bumped by every EndTxn (v1 is shown by the
#: integration tier, tests/integration/test_transactions_real.py, and test_kafka.py).
KAFKA_TRANSACTION_VERSION = 2
QUICK = 6.0
LONG = 30.0
LONG_SEEDS = list(range(101, 111))

IDEM_TOPICS = {IDEMPOTENT_TOPIC: IDEMPOTENT_PARTITIONS}
TXN_TOPICS = {sim_txn.TOPIC: sim_txn.PARTITIONS}
CAS_TOPICS = {sim_cas.TOPIC: 1}
CAS_TXN_TOPICS = {sim_cas.TXN_TOPIC: 1}


def _target(
    broker: str,
    seed: int,
    topics: Mapping[str, int],
    configs: Mapping[str, Mapping[str, str]] | None = None,
) -> contextlib.AbstractAsyncContextManager[Target]:
    """`broker` ("mock", "tansu" or "kafka") behind a fault proxy; `configs` (topic
    configs) on the mock broker only."""
    if broker == "mock":
        return mock_target(seed, topics, configs)
    if broker == "tansu":
        return tansu_target(seed, topics)
    return kafka_target(seed, topics, transaction_version=KAFKA_TRANSACTION_VERSION)


async def _idempotent(broker: str, seed: int, duration: float, records: int) -> ChaosReport:
    async with _target(broker, seed, IDEM_TOPICS) as t:
        return await chaos_run(
            t,
            idempotent_keyed(records),
            name="idempotent",
            seed=seed,
            duration=duration,
            topics=IDEM_TOPICS,
        )


async def _simulated(
    workload: Workload,
    name: str,
    broker: str,
    topics: Mapping[str, int],
    seed: int,
    duration: float,
    profile: str,
    configs: Mapping[str, Mapping[str, str]] | None = None,
) -> ChaosReport:
    """One of the simulator's own workloads, unchanged, against `broker`."""
    async with _target(broker, seed, topics, configs) as t:
        return await chaos_run(
            t, workload, name=name, seed=seed, duration=duration, topics=topics, profile=profile
        )


async def _transactional(broker: str, seed: int, duration: float, profile: str) -> ChaosReport:
    return await _simulated(
        sim_txn.transactional, "transactional", broker, TXN_TOPICS, seed, duration, profile
    )


async def _cas(seed: int, duration: float, profile: str) -> ChaosReport:
    configs = {sim_cas.TOPIC: {CAS_CONFIG: "true"}}
    return await _simulated(
        sim_cas.cas, "cas", "mock", CAS_TOPICS, seed, duration, profile, configs
    )


async def _cas_txn(broker: str, seed: int, duration: float, profile: str) -> ChaosReport:
    """The commit-log race on a topic without CAS: transactional conditional writers
    taking over one partition from each other (`guarantee="auto"`), as on any Kafka."""
    return await _simulated(
        sim_cas.cas_txn, "cas-txn", broker, CAS_TXN_TOPICS, seed, duration, profile
    )


#: Rows of the bulk load: a load about as long as the fault phase (40,000 rows take 5-15
#: s through the faults here), in batches of 400 bytes (about 20 rows). The long tier's
#: 60,000 rows go in batches of 2,000 bytes: on Tansu each chunk (two batches) is a
#: transaction, and in batches of 600 bytes (1,500 transactions) four of ten seeds
#: outlasted pytest's 300 s timeout here. Such a load takes about 10 s: a run crashes
#: within 8 s of its start (within the 30 s fault phase, only one run of ten seeds did).
BULK_QUICK = BulkSize(rows=40_000, batch_bytes=400)
BULK_LONG = BulkSize(rows=60_000, batch_bytes=2_000, run_time=8.0)
#: Seed 1 draws no crash of the loader; seed 2 crashes three runs in the fault phase.
BULK_QUICK_SEED = 2


async def _bulk(
    broker: str,
    seed: int,
    duration: float,
    size: BulkSize,
    name: str = "bulk",
    rules: Rules | None = None,
) -> BulkReport:
    topics = {topic_for(broker): PARTITIONS}
    async with _target(broker, seed, topics, CAS_CONFIGS) as t:
        return await bulk_run(t, name=name, seed=seed, duration=duration, size=size, rules=rules)


def assert_bulk_clean(report: BulkReport) -> None:
    # A report shaped like KNOWN_TANSU_RESUME (a resume from an aborted chunk's
    # checkpoint) was Tansu's xfail before the loader judged the markers itself; it is
    # a failure now.
    assert_clean(report.chaos, rendered=report.render())
    assert not report.confluent.violations, report.render()
    assert report.confluent.rows_read == report.chaos.result.counters.get("op.produce.ok")


# -- quick tier --------------------------------------------------------------------------


@pytest.mark.parametrize("chaos_seed", [1], indirect=True)
def test_idempotent_mock(chaos_seed: int) -> None:
    assert_clean(trio.run(_idempotent, "mock", chaos_seed, QUICK, 60))


@pytest.mark.tansu
@pytest.mark.parametrize("chaos_seed", [1], indirect=True)
def test_idempotent_tansu(chaos_seed: int) -> None:
    assert_clean(trio.run(_idempotent, "tansu", chaos_seed, QUICK, 60))


@pytest.mark.parametrize("chaos_seed", [1], indirect=True)
def test_idempotent_kafka(chaos_seed: int) -> None:
    assert_clean(trio.run(_idempotent, "kafka", chaos_seed, QUICK, 60))


@pytest.mark.parametrize("chaos_seed", [1], indirect=True)
def test_transactional_mock(chaos_seed: int) -> None:
    assert_clean(trio.run(_transactional, "mock", chaos_seed, QUICK, "lite"))


@pytest.mark.tansu
@pytest.mark.parametrize("chaos_seed", [1], indirect=True)
def test_transactional_tansu(chaos_seed: int) -> None:
    assert_clean(trio.run(_transactional, "tansu", chaos_seed, QUICK, "lite"))


@pytest.mark.parametrize("chaos_seed", [1], indirect=True)
def test_transactional_kafka(chaos_seed: int) -> None:
    assert_clean(trio.run(_transactional, "kafka", chaos_seed, QUICK, "lite"))


@pytest.mark.parametrize("chaos_seed", [1], indirect=True)
def test_cas_mock(chaos_seed: int) -> None:
    assert_clean(trio.run(_cas, chaos_seed, QUICK, "lite"))


@pytest.mark.parametrize("broker", QUICK_BROKERS)
@pytest.mark.parametrize("chaos_seed", [1], indirect=True)
def test_cas_txn(broker: str, chaos_seed: int) -> None:
    assert_clean(trio.run(_cas_txn, broker, chaos_seed, QUICK, "lite"))


@pytest.mark.parametrize("broker", QUICK_BROKERS)
@pytest.mark.parametrize("chaos_seed", [BULK_QUICK_SEED], indirect=True)
def test_bulk(broker: str, chaos_seed: int) -> None:
    assert_bulk_clean(trio.run(_bulk, broker, chaos_seed, QUICK, BULK_QUICK))


# -- long tier ---------------------------------------------------------------------------


@pytest.mark.chaos_long
@pytest.mark.parametrize("broker", BROKERS)
@pytest.mark.parametrize("chaos_seed", LONG_SEEDS, indirect=True)
def test_idempotent_long(broker: str, chaos_seed: int) -> None:
    assert_clean(trio.run(_idempotent, broker, chaos_seed, LONG, 300))


@pytest.mark.chaos_long
@pytest.mark.parametrize("broker", BROKERS)
@pytest.mark.parametrize("chaos_seed", LONG_SEEDS, indirect=True)
def test_transactional_long(broker: str, chaos_seed: int) -> None:
    assert_clean(trio.run(_transactional, broker, chaos_seed, LONG, "standard"))


@pytest.mark.chaos_long
@pytest.mark.parametrize("chaos_seed", LONG_SEEDS, indirect=True)
def test_cas_long(chaos_seed: int) -> None:
    assert_clean(trio.run(_cas, chaos_seed, LONG, "standard"))


@pytest.mark.chaos_long
@pytest.mark.parametrize("broker", BROKERS)
@pytest.mark.parametrize("chaos_seed", LONG_SEEDS, indirect=True)
def test_cas_txn_long(broker: str, chaos_seed: int) -> None:
    assert_clean(trio.run(_cas_txn, broker, chaos_seed, LONG, "standard"))


@pytest.mark.chaos_long
@pytest.mark.timeout(900)
@pytest.mark.parametrize("broker", BROKERS)
@pytest.mark.parametrize("chaos_seed", LONG_SEEDS, indirect=True)
def test_bulk_long(broker: str, chaos_seed: int) -> None:
    assert_bulk_clean(trio.run(_bulk, broker, chaos_seed, LONG, BULK_LONG))
