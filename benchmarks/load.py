"""Load speed: `BulkLoader` (CAS and transactions) and `write_dataframe` on Spark
`local[2]` (CAS and transactions), in one run, against the same broker: our mock broker
(its own subprocess, `trio-kafka broker`; the default), or with `--broker kafka` an
Apache Kafka 4.4 node (`kafka_broker()`, the jars of `make kafka`) or `--broker tansu`,
where only the transactional backend runs (neither has the expected-offset check).

Each measurement loads ROWS rows of SIZE bytes into a fresh topic of PARTITIONS
partitions: CAS on (`guarantee` picks exactly_once_cas) or off (transactional), and
counts until `run()` returns, every row acknowledged (CAS) or committed (transactions).
Rows are unkeyed (round robin over the partitions), or with `--keyed` (key, value)
pairs over KEYS distinct keys (partitioned by the key's murmur2).

The two backends run in A B B A order, ROUNDS pairs of rounds (`--rounds 2`: A B B A,
A B B A), so a busy spell on a shared machine weighs on both alike; the table shows each
run, the mean time and rate of each backend (and the loader process's CPU seconds), and
the ratio transactional / CAS of the mean rates (goal: >= 0.7), and the ratio of the
loader's mean CPU seconds (CAS / transactional), which a busy machine moves less.

Spark (unless `--no-spark`): `write_dataframe` of the same values (`lpad(id, SIZE, '0')`
of `spark.range`; `--keyed`: with the key `key-<id % KEYS>`, `key="key"`) in one
`local[2]` session (Spark's defaults
otherwise: Python workers are reused), CAS and transactions A B B A (`--spark-rounds`
times), each timed whole (the row-counting job, the shuffle and sort, the tasks, the
driver's commit). Before them, outside the timed window, a 10,000-row load of each
backend and one full-size pass into the counting source below warm the JVM up (see
`warm_up`: the JVM outlives a session, so a "fresh session" per backend still left the
JIT's cost to whichever ran first). After them, in the same session and on the same
DataFrame, Spark's own floors (`spark_floors`, `--no-floors`: skipped): the DataFrame
into the `noop` sink; every batch through `mapInArrow` to a Python worker that drops
it; shuffled by key into PARTITIONS partitions, sorted within them and handed to a
Python source that counts rows (goal: write_dataframe >= 0.5x this); and
write_dataframe's own shaping into noop and into the counting source. Each floor's line
gives write_dataframe's rate as a multiple of it. Peak Python worker RSS is the largest `ru_maxrss` the loads'
tasks reported (the reused workers' peak so far). Goals: Spark / BulkLoader >= 0.5;
peak worker RSS < 400 MiB and within 20% between 2,000,000 and 10,000,000 rows.

CPU seconds are counted per process (`/proc/<pid>/stat`, reaped children included): the
loader's own, the broker's, and Spark's (the JVM and its Python workers; of those, our
tasks' own as they reported it). On a machine of C cores no run can take less than its
processes' CPU seconds / C: that, with the counting floor, bounds what Spark can reach.

    .venv/bin/python benchmarks/load.py [--broker mock|kafka|tansu] [--rows N] [--size BYTES] [--partitions P]
        [--rounds R] [--keyed] [--keys K] [--no-spark] [--no-bulk]
        [--spark-rounds S] [--spark-guarantee G] [--spark-conf KEY=VALUE]
        [--master M] [--no-floors]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Iterator
from typing import Any

import trio

from trio_kafka.client import BulkLoader, create_topic
from trio_kafka.client._bulk import Row
from trio_kafka.net import open_selector
from trio_kafka.testing import kafka_broker, mock_broker_process, tansu_broker

BACKENDS = (("exactly_once_cas", True), ("transactional", False))
#: How each broker's process shows in /proc/<pid>/cmdline (its CPU is the broker's).
BROKER_COMMANDS = (b"broker\x00--port", b"kafka.Kafka", b"/tansu\x00")
_TICK = os.sysconf("SC_CLK_TCK")


def backends(args: argparse.Namespace) -> tuple[tuple[str, bool], ...]:
    """The backends the broker has: CAS only on our mock broker."""
    return BACKENDS if args.broker == "mock" else BACKENDS[1:]


def abba(pair: tuple[tuple[str, bool], ...], rounds: int) -> list[tuple[str, bool]]:
    """A B B A, `rounds` times (one backend: it, twice a round)."""
    first, second = pair[0], pair[-1]
    return [first, second, second, first] * rounds


@contextlib.contextmanager
def broker(name: str) -> Iterator[str]:
    """A fresh broker for the run, its bootstrap address (a shared machine can take
    long to start a process)."""
    if name == "kafka":
        with kafka_broker(startup_timeout=120) as node:
            yield node.bootstrap
    elif name == "tansu":
        with tansu_broker(startup_timeout=60) as node:
            yield node.bootstrap
    else:
        with mock_broker_process(startup_timeout=120) as bootstrap:
            yield bootstrap


def descendants_cpu() -> dict[str, float]:
    """CPU seconds (user + system, their reaped children included) of this process's
    descendants: the mock broker (`broker`), and the rest (`spark`: the JVM, which runs
    the driver and the executor in local mode, and its Python workers). Deltas of two
    calls are exact while the processes live: a worker that exits in between is counted
    through its parent's children times."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        pid = int(entry)
        parents[pid] = int(fields[1])
        times[pid] = sum(int(x) for x in fields[11:15]) / _TICK
    own = {os.getpid()}
    grown = True
    while grown:
        found = {pid for pid, parent in parents.items() if parent in own} - own
        own |= found
        grown = bool(found)
    own.discard(os.getpid())
    out = {"broker": 0.0, "spark": 0.0}
    for pid in own:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read()
        except OSError:
            continue
        out["broker" if any(c in command for c in BROKER_COMMANDS) else "spark"] += times[pid]
    return out


def cpu_since(before: dict[str, float]) -> dict[str, float]:
    after = descendants_cpu()
    return {name: after[name] - before[name] for name in after}


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


def spark_session(conf: list[str], master: str = "local[2]") -> Any:
    """A `local[2]` session (`--master`); `conf`: extra "key=value" settings
    (`--spark-conf`)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from trio_kafka.spark import spark_session as session

    return session(
        master,
        "trio-kafka load benchmark",
        **{
            "spark.driver.memory": "3g",
            "spark.sql.shuffle.partitions": "2",
            **dict(setting.split("=", 1) for setting in conf),
        },
    )


def value_frame(spark: Any, rows: int, size: int, keys: int = 0) -> Any:
    """`rows` values of `size` bytes, `lpad(id, size, '0')` of `spark.range`; with
    `keys`, also a `key` column, `key-<id % keys>` (what `--keyed` gives BulkLoader)."""
    from pyspark.sql import functions as F

    value = F.lpad(F.col("id").cast("string"), size, "0").cast("binary").alias("value")
    if not keys:
        return spark.range(rows).select(value)
    key = F.concat(F.lit("key-"), (F.col("id") % keys).cast("string")).cast("binary")
    return spark.range(rows).select(key.alias("key"), value)


def frame_of(spark: Any, rows: int, args: argparse.Namespace) -> Any:
    return value_frame(spark, rows, args.size, args.keys if args.keyed else 0)


def key_of(args: argparse.Namespace) -> str | None:
    return "key" if args.keyed else None


def warm_up(spark: Any, bootstrap: str, args: argparse.Namespace) -> None:
    """Outside the timed window: a 10,000-row load of each backend (class loading,
    codegen, Python workers), then the full-size shaping once into a Python source
    that counts rows, so that the JIT has compiled Spark's own hot paths (range, lpad,
    shuffle, sort, Arrow) before the first timed load. The JVM outlives `spark.stop()`
    (it is the driver's py4j gateway), so without this the first timed load of a run
    pays the JIT for all the others: measured here, a CAS load run first used ~3.7
    more JVM CPU seconds than the transactional load after it (2,000,000 rows)."""
    from trio_kafka.spark import write_dataframe

    for name, cas in backends(args):
        topic = f"warm-{name}"

        async def make(topic: str = topic, cas: bool = cas) -> None:
            async with open_selector(bootstrap) as selector:
                await create_topic(selector, topic, args.partitions, cas=cas)

        trio.run(make)
        warm = frame_of(spark, 10_000, args)
        write_dataframe(warm, topic=topic, load_id=topic, bootstrap=bootstrap, key=key_of(args))
    spark_floors(spark, args, sinks=("shaped-python",))


def spark_load(
    spark: Any, bootstrap: str, topic: str, cas: bool, args: argparse.Namespace
) -> tuple[float, str, float, dict[str, float]]:
    """(seconds, guarantee, peak worker RSS in MiB, CPU seconds by process kind: see
    `descendants_cpu`, plus `tasks`, the Python workers' own during the tasks) of one
    `write_dataframe`."""
    from trio_kafka.spark import read_manifest, write_dataframe

    async def make() -> None:
        async with open_selector(bootstrap) as selector:
            await create_topic(selector, topic, args.partitions, cas=cas)

    async def manifest() -> Any:
        async with open_selector(bootstrap) as selector:
            return await read_manifest(selector, topic)

    trio.run(make)
    frame = frame_of(spark, args.rows, args)
    started, cpu = time.perf_counter(), descendants_cpu()
    write_dataframe(frame, topic=topic, load_id=topic, bootstrap=bootstrap, key=key_of(args))
    elapsed, cpu = time.perf_counter() - started, cpu_since(cpu)
    done = trio.run(manifest)
    assert sum(done.counts.values()) == args.rows, done.counts
    peak = max(r["peak_rss_kib"] for r in done.reports) / 1024
    tasks = ", ".join(f"{r['seconds']:.1f}" for r in done.reports)
    cpu["tasks"] = sum(r.get("cpu_seconds", 0.0) for r in done.reports)
    print(f"  (seconds in each task's load_partition: {tasks})", flush=True)
    return elapsed, done.guarantee, peak, cpu


#: Spark's floors: what each sink does with the DataFrame (`spark_floors`).
FLOORS = {
    "noop": "the DataFrame into Spark's noop sink",
    "to-python": "mapInArrow: every batch to a Python worker, dropped",
    "shuffle-sort-python": "shuffled by key into PARTITIONS partitions, sorted within "
    "them, to a Python source counting rows",
    "shaped-noop": "write_dataframe's shaping into the noop sink",
    "shaped-python": "write_dataframe's shaping into a Python source counting rows",
}


def spark_floors(
    spark: Any, args: argparse.Namespace, sinks: tuple[str, ...] = tuple(FLOORS)
) -> list[tuple[str, float, dict[str, float]]]:
    """Seconds Spark alone takes for the same DataFrame (`FLOORS`): into the JVM's
    `noop` sink; through `mapInArrow` to Python workers that drop every batch; shuffled
    by key (unkeyed: by value) into `--partitions` partitions, sorted within them and
    handed to a Python data source that only counts rows; and `write_dataframe`'s own
    shaping (numbering, partitioner, shuffle, sort) into noop and into the counting
    source: what no Kafka writer on this session can beat. (sink, seconds, CPU seconds)
    of each."""
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

    def drop(batches: Any) -> Any:
        for _ in batches:
            pass
        return iter(())

    spark.dataSource.register(CountSource)
    frame = frame_of(spark, args.rows, args)
    by = "key" if args.keyed else "value"
    floors = []
    for sink in sinks:
        started, cpu = time.perf_counter(), descendants_cpu()
        if sink == "noop":
            frame.write.format("noop").mode("overwrite").save()
        elif sink == "to-python":
            frame.mapInArrow(drop, frame.schema).write.format("noop").mode("overwrite").save()
        elif sink == "shuffle-sort-python":
            shuffled = frame.repartition(args.partitions, by).sortWithinPartitions(by)
            shuffled.write.format("count-rows").mode("append").save()
        else:
            prepared = prepare_dataframe(frame, args.partitions, key=key_of(args))
            if sink == "shaped-noop":
                prepared.write.format("noop").mode("overwrite").save()
            else:
                prepared.write.format("count-rows").mode("append").save()
        floors.append((sink, time.perf_counter() - started, cpu_since(cpu)))
    return floors


def spark_runs(
    bootstrap: str, args: argparse.Namespace, shape: str
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """The Spark loads, A B B A (`--spark-rounds` times) in one warmed session, then
    Spark's floors: (rows/s of each run, peak worker RSS in MiB) by backend."""
    rates: dict[str, list[float]] = {name: [] for name, _ in backends(args)}
    # CPU seconds of each load: Spark's (JVM and Python workers) and the broker's.
    cpus: dict[str, list[float]] = {name: [] for name, _ in BACKENDS}
    peaks: dict[str, float] = {name: 0.0 for name, _ in BACKENDS}
    order = abba(backends(args), args.spark_rounds)
    if args.spark_guarantee != "both":
        order = [b for b in BACKENDS if b[0] == args.spark_guarantee] * args.spark_rounds
        rates = {args.spark_guarantee: []}
    spark = spark_session(args.spark_conf, args.master)
    try:
        warm_up(spark, bootstrap, args)
        for run, (name, cas) in enumerate(order):
            elapsed, guarantee, peak, cpu = spark_load(
                spark, bootstrap, f"spark-{name}-{run}", cas, args
            )
            assert guarantee == name, (guarantee, name)
            rates[name].append(args.rows / elapsed)
            cpus[name].append(cpu["spark"] + cpu["broker"])
            peaks[name] = max(peaks[name], peak)
            print(
                f"Spark run {run + 1}: {args.master} {name:17} {shape}: {elapsed:6.2f} s, "
                f"{args.rows / elapsed:10,.0f} rows/s, peak worker RSS {peak:5.0f} MiB\n"
                f"  CPU s: Spark (JVM + Python workers) {cpu['spark']:.2f}, of which our "
                f"tasks {cpu['tasks']:.2f}; broker {cpu['broker']:.2f}; "
                f"(sum) / 2 cores = {(cpu['spark'] + cpu['broker']) / 2:.2f} s",
                flush=True,
            )
        floors = [] if args.no_floors else spark_floors(spark, args)
        for sink, seconds, cpu in floors:
            rate = args.rows / seconds
            what = FLOORS[sink].replace("PARTITIONS", str(args.partitions))
            print(
                f"Spark floor, {what}: {seconds:.2f} s, {rate:,.0f} rows/s, CPU s "
                f"(JVM + Python workers) {cpu['spark']:.2f}",
                flush=True,
            )
            for name, runs in rates.items():
                mean, median = statistics.fmean(runs), statistics.median(runs)
                spent = statistics.median(cpus[name])
                print(
                    f"  write_dataframe {name}: {mean:,.0f} rows/s = {mean / rate:.2f}x this "
                    f"(median {median:,.0f} = {median / rate:.2f}x; by CPU s, this floor's "
                    f"{cpu['spark']:.2f} / write_dataframe's median {spent:.2f} with the "
                    f"broker's = {cpu['spark'] / spent:.2f}x)"
                )
    finally:
        spark.stop()
    return rates, peaks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--broker",
        choices=("mock", "kafka", "tansu"),
        default="mock",
        help="the broker (default: our mock broker; kafka and tansu: transactions only)",
    )
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
    parser.add_argument(
        "--spark-rounds", type=int, default=1, help="Spark loads: A B B A this many times"
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for the session (repeatable), for experiments",
    )
    parser.add_argument(
        "--spark-guarantee",
        choices=("both", *(name for name, _ in BACKENDS)),
        default="both",
        help="Spark loads of one backend only, --spark-rounds of them (default both, A B B A)",
    )
    parser.add_argument(
        "--master",
        default="local[2]",
        help="Spark master (default local[2]; e.g. local-cluster[2,1,1024])",
    )
    parser.add_argument(
        "--no-floors", action="store_true", help="no Spark floors (noop, counting) after loads"
    )
    args = parser.parse_args()
    if args.broker != "mock" and args.spark_guarantee == "exactly_once_cas":
        parser.error(f"--broker {args.broker} has no expected-offset check: CAS runs on mock")
    if any("=" not in setting for setting in args.spark_conf):
        parser.error("--spark-conf takes KEY=VALUE")
    if min(args.rounds, args.spark_rounds, args.rows, args.keys) < 1:
        parser.error("--rounds, --spark-rounds, --rows and --keys must be at least 1")
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
    order = abba(backends(args), args.rounds)
    if args.no_bulk:
        order = []
    spark_rates: dict[str, list[float]] = {}
    spark_peaks: dict[str, float] = {}
    times: dict[str, list[float]] = {name: [] for name, _ in BACKENDS}
    # CPU seconds of the loader's process (the broker runs in its own).
    cpus: dict[str, list[float]] = {name: [] for name, _ in BACKENDS}
    # A shared machine can take long to start a process.
    with broker(args.broker) as bootstrap:
        for run, (name, cas) in enumerate(order):
            others = descendants_cpu()
            elapsed, cpu, guarantee = trio.run(
                load, bootstrap, f"load-{name}-{run}", cas, rows, args.partitions
            )
            broker_cpu = cpu_since(others)["broker"]
            assert guarantee == name, (guarantee, name)
            times[name].append(elapsed)
            cpus[name].append(cpu)
            print(
                f"run {run + 1}: BulkLoader {name:17} {shape}: {elapsed:6.2f} s, "
                f"{args.rows / elapsed:10,.0f} rows/s, loader CPU {cpu:5.2f} s, "
                f"broker CPU {broker_cpu:5.2f} s",
                flush=True,
            )
        del rows, values
        if not args.no_spark:
            spark_rates, spark_peaks = spark_runs(bootstrap, args, shape)
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
        cpu = statistics.fmean(cpus["exactly_once_cas"]) / statistics.fmean(cpus["transactional"])
        print(
            f"loader CPU seconds, CAS / transactional: {cpu:.2f}x (steadier than the times "
            "on a shared machine: the loader is the bottleneck of both)"
        )
    for name, rates in spark_rates.items():
        rate = statistics.fmean(rates)
        print(
            f"Spark {args.master} {name}: {rate:,.0f} rows/s (mean of {len(rates)}), "
            f"peak worker RSS {spark_peaks[name]:.0f} MiB"
            + (
                f", {rate / (args.rows / means[name]):.2f}x BulkLoader (goal >= 0.5)"
                if name in means
                else ""
            )
        )


if __name__ == "__main__":
    main()
