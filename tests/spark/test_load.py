"""Exactly-once bulk loads of a DataFrame into the mock broker (CAS mode)."""

from __future__ import annotations

import collections
import logging
from typing import Any

import pytest
import trio

from tests.spark.conftest import create_topic, read_topic
from trio_kafka.broker import ThreadedCluster
from trio_kafka.client import BulkLoader, RowChunk, describe_topic_config, load_partition, row_of
from trio_kafka.errors import CasNotSupportedError, ConcurrentWriteError, ConfigError
from trio_kafka.net import open_selector
from trio_kafka.spark import (
    LoadState,
    Manifest,
    chunks_of,
    kafka_partition,
    read_manifest,
    write_dataframe,
)
from trio_kafka.spark._frame import _missing_in_workers
from trio_kafka.spark._manifest import ensure_control_topic
from trio_kafka.spark._options import LoadOptions

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
    """The topic holds exactly the rows, each once, in row order per partition, each in
    the partition of the one rule (murmur2 of the key), every batch closed by a
    checkpoint of this load."""
    log = read_topic(bootstrap, topic, PARTITIONS)
    seen: collections.Counter[tuple[bytes, bytes]] = collections.Counter()
    for partition, records in log.items():
        numbers = [int(r.value[1:]) for r in records if r.value is not None]
        assert numbers == sorted(numbers), f"partition {partition} out of order"
        assert row_of(records[-1], load_id.encode()) == numbers[-1]
        for record in records:
            assert record.key is not None and record.value is not None
            assert kafka_partition(int(record.value[1:]), record.key, PARTITIONS) == partition
            checkpoint = row_of(record, load_id.encode())
            assert checkpoint in (None, int(record.value[1:]))
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
        batch_bytes=8192,
        # Partition 1: raise after 1000 acknowledged rows; partition 4: the Python worker
        # dies with a batch in flight.
        fail="partition=1,attempt=0,after=1000,how=raise;partition=4,attempt=0,after=1000,how=exit",
    )
    _check_exact(broker.bootstrap, topic, load_id, ROWS)
    manifest = _manifest(broker.bootstrap, load_id)
    assert manifest.state is LoadState.COMPLETE
    assert manifest.guarantee == "exactly_once_cas"  # auto found CAS
    assert sum(manifest.counts.values()) == ROWS
    retried = {r["partition"]: r for r in manifest.reports if r["attempt"] >= 1}
    assert set(retried) == {1, 4}
    assert retried[1]["skipped"] >= 1000  # resumed from the last checkpoint
    assert retried[4]["skipped"] >= 1000  # the batches in flight may have landed
    for report in retried.values():
        assert report["skipped"] + report["loaded"] == report["count"]


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
            batch_bytes=2048,
            fail=always,
        )
    assert _manifest(broker.bootstrap, load_id).state is LoadState.ABORTED
    partial = sum(len(r) for r in read_topic(broker.bootstrap, topic, PARTITIONS).values())
    assert 200 <= partial < 3000
    write_dataframe(frame, topic=topic, key="key", load_id=load_id, bootstrap=broker.bootstrap)
    _check_exact(broker.bootstrap, topic, load_id, 3000)
    assert _manifest(broker.bootstrap, load_id).state is LoadState.COMPLETE
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
    ).coalesce(1)
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


def test_same_rows_make_the_same_log_as_bulk_loader(spark: Any, broker: ThreadedCluster) -> None:
    """One row identity: a keyless DataFrame and the same values given to BulkLoader
    place every row in the same partition (row % partitions) with the same checkpoints."""
    create_topic(broker, "same-spark", 3, cas=True)
    create_topic(broker, "same-bulk", 3, cas=True)
    values = [f"v{i}".encode() for i in range(3000)]
    frame = spark.createDataFrame([(v,) for v in values], "value binary")
    write_dataframe(
        frame, topic="same-spark", load_id="same", bootstrap=broker.bootstrap, batch_bytes=4096
    )

    async def bulk() -> None:
        async with open_selector(broker.bootstrap) as selector:
            await BulkLoader(selector, "same-bulk", "same", batch_bytes=4096).run(values)

    trio.run(bulk)
    spark_log = read_topic(broker.bootstrap, "same-spark", 3)
    bulk_log = read_topic(broker.bootstrap, "same-bulk", 3)
    for partition in range(3):
        assert [r.value for r in spark_log[partition]] == values[partition::3]
        # BulkLoader's last checkpoint of a partition also marks the input's end
        # (tk.end); a Spark load keeps that in its manifest instead.
        assert [(r.value, r.headers) for r in spark_log[partition]] == [
            (r.value, tuple(h for h in r.headers if h[0] != "tk.end")) for r in bulk_log[partition]
        ]


def test_write_dataframe_resumed_with_another_key_is_refused_naming_it(
    spark: Any, broker: ThreadedCluster
) -> None:
    topic, load_id = "rekeyed", "rekeyed-1"
    create_topic(broker, topic, PARTITIONS, cas=True)
    frame = _frame(spark, 300)
    write_dataframe(frame, topic=topic, key="key", load_id=load_id, bootstrap=broker.bootstrap)
    with pytest.raises(ConfigError, match=r"key: 'key' then, None now.*another load id"):
        write_dataframe(frame, topic=topic, load_id=load_id, bootstrap=broker.bootstrap)
    _check_exact(broker.bootstrap, topic, load_id, 300)


def test_write_dataframe_returns_and_logs_what_it_did(
    spark: Any, broker: ThreadedCluster, caplog: pytest.LogCaptureFixture
) -> None:
    topic, load_id = "reported", "reported-1"
    create_topic(broker, topic, PARTITIONS, cas=True)
    frame = _frame(spark, 300)
    with caplog.at_level(logging.INFO, logger="trio_kafka.spark"):
        first = write_dataframe(
            frame, topic=topic, key="key", load_id=load_id, bootstrap=broker.bootstrap
        )
    again = write_dataframe(
        frame, topic=topic, key="key", load_id=load_id, bootstrap=broker.bootstrap
    )
    assert (first.guarantee, first.loaded, first.skipped) == ("exactly_once_cas", 300, 0)
    assert (again.guarantee, again.loaded, again.skipped) == ("exactly_once_cas", 0, 300)
    assert any(
        "guarantee exactly_once_cas (chosen by auto); 300 rows loaded" in r.getMessage()
        for r in caplog.records
    )


def test_two_concurrent_writers_write_each_row_once(broker: ThreadedCluster) -> None:
    """A zombie: two attempts at one partition at the same time, outside Spark. At each
    offset one copy wins; the loser stops (another writer took its offset) or resyncs,
    and the log holds each row once, in order."""
    topic, load_id = "zombie", "zombie-1"
    create_topic(broker, topic, 1, cas=True)
    rows = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(2000)]

    async def race() -> list[Any]:
        async with open_selector(broker.bootstrap) as selector:
            outcomes: list[Any] = [None, None]

            async def run(i: int) -> None:
                loader = BulkLoader(
                    selector, topic, load_id, guarantee="exactly_once_cas", batch_bytes=1024
                )

                async def chunks() -> Any:
                    for start in range(0, 2000, 100):
                        part = rows[start : start + 100]
                        yield RowChunk(
                            range(start, start + len(part)),
                            None,
                            [f"{k.decode()}={v.decode()}".encode() for k, v in part],
                        )

                try:
                    outcomes[i] = await load_partition(loader, 0, chunks())
                except ConcurrentWriteError as exc:
                    outcomes[i] = exc

            async with trio.open_nursery() as nursery:
                for i in range(2):
                    nursery.start_soon(run, i)
            return outcomes

    outcomes = trio.run(race)
    records = read_topic(broker.bootstrap, topic, 1)[0]
    assert [r.value for r in records] == [f"k{i}=v{i}".encode() for i in range(2000)]
    assert any(not isinstance(o, ConcurrentWriteError) for o in outcomes)


def test_rows_of_one_partition_out_of_order_are_refused(broker: ThreadedCluster) -> None:
    create_topic(broker, "unsorted", 1, cas=True)

    async def load() -> None:
        async with open_selector(broker.bootstrap) as selector:
            loader = BulkLoader(selector, "unsorted", "u", guarantee="exactly_once_cas")

            async def chunks() -> Any:
                yield RowChunk([0, 2], None, [b"x", b"y"])
                yield RowChunk([1], None, [b"z"])

            await load_partition(loader, 0, chunks())

    with pytest.raises(ConfigError, match=r"row 1 after row 2.*increasing"):
        trio.run(load)


def test_a_row_in_the_wrong_partition_is_refused(broker: ThreadedCluster) -> None:
    create_topic(broker, "wrong-part", 2, cas=True)

    async def load() -> None:
        async with open_selector(broker.bootstrap) as selector:
            loader = BulkLoader(selector, "wrong-part", "w", guarantee="exactly_once_cas")

            async def chunks() -> Any:
                yield RowChunk([0, 1], None, [b"x", b"y"])  # row 1 belongs to partition 1

            await load_partition(loader, 0, chunks())

    with pytest.raises(ConfigError, match="row 1 belongs to partition 1"):
        trio.run(load)


def test_an_arrow_batch_is_split_by_partition_in_row_order() -> None:
    import pyarrow as pa

    batch = pa.RecordBatch.from_pydict(
        {
            "partition": pa.array([0, 1, 0, 1], pa.int32()),
            "row": pa.array([0, 1, 2, 3], pa.int64()),
            "key": pa.array([None, None, None, None], pa.binary()),
            "value": pa.array(["a", "b", "c", "d"]),
        }
    )
    chunks = dict(chunks_of(batch))
    assert list(chunks[0].rows) == [0, 2] and list(chunks[0].values) == [b"a", b"c"]
    assert list(chunks[1].rows) == [1, 3] and list(chunks[1].values) == [b"b", b"d"]
    assert chunks[0].keys is None
    with pytest.raises(ConfigError, match="needs the columns"):
        list(chunks_of(pa.RecordBatch.from_pydict({"value": [b"x"]})))


def test_the_manifest_topic_is_created_compacted_and_a_deleting_one_is_refused(
    broker: ThreadedCluster,
) -> None:
    broker.call(broker.cluster.create_topic, "ctl-deleting", 1, {"cleanup.policy": "delete"})

    async def check() -> None:
        async with open_selector(broker.bootstrap) as selector:
            await ensure_control_topic(selector, "ctl-new")
            policy = await describe_topic_config(selector, "ctl-new", "cleanup.policy")
            assert policy == "compact"
            await ensure_control_topic(selector, "ctl-new")  # exists, compacted: fine
            with pytest.raises(ConfigError, match="must be compacted"):
                await ensure_control_topic(selector, "ctl-deleting")

    trio.run(check)


def test_a_manifest_of_the_older_format_is_refused_by_name() -> None:
    old = b'{"load_id": "x", "topic": "t", "guarantee": "exactly_once", "bases": {"0": 5}}'
    with pytest.raises(ConfigError, match="older trio-kafka"):
        Manifest.from_json(old)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"batchbytes": "5"}, r"no option 'batchbytes' \(did you mean 'batch_bytes'\?\)"),
        ({"colour": "red"}, r"no option 'colour'; it takes batch_bytes, bootstrap"),
        ({"batch_bytes": "big"}, r"option batch_bytes='big': expected an integer >= 1"),
        ({"batch_bytes": "0"}, r"option batch_bytes='0': expected an integer >= 1"),
        ({"request_timeout": "nan"}, r"option request_timeout='nan': expected a number"),
        ({"max_attempts": "2.5"}, r"option max_attempts='2.5': expected an integer"),
        ({"guarantee": "sometimes"}, r"guarantee='sometimes': use one of"),
    ],
)
def test_a_bad_option_is_refused_by_name(options: dict[str, str], named: str) -> None:
    given = {"bootstrap": "127.0.0.1:9", "topic": "t", "load_id": "l", **options}
    with pytest.raises(ConfigError, match=named):
        LoadOptions.parse(given)


def test_options_parse_with_spark_case_and_strings() -> None:
    parsed = LoadOptions.parse(
        {"Bootstrap": "h:1", "TOPIC": "t", "batch_bytes": " 1024 ", "request_timeout": "2.5"}
    )
    assert (parsed.bootstrap, parsed.topic, parsed.batch_bytes) == ("h:1", "t", 1024)
    assert parsed.request_timeout == 2.5


@pytest.mark.parametrize(
    ("load_id", "options", "named"),
    [
        ("", {}, r"load_id='': a non-empty name"),
        ("l", {"batchbytes": 5}, r"did you mean 'batch_bytes'"),
        ("l", {"batch_bytes": "big"}, r"batch_bytes='big'"),
    ],
)
def test_write_dataframe_refuses_bad_options_before_spark_runs(
    load_id: str, options: dict[str, Any], named: str
) -> None:
    # A frame that fails if touched: the check must come before Spark (and the broker,
    # here a closed port) is asked anything, as a ConfigError, not an AnalysisException.
    class Untouchable:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"the frame was used ({name}) before the options were checked")

    with pytest.raises(ConfigError, match=named):
        write_dataframe(
            Untouchable(), topic="t", load_id=load_id, bootstrap="127.0.0.1:9", **options
        )


@pytest.mark.parametrize("option", ["key", "value"])
def test_a_column_the_frame_lacks_is_refused_naming_its_columns(
    spark: Any, broker: ThreadedCluster, option: str
) -> None:
    """Before: pyspark's `PySparkKeyError: [KEY_NOT_EXISTS] Key `nope` does not exist.`"""
    create_topic(broker, f"nocol-{option}", 2, cas=True)
    with pytest.raises(ConfigError, match=rf"{option}='nope': .*its columns are key, value"):
        write_dataframe(
            _frame(spark, 10),
            topic=f"nocol-{option}",
            load_id=f"nocol-{option}",
            bootstrap=broker.bootstrap,
            **{option: "nope"},
        )


def test_a_load_forced_onto_cas_where_the_topic_lacks_it_is_refused_before_spark_runs(
    spark: Any, broker: ThreadedCluster
) -> None:
    """Before: the data source's writer raised it inside Spark, so the caller got an
    AnalysisException with the error deep in a Python worker's traceback, and its remedy
    said "send without expected_offset". Now the driver asks first, and the remedy is a
    load's."""
    create_topic(broker, "nocas", 2, cas=False)
    with pytest.raises(CasNotSupportedError, match=r"or load with guarantee='transactional'"):
        write_dataframe(
            _frame(spark, 10),
            topic="nocas",
            load_id="nocas",
            bootstrap=broker.bootstrap,
            guarantee="exactly_once_cas",
        )

    async def manifest() -> Manifest | None:
        async with open_selector(broker.bootstrap) as selector:
            return await read_manifest(selector, "nocas")

    assert trio.run(manifest) is None  # nothing began


def test_a_worker_without_trio_kafka_is_named_from_sparks_error_text() -> None:
    """Spark's Python workers on another interpreter cannot import trio_kafka; the
    driver gets that only as text in Spark's exception (`write_dataframe` turns it into
    a ConfigError naming PYSPARK_PYTHON)."""
    text = "PythonException: ... ModuleNotFoundError: No module named 'trio_kafka'"
    assert _missing_in_workers(RuntimeError(text)) == "trio_kafka"
    assert _missing_in_workers(RuntimeError("No module named 'pyarrow'")) == "pyarrow"
    assert _missing_in_workers(RuntimeError("No module named 'numpy'")) is None


def test_keyed_shaping_sends_only_the_key_and_row_to_python(spark: Any) -> None:
    """The keyed partition column is an Arrow UDF of (key, row): the values stay in the
    JVM until the task (a `mapInArrow` there sent every row whole to Python and back)."""
    from trio_kafka.spark import prepare_dataframe

    prepared = prepare_dataframe(_frame(spark, 10), PARTITIONS, key="key")
    plan = prepared._jdf.queryExecution().executedPlan().toString()
    assert "ArrowEvalPython" in plan, plan
    assert "MapInArrow" not in plan, plan
    rows = prepared.collect()
    assert [r["partition"] for r in rows] == [
        kafka_partition(r["row"], r["key"], PARTITIONS) for r in rows
    ]
