"""Load speed: `BulkLoader` (CAS and transactions) and `write_dataframe` on Spark
`local[2]` (CAS and transactions), in one run, against the same mock broker (its own
subprocess, `trio-kafka broker`).

Each measurement loads ROWS rows of SIZE bytes into a fresh topic of PARTITIONS
partitions: CAS on (`guarantee` picks exactly_once_cas) or off (transactional), and
counts until `run()` returns, every row acknowledged (CAS) or committed (transactions).
Rows are unkeyed (round robin over the partitions), or with `--keyed` (key, value)
pairs over KEYS distinct keys (partitioned by the key's murmur2).

The two backends run in A B B A order, ROUNDS pairs of rounds (`--rounds 2`: A B B A,
A B B A), so a busy spell on a shared machine weighs on both alike; the table shows each
run, the mean time and rate of each backend (and the loader process's CPU seconds), and
the ratio transactional / CAS of the mean rates (goal: >= 0.7).

Spark (unless `--no-spark`; unkeyed rows only): `write_dataframe` of the same values
(`lpad(id, SIZE, '0')` of `spark.range`), CAS then transactions, each in a fresh
`local[2]` session started and warmed up by a 10,000-row load of the same kind before
the timed window (Spark's defaults otherwise: Python workers are reused), timed whole
(the row-counting job, the shuffle and sort, the tasks, the driver's commit). The same
shaping into Spark's `noop` sink, and into a Python data source that only counts the
rows, are timed after it: Spark's own floors in that session. Peak Python worker RSS is
the largest `ru_maxrss` the load's tasks reported. Goals: Spark / BulkLoader >= 0.5;
peak worker RSS < 400 MiB and within 20% between 2,000,000 and 10,000,000 rows.

    .venv/bin/python benchmarks/load.py [--rows N] [--size BYTES] [--partitions P]
        [--rounds R] [--keyed] [--keys K] [--no-spark] [--no-bulk]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bulk_load import broker

from trio_kafka.client import BulkLoader, create_topic
from trio_kafka.client._bulk import Row
from trio_kafka.net import open_selector

BACKENDS = (("exactly_once_cas", True), ("transactional", False))


async def load(
    bootstrap: str, topic: str, cas: bool, rows: list[Row], partitions: int
) -> tuple[float, float, str]:
    async with open_selector(bootstrap) as selector:
        await create_topic(selector, topic, partitions, cas=cas)
        loader = BulkLoader(selector, topic, "bench")
        started, cpu = time.perf_counter(), time.process_time()
        result = await loader.run(rows)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert result.loaded == len(rows), result
    return elapsed, cpu, result.guarantee


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
    parser.add_argument(
        "--rounds", type=int, default=1, help="pairs of rounds, each A B B A (default 1)"
    )
    parser.add_argument("--keyed", action="store_true", help="(key, value) rows")
    parser.add_argument("--keys", type=int, default=10_000, help="distinct keys (--keyed)")
    parser.add_argument("--no-spark", action="store_true", help="BulkLoader only")
    parser.add_argument("--no-bulk", action="store_true", help="Spark only")
    args = parser.parse_args()
    if args.rounds < 1 or args.rows < 1 or args.keys < 1:
        parser.error("--rounds, --rows and --keys must be at least 1")
    values = [] if args.no_bulk else [b"%0*d" % (args.size, i) for i in range(args.rows)]
    rows: list[Row]
    if args.keyed:
        keys = [b"key-%d" % k for k in range(args.keys)]
        rows = [(keys[i % args.keys], value) for i, value in enumerate(values)]
    else:
        rows = list(values)
    shape = (
        f"{args.rows:,} rows of {args.size} B{' keyed' if args.keyed else ''}, "
        f"{args.partitions} partitions"
    )
    order = [BACKENDS[0], BACKENDS[1], BACKENDS[1], BACKENDS[0]] * args.rounds
    if args.no_bulk:
        order = []
    spark_rates: dict[str, float] = {}
    times: dict[str, list[float]] = {name: [] for name, _ in BACKENDS}
    # CPU seconds of the loader's process (the broker runs in its own).
    cpus: dict[str, list[float]] = {name: [] for name, _ in BACKENDS}
    with broker() as bootstrap:
        for run, (name, cas) in enumerate(order):
            elapsed, cpu, guarantee = trio.run(
                load, bootstrap, f"load-{name}-{run}", cas, rows, args.partitions
            )
            assert guarantee == name, (guarantee, name)
            times[name].append(elapsed)
            cpus[name].append(cpu)
            print(
                f"run {run + 1}: BulkLoader {name:17} {shape}: {elapsed:6.2f} s, "
                f"{args.rows / elapsed:10,.0f} rows/s, loader CPU {cpu:5.2f} s",
                flush=True,
            )
        del rows, values
        for name, cas in () if args.no_spark or args.keyed else BACKENDS:
            spark = spark_session()
            try:
                elapsed, guarantee, peak = spark_load(spark, bootstrap, f"spark-{name}", cas, args)
                noop, python = spark_floors(spark, args)
            finally:
                spark.stop()
            assert guarantee == name, (guarantee, name)
            spark_rates[name] = args.rows / elapsed
            print(
                f"Spark local[2] {name:17} {shape}: {elapsed:6.2f} s, "
                f"{spark_rates[name]:10,.0f} rows/s, peak worker RSS {peak:5.0f} MiB\n"
                f"  (the same shaping into Spark's noop sink: {noop:.2f} s, "
                f"{args.rows / noop:,.0f} rows/s; into a Python data source that only "
                f"counts rows: {python:.2f} s, {args.rows / python:,.0f} rows/s)",
                flush=True,
            )
    print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"| backend ({shape}) | mean s | rows/s (of the mean) | runs (s) | loader CPU s |")
    print("| --- | --- | --- | --- | --- |")
    means = {name: statistics.fmean(runs) for name, runs in times.items() if runs}
    for name, runs in times.items():
        if not runs:
            continue
        print(
            f"| {name} | {means[name]:.2f} | {args.rows / means[name]:,.0f} | "
            f"{', '.join(f'{t:.2f}' for t in runs)} | {statistics.fmean(cpus[name]):.2f} |"
        )
    if len(means) == 2:
        ratio = means["exactly_once_cas"] / means["transactional"]
        print(f"\ntransactional / CAS (rows/s of the mean times): {ratio:.2f}x (goal >= 0.7)")
    for name, rate in spark_rates.items():
        if name in means:
            ratio = rate / (args.rows / means[name])
            print(f"Spark / BulkLoader, {name}: {ratio:.2f}x (goal >= 0.5)")


if __name__ == "__main__":
    main()
