"""Exactly-once bulk loads of a DataFrame into the mock broker (CAS mode)."""

from __future__ import annotations

import collections
from typing import Any

import pytest
import trio

from tests.spark.conftest import create_topic, read_topic
from trio_kafka.broker import ThreadedCluster
from trio_kafka.errors import ConfigError
from trio_kafka.net import open_selector
from trio_kafka.spark import (
    CasPartitionWriter,
    Manifest,
    kafka_partition,
    load_row,
    read_manifest,
    write_dataframe,
)

ROWS = 12_000
PARTITIONS = 6


def _frame(spark: Any, rows: int) -> Any:
    return spark.range(rows).selectExpr("concat('k', id) AS key", "concat('v', id) AS value")


def _manifest(bootstrap: str, load_id: str) -> Manifest:
    async def read() -> Manifest | None:
        async with open_selector(bootstrap) as selector:
            return await read_manifest(selector, load_id)

    found = trio.run(read)
    assert found is not None
    return found


def _check_exact(bootstrap: str, topic: str, load_id: str, rows: int) -> dict[int, list[Any]]:
    """The topic holds exactly the rows, each once, in row order per partition."""
    log = read_topic(bootstrap, topic, PARTITIONS)
    seen: collections.Counter[tuple[bytes, bytes]] = collections.Counter()
    for partition, records in log.items():
        numbers = [load_row(r, load_id.encode()) for r in records]
        assert numbers == list(range(len(records))), f"partition {partition} out of order"
        for record in records:
            assert record.key is not None and record.value is not None
            assert kafka_partition(record.key, record.value, PARTITIONS) == partition
            seen[(record.key, record.value)] += 1
    expected = {(f"k{i}".encode(), f"v{i}".encode()) for i in range(rows)}
    assert set(seen) == expected
    assert max(seen.values()) == 1, "a row was written twice"
    return log


def test_load_with_task_failures_is_exact(spark: Any, broker: ThreadedCluster) -> None:
    topic, load_id = "orders", "orders-2025-11-22"
    create_topic(broker, topic, PARTITIONS, cas=True)
    write_dataframe(
        _frame(spark, ROWS),
        topic=topic,
        key="key",
        value="value",
        load_id=load_id,
        bootstrap=broker.bootstrap,
        batch_records=500,
        # Partition 1: raise after 1000 acknowledged rows; partition 4: the Python worker
        # dies with a batch in flight.
        fail="partition=1,attempt=0,after=1000,how=raise;partition=4,attempt=0,after=1000,how=exit",
    )
    _check_exact(broker.bootstrap, topic, load_id, ROWS)
    manifest = _manifest(broker.bootstrap, load_id)
    assert manifest.state == "complete"
    assert sum(manifest.counts.values()) == ROWS
    retried = {r["partition"]: r for r in manifest.reports if r["attempt"] >= 1}
    assert set(retried) == {1, 4}
    assert retried[1]["skipped"] == 1000
    assert retried[4]["skipped"] >= 1000  # the batch in flight may have landed
    for report in retried.values():
        assert report["skipped"] + report["written"] == report["count"]


def test_failed_job_then_rerun_with_same_load_id(spark: Any, broker: ThreadedCluster) -> None:
    topic, load_id = "rerun", "rerun-1"
    create_topic(broker, topic, PARTITIONS, cas=True)
    frame = _frame(spark, 3000)
    # Every attempt of partition 2's task fails (the first after 200 rows, the retries at
    # once): the job fails for good.
    always = "partition=2,attempt=0,after=200" + "".join(
        f";partition=2,attempt={a},after=0" for a in range(1, 4)
    )
    with pytest.raises(Exception, match="injected failure"):
        write_dataframe(
            frame,
            topic=topic,
            key="key",
            load_id=load_id,
            bootstrap=broker.bootstrap,
            batch_records=100,
            fail=always,
        )
    assert _manifest(broker.bootstrap, load_id).state == "aborted"
    partial = sum(len(r) for r in read_topic(broker.bootstrap, topic, PARTITIONS).values())
    assert 200 <= partial < 3000
    write_dataframe(frame, topic=topic, key="key", load_id=load_id, bootstrap=broker.bootstrap)
    _check_exact(broker.bootstrap, topic, load_id, 3000)
    assert _manifest(broker.bootstrap, load_id).state == "complete"
    # A third run finds the load complete and writes nothing.
    write_dataframe(frame, topic=topic, key="key", load_id=load_id, bootstrap=broker.bootstrap)
    _check_exact(broker.bootstrap, topic, load_id, 3000)


def test_overwrite_is_refused(spark: Any, broker: ThreadedCluster) -> None:
    create_topic(broker, "overwrite", 1, cas=True)
    frame = spark.createDataFrame(
        [(0, 0, b"k", b"v")], "partition int, row long, key binary, value binary"
    )
    writer = (
        frame.write.format("trio-kafka")
        .option("bootstrap", broker.bootstrap)
        .option("topic", "overwrite")
        .option("load_id", "x")
    )
    with pytest.raises(Exception, match="only appends"):
        writer.mode("overwrite").save()


def test_format_write_with_prepared_columns(spark: Any, broker: ThreadedCluster) -> None:
    create_topic(broker, "plain", 1, cas=True)
    frame = spark.createDataFrame(
        [(0, i, f"k{i}", f"v{i}") for i in range(10)],
        "partition int, row long, key string, value string",
    ).repartition(1)
    (
        frame.write.format("trio-kafka")
        .mode("append")
        .option("bootstrap", broker.bootstrap)
        .option("topic", "plain")
        .option("load_id", "plain-1")
        .save()
    )
    records = read_topic(broker.bootstrap, "plain", 1)[0]
    assert [r.value for r in records] == [f"v{i}".encode() for i in range(10)]


def test_two_concurrent_writers_write_each_row_once(broker: ThreadedCluster) -> None:
    """A zombie: two attempts at one partition at the same time, outside Spark."""
    topic, load_id = "zombie", "zombie-1"
    create_topic(broker, topic, 1, cas=True)
    rows = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(2000)]

    async def race() -> list[Any]:
        async with open_selector(broker.bootstrap) as selector:
            writers = [
                CasPartitionWriter(selector, topic, 0, load_id, 0, attempt=a, batch_records=50)
                for a in range(2)
            ]
            reports: list[Any] = [None, None]

            async def run(i: int) -> None:
                reports[i] = await writers[i].run(rows)

            async with trio.open_nursery() as nursery:
                for i in range(2):
                    nursery.start_soon(run, i)
            return reports

    reports = trio.run(race)
    records = read_topic(broker.bootstrap, topic, 1)[0]
    assert [(r.key, r.value) for r in records] == rows
    assert [load_row(r, load_id.encode()) for r in records] == list(range(2000))
    assert sum(r.written for r in reports) == 2000
    assert sum(r.conflicts for r in reports) > 0


def test_rows_of_one_partition_in_two_tasks_are_refused() -> None:
    import pyarrow as pa

    from trio_kafka.spark._source import collect_rows

    batch = pa.RecordBatch.from_pydict(
        {"partition": [0, 0], "row": [0, 2], "key": [b"a", b"b"], "value": [b"x", b"y"]}
    )
    with pytest.raises(ConfigError, match="exactly one"):
        collect_rows(iter([batch]))
