"""`write_dataframe`: shape a DataFrame for the `trio-kafka` data source, then write it.

Shaping (all deterministic for a deterministic input):

1. `key` and `value` become binary (strings as UTF-8; other types through their string
   form; without a `value` column, each row is its JSON);
2. `partition` is the Kafka partition the Java client would pick for the key: our
   murmur2 (`partition_for_key`), computed in `mapInArrow`, not Spark's Murmur3
   `hash()`. A row without a key is placed by the murmur2 of its value;
3. `row` numbers the rows of each Kafka partition 0, 1, 2... in the order of
   `order_by` (default: key, then value), so a retry or a rerun numbers them the same;
4. `repartitionById(n, partition)` makes Spark partition i exactly Kafka partition i,
   one task each (Spark 4.1+), and `sortWithinPartitions(row)` orders the task's input.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import trio

from trio_kafka.net import open_selector
from trio_kafka.producer import murmur2, partition_for_key, to_positive
from trio_kafka.spark._source import EXACTLY_ONCE, NAME, KafkaDataSource
from trio_kafka.spark._wire import partition_count


def topic_partitions(bootstrap: str, topic: str) -> int:
    """How many partitions `topic` has (asks the brokers)."""

    async def ask() -> int:
        async with open_selector(bootstrap) as selector:
            return await partition_count(selector, topic)

    return trio.run(ask)


def kafka_partition(key: bytes | None, value: bytes | None, partitions: int) -> int:
    if key is not None:
        return partition_for_key(key, partitions)
    return to_positive(murmur2(value or b"")) % partitions


def _partitioner(partitions: int) -> Any:
    def add_partition(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa  # type: ignore[import-untyped]

        for batch in batches:
            keys = batch.column("key").to_pylist()
            values = batch.column("value").to_pylist()
            parts = [kafka_partition(k, v, partitions) for k, v in zip(keys, values)]
            yield pa.RecordBatch.from_arrays(
                [batch.column("key"), batch.column("value"), pa.array(parts, pa.int32())],
                names=["key", "value", "partition"],
            )

    return add_partition


def prepare_dataframe(
    df: Any,
    partitions: int,
    *,
    key: str | None = None,
    value: str | None = None,
    order_by: Sequence[str] | None = None,
) -> Any:
    """`df` with the columns key, value, partition, row, shaped for the data source."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType

    def binary(column: Any, name: str) -> Any:
        field = df.schema[name] if isinstance(column, str) else None
        col = F.col(column) if isinstance(column, str) else column
        if field is not None and isinstance(field.dataType, BinaryType):
            return col
        return col.cast("string").cast("binary")

    key_col = binary(key, key) if key is not None else F.lit(None).cast("binary")
    if value is not None:
        value_col = binary(value, value)
    elif "value" in df.columns:
        value_col = binary("value", "value")
    else:
        value_col = F.to_json(F.struct(*[F.col(c) for c in df.columns])).cast("binary")
    shaped = df.select(key_col.alias("key"), value_col.alias("value"))
    shaped = shaped.mapInArrow(_partitioner(partitions), "key binary, value binary, partition int")
    order = [F.col(c) for c in (order_by or ("key", "value"))]
    window = Window.partitionBy("partition").orderBy(*order)
    numbered = shaped.withColumn("row", (F.row_number().over(window) - 1).cast("long"))
    return numbered.repartitionById(partitions, F.col("partition")).sortWithinPartitions("row")


def write_dataframe(
    df: Any,
    *,
    topic: str,
    load_id: str,
    bootstrap: str,
    key: str | None = None,
    value: str | None = None,
    guarantee: str = EXACTLY_ONCE,
    order_by: Sequence[str] | None = None,
    **options: Any,
) -> None:
    """Load `df` into `topic` exactly once (see docs/spark.md).

    `key`/`value` name columns (default: no key; the `value` column, else each row as
    JSON). `guarantee` is "exactly_once" (CAS, needs the expected-offset extension) or
    "transactional" (any broker with transactions). `options` go to the data source
    (`batch_records`, `request_timeout`, `transaction_timeout`, `control_topic`, ...).
    Rerunning with the same `load_id` resumes a failed load, or does nothing after a
    successful one.
    """
    spark = df.sparkSession
    spark.dataSource.register(KafkaDataSource)
    partitions = topic_partitions(bootstrap, topic)
    prepared = prepare_dataframe(df, partitions, key=key, value=value, order_by=order_by)
    writer = (
        prepared.write.format(NAME)
        .mode("append")
        .option("bootstrap", bootstrap)
        .option("topic", topic)
        .option("load_id", load_id)
        .option("guarantee", guarantee)
    )
    for name, setting in options.items():
        writer = writer.option(name, str(setting))
    writer.save()


def foreach_batch_writer(
    *, topic: str, bootstrap: str, load_id: str, key: str | None = None, **kwargs: Any
) -> Any:
    """A `foreachBatch` function: micro-batch `b` is loaded as `<load_id>-<b>`, so a
    replayed micro-batch resumes or is skipped. `load_id` must be stable across restarts
    from the same checkpoint (the query's name, or its id)."""

    def write_batch(batch_df: Any, batch_id: int) -> None:
        write_dataframe(
            batch_df,
            topic=topic,
            bootstrap=bootstrap,
            load_id=f"{load_id}-{batch_id}",
            key=key,
            **kwargs,
        )

    return write_batch


__all__ = [
    "foreach_batch_writer",
    "kafka_partition",
    "prepare_dataframe",
    "topic_partitions",
    "write_dataframe",
]
