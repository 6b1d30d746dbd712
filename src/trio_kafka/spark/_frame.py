"""`write_dataframe`: shape a DataFrame for the `trio-kafka` data source, then write it.

Shaping gives every row the identity `BulkLoader` gives it (core/_load.py), so a
DataFrame and the same rows given to `BulkLoader` make the same log:

1. `key` and `value` become binary (strings as UTF-8; other types through their string
   form; without a `value` column, each row is its JSON);
2. `row` numbers the rows 0, 1, 2... in the DataFrame's order (after `order_by`, when
   given): a first job counts the rows of each Spark partition (what `zipWithIndex`
   does), then row = the rows of the partitions before + the index within its own;
3. `partition` is the Kafka partition by the one rule: murmur2 of the key (Java's
   default partitioner; an Arrow UDF of the key and row columns, vectorized over the
   Arrow buffers: spark/_arrow.py), else `row % partitions` (in SQL);
4. `repartitionById(n, partition)` makes Spark partition i exactly Kafka partition i,
   one task each (Spark 4.1+), and `sortWithinPartitions(row)` streams each task's rows
   in order (Spark sorts in the JVM, spilling to disk: the Python task holds one Arrow
   batch at a time).
"""

from __future__ import annotations

import json
import logging
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import attrs
import trio

from trio_kafka.client import open_selector, partition_of
from trio_kafka.errors import ConfigError
from trio_kafka.spark._manifest import LoadState, Manifest, read_manifest
from trio_kafka.spark._options import AUTO, EXACTLY_ONCE, NAME, LoadOptions
from trio_kafka.spark._source import KafkaDataSource, check_resume, load_backend

logger = logging.getLogger("trio_kafka.spark")


@attrs.frozen
class DataFrameLoadResult:
    """What `write_dataframe` did."""

    load_id: str
    topic: str
    #: The guarantee used: "exactly_once_cas" or "transactional" (what "auto" chose).
    guarantee: str
    #: Rows written by this call; rows found already loaded (skipped).
    loaded: int
    skipped: int


def topic_partitions(bootstrap: str, topic: str) -> int:
    """How many partitions `topic` has (asks the brokers)."""

    async def ask() -> int:
        async with open_selector(bootstrap) as selector:
            return (await selector.wait_for_topic(topic)).partition_count

    return trio.run(ask)


def kafka_partition(row: int, key: bytes | None, partitions: int) -> int:
    """The Kafka partition of input row `row` (the rule of every load)."""
    return partition_of(row, key, partitions)


def _partitioner(partitions: int) -> Any:
    """The Kafka partition of each row, an Arrow UDF of (key, row): only those two
    columns go to Python and back, while the JVM keeps the rest of each row (through
    `mapInArrow` every row made the trip whole, values included, twice)."""
    from pyspark.sql.pandas.functions import ArrowUDFType, arrow_udf

    def partition(keys: Any, rows: Any) -> Any:
        import pyarrow as pa  # type: ignore[import-untyped]

        from trio_kafka.spark._arrow import partitions_of

        # Over the Arrow buffers (spark/_arrow.py): no Python object per row.
        return pa.array(partitions_of(rows, keys, partitions), pa.int32())

    with warnings.catch_warnings():
        # Spark prefers the kind named by type hints, which are strings in this module
        # (`from __future__ import annotations`): it is named outright instead.
        warnings.filterwarnings("ignore", "It is preferred to specify type hints")
        return arrow_udf(partition, "int", ArrowUDFType.SCALAR)


def number_rows(df: Any) -> Any:
    """`df` with a `row` column: 0, 1, 2... in the DataFrame's order (one counting job)."""
    from pyspark.sql import functions as F

    spark_partition = F.spark_partition_id()
    counts = {int(p): int(n) for p, n in df.groupBy(spark_partition.alias("p")).count().collect()}
    offsets, total = [], 0
    for index in range(df.rdd.getNumPartitions()):
        offsets.append(total)
        total += counts.get(index, 0)
    if not offsets:
        return df.withColumn("row", F.lit(0).cast("long"))
    first = F.element_at(F.array(*[F.lit(o).cast("long") for o in offsets]), spark_partition + 1)
    # monotonically_increasing_id = (Spark partition << 33) + index within it.
    within = F.monotonically_increasing_id() - F.shiftleft(spark_partition.cast("long"), 33)
    return df.withColumn("row", first + within)


def _read_manifest(options: LoadOptions, check: bool = False) -> tuple[int, Manifest | None]:
    """(the topic's partitions, the load's manifest or None); with `check`, a resume
    with other routing is refused here, before Spark runs anything."""

    async def read() -> tuple[int, Manifest | None]:
        async with open_selector(options.bootstrap) as selector:
            count = (await selector.wait_for_topic(options.topic)).partition_count
            manifest = await read_manifest(selector, options.load_id, options.control_topic)
            if check and manifest is not None:
                check_resume(selector, options, manifest, count)
            elif check and options.guarantee == EXACTLY_ONCE:
                # A new load forced onto CAS: refused here, where the data source's
                # writer (`open_load`) would raise the same error wrapped in Spark's
                # AnalysisException, deep in a Python worker's traceback.
                await load_backend(selector, options, count)
            return count, manifest

    return trio.run(read)


def prepare_dataframe(
    df: Any,
    partitions: int,
    *,
    key: str | None = None,
    value: str | None = None,
    order_by: Sequence[str] | None = None,
) -> Any:
    """`df` with the columns key, value, row, partition, shaped for the data source."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType

    for option, column in (("key", key), ("value", value)):
        if column is not None and column not in df.columns:
            raise ConfigError(
                f"{option}={column!r}: the DataFrame has no such column; its columns are "
                f"{', '.join(df.columns) or 'none'}"
            )

    def binary(column: str) -> Any:
        if isinstance(df.schema[column].dataType, BinaryType):
            return F.col(column)
        return F.col(column).cast("string").cast("binary")

    if order_by:
        df = df.orderBy(*order_by)
    key_col = binary(key) if key is not None else F.lit(None).cast("binary")
    if value is not None:
        value_col = binary(value)
    elif "value" in df.columns:
        value_col = binary("value")
    else:
        value_col = F.to_json(F.struct(*[F.col(c) for c in df.columns])).cast("binary")
    numbered = number_rows(df.select(key_col.alias("key"), value_col.alias("value")))
    if key is None:
        shaped = numbered.withColumn(
            "partition", F.pmod(F.col("row"), F.lit(partitions)).cast("int")
        )
    else:
        shaped = numbered.withColumn(
            "partition", _partitioner(partitions)(F.col("key"), F.col("row"))
        )
    return shaped.repartitionById(partitions, F.col("partition")).sortWithinPartitions("row")


def write_dataframe(
    df: Any,
    *,
    topic: str,
    load_id: str,
    bootstrap: str,
    key: str | None = None,
    value: str | None = None,
    guarantee: str = AUTO,
    order_by: Sequence[str] | None = None,
    **options: Any,
) -> DataFrameLoadResult:
    """Load `df` into `topic` exactly once (see docs/spark.md).

    `key`/`value` name columns (default: no key; the `value` column, else each row as
    JSON). `guarantee`: "auto" (CAS where the brokers and the topic do the
    expected-offset check, transactions elsewhere), "exactly_once_cas" or
    "transactional" (refused where impossible). `order_by` sorts the rows first (the
    input must otherwise be deterministic in content and order). `options` go to the
    data source (`batch_bytes`, `request_timeout`, `transaction_timeout`,
    `control_topic`, ...). Rerunning with the same `load_id` resumes a failed load, or
    does nothing after a successful one; a rerun with another `key`, `value`,
    `order_by`, guarantee or partition count is refused (`ConfigError`).

    Returns what it did (the guarantee used, rows loaded and skipped), also logged at
    INFO on the `trio_kafka.spark` logger.
    """
    # What decides each row's partition and position, recorded with the load.
    routing = {"key": key, "value": value, "order_by": list(order_by) if order_by else None}
    given = {
        "bootstrap": bootstrap,
        "topic": topic,
        "load_id": load_id,
        "guarantee": guarantee,
        **{name: str(setting) for name, setting in options.items()},
        "routing": json.dumps({k: v for k, v in routing.items() if v is not None}),
    }
    # Checked here, before Spark runs anything: an error raised inside the data source
    # reaches the caller as an AnalysisException with the real error deep in its text.
    if not isinstance(load_id, str) or not load_id:
        raise ConfigError(
            f"load_id={load_id!r}: a non-empty name of the load (a rerun with the same "
            "load_id resumes it instead of writing the rows again)"
        )
    parsed = LoadOptions.parse(given)
    partitions, before = _read_manifest(parsed, check=True)
    spark = df.sparkSession
    spark.dataSource.register(KafkaDataSource)
    prepared = prepare_dataframe(df, partitions, key=key, value=value, order_by=order_by)
    writer = prepared.write.format(NAME).mode("append")
    for name, setting in given.items():
        writer = writer.option(name, setting)
    try:
        writer.save()
    except Exception as exc:
        missing = _missing_in_workers(exc)
        if missing is None:
            raise
        raise ConfigError(
            f"Spark's Python workers could not import {missing}: they run another "
            f"interpreter than this one ({sys.executable}). Set PYSPARK_PYTHON (or "
            "spark.pyspark.python) to an interpreter with trio-kafka[spark] installed "
            "before the SparkSession starts (docs/spark.md), then run the load again "
            "with the same load_id: it resumes, and no row is written twice"
        ) from exc
    # The driver's hooks may run in other processes: what they did is in the manifest.
    _, after = _read_manifest(parsed)
    if after is None or after.state is not LoadState.COMPLETE:
        raise ConfigError(f"load {load_id!r}: no complete manifest after the job")
    if before is not None and before.state is LoadState.COMPLETE:
        loaded, skipped = 0, sum(after.counts.values())  # finished before: nothing ran
    else:
        loaded = sum(int(r["loaded"]) for r in after.reports)
        skipped = sum(int(r["skipped"]) for r in after.reports)
    result = DataFrameLoadResult(load_id, topic, after.guarantee, loaded, skipped)
    logger.info(
        "load %s into %s: guarantee %s%s; %d rows loaded, %d already there (skipped)",
        load_id,
        topic,
        result.guarantee,
        " (chosen by auto)" if parsed.guarantee == AUTO else "",
        loaded,
        skipped,
    )
    return result


def _missing_in_workers(error: BaseException) -> str | None:
    """The module a Python worker could not import, named in Spark's error text (the
    worker's exception reaches the driver only as text), or None."""
    for module in ("trio_kafka", "pyarrow"):
        if f"No module named '{module}'" in str(error):
            return module
    return None


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
    "DataFrameLoadResult",
    "foreach_batch_writer",
    "kafka_partition",
    "number_rows",
    "prepare_dataframe",
    "topic_partitions",
    "write_dataframe",
]
