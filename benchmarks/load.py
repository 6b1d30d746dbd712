"""Load speed: `BulkLoader` (CAS and transactions) and `write_dataframe` on Spark
`local[2]` (CAS and transactions), in one run, against the same mock broker (its own
subprocess, `trio-kafka broker`).

Each measurement loads ROWS rows of SIZE bytes (unkeyed: row % partitions) into a fresh
topic of PARTITIONS partitions: CAS on (`guarantee="auto"` picks exactly_once_cas) or
off (transactional), and counts until the load returns, every row acknowledged (CAS)
or committed (transactions). The values are the same bytes for every loader
(`%0100d` of the row number; Spark: `lpad(id, 100, '0')` of `spark.range`).

Spark: a fresh `local[2]` session per load (started, and warmed up by a 10,000-row load
of the same kind, before the timed window; Spark's defaults otherwise: Python workers
are reused), `write_dataframe` timed whole (the counting job, the shuffle and sort, the
tasks, the driver's commit). The same shaping into Spark's `noop` sink, and into a
Python data source that only counts the rows, are timed after it: Spark's own floors
on this session. Peak Python worker
RSS is the largest `ru_maxrss` the load's tasks reported (each task reads its own
Python worker's high-water mark).

Prints rows/s for each, the ratios transactional / CAS (goal: >= 0.7) and Spark /
BulkLoader (goal: >= 0.5), and the Spark workers' peak RSS (goal: < 400 MiB, within 20%
between 2,000,000 and 10,000,000 rows).

    .venv/bin/python benchmarks/load.py [--rows N] [--size BYTES] [--partitions P]
        [--no-spark] [--no-bulk]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bulk_load import broker

from trio_kafka.client import BulkLoader, create_topic, open_selector


async def load(
    bootstrap: str, topic: str, cas: bool, rows: list[bytes], partitions: int
) -> tuple[float, str]:
    async with open_selector(bootstrap) as selector:
        await create_topic(selector, topic, partitions, cas=cas)
        loader = BulkLoader(selector, topic, "bench")
        started = time.perf_counter()
        result = await loader.run(rows)
        elapsed = time.perf_counter() - started
    assert result.loaded == len(rows), result
    return elapsed, result.guarantee


def spark_session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from trio_kafka.spark import spark_session as session

    return session(
        "local[2]",
        "trio-kafka load benchmark",
        **{
            "spark.driver.memory": "3g",
            "spark.sql.shuffle.partitions": "2",
        },
    )


def spark_load(
    spark: Any, bootstrap: str, topic: str, cas: bool, args: argparse.Namespace
) -> tuple[float, str, float]:
    """(seconds, guarantee, peak worker RSS in MiB) of one `write_dataframe`."""
    from pyspark.sql import functions as F

    from trio_kafka.spark import read_manifest, write_dataframe

    async def make() -> None:
        async with open_selector(bootstrap) as selector:
            await create_topic(selector, topic, args.partitions, cas=cas)
            await create_topic(selector, f"{topic}-warm", args.partitions, cas=cas)

    async def manifest() -> Any:
        async with open_selector(bootstrap) as selector:
            return await read_manifest(selector, topic)

    trio.run(make)
    # Warm the session up (JVM class loading, JIT, codegen, Python workers) with a small
    # load of the same kind, outside the timed window: the first job of a fresh session
    # costs ~30 s more here, whatever its size.
    warm = spark.range(10_000).select(F.col("id").cast("string").cast("binary").alias("value"))
    write_dataframe(warm, topic=f"{topic}-warm", load_id=f"{topic}-warm", bootstrap=bootstrap)
    frame = spark.range(args.rows).select(
        F.lpad(F.col("id").cast("string"), args.size, "0").cast("binary").alias("value")
    )
    started = time.perf_counter()
    write_dataframe(frame, topic=topic, load_id=topic, bootstrap=bootstrap)
    elapsed = time.perf_counter() - started
    done = trio.run(manifest)
    assert sum(done.counts.values()) == args.rows, done.counts
    peak = max(r["peak_rss_kib"] for r in done.reports) / 1024
    tasks = ", ".join(f"{r['seconds']:.1f}" for r in done.reports)
    print(f"  (seconds in each task's load_partition: {tasks})", flush=True)
    return elapsed, done.guarantee, peak


def spark_floors(spark: Any, args: argparse.Namespace) -> tuple[float, float]:
    """Seconds Spark alone takes for the same shaping (numbering, shuffle, sort) into
    the JVM's `noop` sink, and into a Python data source that only counts the rows of
    its Arrow batches: what no Kafka writer on this session can beat."""
    from pyspark.sql import functions as F
    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

    from trio_kafka.spark import prepare_dataframe

    class CountWriter(DataSourceArrowWriter):
        def write(self, iterator: Any) -> WriterCommitMessage:
            sum(batch.num_rows for batch in iterator)
            return WriterCommitMessage()

    class CountSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "count-rows"

        def writer(self, schema: Any, overwrite: bool) -> CountWriter:
            return CountWriter()

    spark.dataSource.register(CountSource)
    frame = spark.range(args.rows).select(
        F.lpad(F.col("id").cast("string"), args.size, "0").cast("binary").alias("value")
    )
    floors = []
    for sink in ("noop", "count-rows"):
        started = time.perf_counter()
        prepared = prepare_dataframe(frame, args.partitions)
        prepared.write.format(sink).mode("append" if sink != "noop" else "overwrite").save()
        floors.append(time.perf_counter() - started)
    return floors[0], floors[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--no-spark", action="store_true", help="BulkLoader only")
    parser.add_argument("--no-bulk", action="store_true", help="Spark only")
    args = parser.parse_args()
    results: dict[str, float] = {}
    head = f"{args.rows:,} rows of {args.size} B, {args.partitions} partitions"
    with broker() as bootstrap:
        if not args.no_bulk:
            rows = [b"%0*d" % (args.size, i) for i in range(args.rows)]
            for name, cas in (("cas", True), ("transactional", False)):
                elapsed, guarantee = trio.run(
                    load, bootstrap, f"load-{name}", cas, rows, args.partitions
                )
                rate = results[f"bulk {guarantee}"] = args.rows / elapsed
                print(
                    f"BulkLoader         {guarantee:17} {head}: {elapsed:6.2f} s, "
                    f"{rate:10,.0f} rows/s",
                    flush=True,
                )
            del rows
        for name, cas in () if args.no_spark else (("cas", True), ("transactional", False)):
            spark = spark_session()
            try:
                elapsed, guarantee, peak = spark_load(spark, bootstrap, f"spark-{name}", cas, args)
                noop, python = spark_floors(spark, args)
            finally:
                spark.stop()
            print(
                f"  (the same shaping into Spark's noop sink: {noop:.2f} s, "
                f"{args.rows / noop:,.0f} rows/s; into a Python data source that only "
                f"counts rows: {python:.2f} s, {args.rows / python:,.0f} rows/s)",
                flush=True,
            )
            rate = results[f"spark {guarantee}"] = args.rows / elapsed
            print(
                f"Spark local[2]     {guarantee:17} {head}: {elapsed:6.2f} s, "
                f"{rate:10,.0f} rows/s, peak worker RSS {peak:5.0f} MiB",
                flush=True,
            )
    for kind in ("bulk", "spark"):
        if f"{kind} transactional" in results:
            ratio = results[f"{kind} transactional"] / results[f"{kind} exactly_once_cas"]
            print(f"{kind} transactional / CAS: {ratio:.2f}x (goal >= 0.7)")
    for guarantee in ("exactly_once_cas", "transactional"):
        if f"spark {guarantee}" in results and f"bulk {guarantee}" in results:
            ratio = results[f"spark {guarantee}"] / results[f"bulk {guarantee}"]
            print(f"Spark / BulkLoader, {guarantee}: {ratio:.2f}x (goal >= 0.5)")


if __name__ == "__main__":
    main()
