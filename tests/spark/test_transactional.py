"""The transactional mode (brokers without the CAS extension), on Apache Kafka 4.4 and
Tansu."""

from __future__ import annotations

import collections
from typing import Any

import pytest
import trio

from tests.spark.conftest import create_topic, read_topic
from trio_kafka.broker import ThreadedCluster
from trio_kafka.net import open_selector
from trio_kafka.spark import TRANSACTIONAL, read_manifest, write_dataframe
from trio_kafka.testing import kafka_broker, tansu_broker

PARTITIONS = 4


def _frame(spark: Any, rows: int) -> Any:
    return spark.range(rows).selectExpr("concat('k', id) AS key", "concat('v', id) AS value")


def _values(log: dict[int, list[Any]]) -> collections.Counter[bytes]:
    return collections.Counter(r.value for records in log.values() for r in records)


def test_transactional_load_with_task_failures_is_exact_for_read_committed(
    spark: Any, broker: ThreadedCluster
) -> None:
    topic = "txn-orders"
    create_topic(broker, topic, PARTITIONS, cas=False)
    rows = 4000
    write_dataframe(
        _frame(spark, rows),
        topic=topic,
        key="key",
        load_id="txn-1",
        bootstrap=broker.bootstrap,
        guarantee=TRANSACTIONAL,
        batch_bytes=4096,
        max_attempts=4,
        fail="partition=1,attempt=0,after=500;partition=3,attempt=0,after=250",
    )
    committed = read_topic(broker.bootstrap, topic, PARTITIONS, isolation="read_committed")
    values = _values(committed)
    assert set(values) == {f"v{i}".encode() for i in range(rows)}
    assert max(values.values()) == 1

    # Partitions 1 and 3 were committed from their retries (what the failed first
    # attempts had sent was aborted when they were fenced).
    async def manifest() -> Any:
        async with open_selector(broker.bootstrap) as selector:
            return await read_manifest(selector, "txn-1")

    reports = {r["partition"]: r for r in trio.run(manifest).reports}
    assert {p for p, r in reports.items() if r["attempt"] >= 1} == {1, 3}
    assert all(
        r["transaction"]["transactional_id"].endswith(f"-{p}-{r['attempt']}")
        for p, r in reports.items()
    )


@pytest.mark.tansu
def test_transactional_load_completes_on_tansu(spark: Any) -> None:
    with tansu_broker() as tansu:
        import trio

        from trio_kafka.client import create_topic as create
        from trio_kafka.net import open_selector

        async def make() -> None:
            async with open_selector(tansu.bootstrap) as selector:
                await create(selector, "tansu-load", 2, cas=False)

        trio.run(make)
        write_dataframe(
            _frame(spark, 1000),
            topic="tansu-load",
            key="key",
            load_id="tansu-1",
            bootstrap=tansu.bootstrap,
            max_attempts=2,
        )

        async def manifest() -> Any:
            async with open_selector(tansu.bootstrap) as selector:
                return await read_manifest(selector, "tansu-1")

        assert trio.run(manifest).guarantee == TRANSACTIONAL  # what auto picks on Tansu
        values = _values(read_topic(tansu.bootstrap, "tansu-load", 2))
        assert set(values) == {f"v{i}".encode() for i in range(1000)}
        assert max(values.values()) == 1

        with pytest.raises(Exception, match=r"expected\.offset"):
            write_dataframe(
                _frame(spark, 10),
                topic="tansu-load",
                key="key",
                load_id="tansu-cas",
                bootstrap=tansu.bootstrap,
                guarantee="exactly_once_cas",
            )


@pytest.mark.kafka
def test_transactional_load_with_a_task_failure_is_exact_on_kafka(spark: Any) -> None:
    """On Apache Kafka 4.4 (transactions v2): a task fails mid-partition and its retry
    commits; read_committed sees every row once (the failed attempt's rows aborted when
    its retry fenced it)."""
    with kafka_broker() as kafka:
        from trio_kafka.client import create_topic as create

        async def make() -> None:
            async with open_selector(kafka.bootstrap) as selector:
                await create(selector, "kafka-load", 2, cas=False, replication_factor=1)

        trio.run(make)
        write_dataframe(
            _frame(spark, 2000),
            topic="kafka-load",
            key="key",
            load_id="kafka-1",
            bootstrap=kafka.bootstrap,
            batch_bytes=4096,
            max_attempts=3,
            fail="partition=1,attempt=0,after=300",
        )

        async def manifest() -> Any:
            async with open_selector(kafka.bootstrap) as selector:
                return await read_manifest(selector, "kafka-1")

        assert trio.run(manifest).guarantee == TRANSACTIONAL  # what auto picks on Kafka
        committed = read_topic(kafka.bootstrap, "kafka-load", 2, isolation="read_committed")
        values = _values(committed)
        assert set(values) == {f"v{i}".encode() for i in range(2000)}
        assert max(values.values()) == 1
