"""The commit-log writer as a service uses it: appends a second and their latency, one
appender and many concurrent appenders on one `ConditionalWriter`, in one run.

Two backends, each on the broker where a user meets it:

- **CAS** (`guarantee="exactly_once_cas"`) on our mock broker in its own process
  (`trio-kafka broker`), a topic with `expected.offset.check.enable=true`; concurrent
  appends are pipelined (consecutive expected offsets, sharing batches);
- **transactions** (`guarantee="transactional"`) on an Apache Kafka 4.4 node (KRaft, the
  jars of `make kafka`), where concurrent appends are committed in groups (one
  transaction for the appends made while the one before was committing);
- and, for comparison, **txn-mock**: the transactional writer on the mock broker.

`--max-in-flight` sets the writer's own producer's requests in flight (default: the
writer's, 1, so that appends made while a request is out share the next batch);
`--max-group` and `--group-linger` bound a transactional writer's group commit.

Each case opens a fresh writer on a fresh one-partition topic, reads it to its end, then
times N appends of SIZE bytes made by A tasks at once (A = 1 and 16), each append awaited
by its task: the window ends when every append has returned. An append that raises is
counted as an error (and its task reads the log to its end before going on, as the docs'
loop does). Latency is each append call's own time. Each run also prints the Produce
requests the writer's producer sent per 1,000 appends (how many appends shared a
request), this process's CPU time per append, and the broker's (its process's, read
from /proc: on Linux only).
Runs alternate, REPEAT times; the table shows medians, p50 and p99 over all runs'
appends, and appends/s with A tasks over appends/s with one.

    .venv/bin/python benchmarks/commit_log.py [--appends N] [--size BYTES] [--repeat R]
        [--appenders 1,16] [--backends cas,transactional,txn-mock] [--max-in-flight N]
        [--max-group N] [--group-linger SECONDS] [--kafka-property KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import trio

from trio_kafka.client import create_topic, open_conditional_writer
from trio_kafka.errors import KafkaError
from trio_kafka.net import open_selector
from trio_kafka.testing import kafka_broker, mock_broker_process

BACKENDS = {
    "cas": ("exactly_once_cas", "mock broker"),
    "transactional": ("transactional", "Apache Kafka 4.4"),
    "txn-mock": ("transactional", "mock broker"),
}


@contextlib.contextmanager
def broker_for(backend: str, kafka_properties: dict[str, str] | None = None) -> Iterator[str]:
    if BACKENDS[backend][1] == "mock broker":
        with mock_broker_process(1) as bootstrap:
            yield bootstrap
    else:
        with kafka_broker(log_level="WARN", heap="1g", server_properties=kafka_properties) as node:
            yield node.bootstrap


def broker_cpu() -> float | None:
    """CPU seconds used so far by this process's child processes (the broker: the mock
    broker's process, or the Kafka node's JVM), from /proc; None where there is none."""
    try:
        children = [
            child
            for task in os.listdir("/proc/self/task")
            for child in Path(f"/proc/self/task/{task}/children").read_text().split()
        ]
        total = 0
        for child in children:
            fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (clock ticks)
    except OSError:
        return None
    return total / os.sysconf("SC_CLK_TCK")


async def one_run(
    bootstrap: str,
    backend: str,
    topic: str,
    appends: int,
    size: int,
    appenders: int,
    options: dict[str, Any],
) -> dict[str, Any]:
    guarantee = BACKENDS[backend][0]
    async with open_selector(bootstrap) as selector:
        await create_topic(selector, topic, 1, cas=backend == "cas")
    latencies: list[float] = []
    errors = 0
    value = b"x" * size
    async with open_conditional_writer(
        topic, bootstrap=bootstrap, guarantee=guarantee, **options
    ) as writer:
        async for _ in writer.read_to_end():
            pass
        share = [
            appends // appenders + (1 if i < appends % appenders else 0) for i in range(appenders)
        ]

        async def appender(count: int) -> None:
            nonlocal errors
            for _ in range(count):
                started = time.perf_counter()
                try:
                    await writer.append(value)
                except KafkaError:
                    errors += 1
                    with contextlib.suppress(KafkaError):
                        async for _ in writer.read_to_end():
                            pass
                latencies.append(time.perf_counter() - started)

        requests_before = writer.producer.metrics().requests_sent
        broker_before = broker_cpu()
        started, cpu = time.perf_counter(), time.process_time()
        async with trio.open_nursery() as nursery:
            for count in share:
                nursery.start_soon(appender, count)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        broker_after = broker_cpu()
        requests = writer.producer.metrics().requests_sent - requests_before
    return {
        "seconds": elapsed,
        "latencies": latencies,
        "errors": errors,
        "requests": requests,
        "cpu": cpu,
        "broker_cpu": None
        if broker_before is None or broker_after is None
        else broker_after - broker_before,
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--appenders", default="1,16")
    parser.add_argument("--backends", default="cas,transactional")
    parser.add_argument("--max-in-flight", type=int, default=None)
    parser.add_argument("--max-group", type=int, default=None)
    parser.add_argument("--group-linger", type=float, default=None)
    parser.add_argument(
        "--kafka-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker setting for the Kafka node (repeatable), e.g. "
        "add.partitions.to.txn.retry.backoff.ms=2",
    )
    args = parser.parse_args()
    options: dict[str, Any] = {
        name: value
        for name, value in (
            ("max_in_flight", args.max_in_flight),
            ("max_group", args.max_group),
            ("group_linger", args.group_linger),
        )
        if value is not None
    }
    kafka_properties = dict(item.split("=", 1) for item in args.kafka_property)
    appenders = [int(a) for a in args.appenders.split(",")]
    backends = [b.strip() for b in args.backends.split(",")]
    results: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for backend in backends:
        with broker_for(backend, kafka_properties) as bootstrap:
            for run in range(args.repeat):
                for a in appenders:
                    topic = f"log-{backend}-{a}-{run}"
                    result = trio.run(
                        one_run, bootstrap, backend, topic, args.appends, args.size, a, options
                    )
                    results.setdefault((backend, a), []).append(result)
                    rate = args.appends / result["seconds"]
                    lat = result["latencies"]
                    broker = result["broker_cpu"]
                    print(
                        f"{backend} appenders={a} run={run}: {rate:,.0f} appends/s, "
                        f"p50 {1000 * percentile(lat, 0.5):.2f} ms, "
                        f"p99 {1000 * percentile(lat, 0.99):.2f} ms, {result['errors']} errors, "
                        f"{1000 * result['requests'] / args.appends:,.0f} Produce requests "
                        f"per 1,000 appends, client CPU {1e6 * result['cpu'] / args.appends:.0f} "
                        "us per append"
                        + (
                            ""
                            if broker is None
                            else f", broker CPU {1e6 * broker / args.appends:.0f} us per append"
                        ),
                        flush=True,
                    )
    print()
    print(
        f"Commit-log writer: {args.appends:,} appends of {args.size} B, median of "
        f"{args.repeat} runs" + (f", writer options {options}" if options else "")
    )
    print()
    print(
        "| backend | broker | appenders | appends/s | p50 ms | p99 ms | errors | "
        "Produce requests / 1,000 appends | client CPU us / append | broker CPU us / append | "
        "appends/s / one appender's |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for backend in backends:
        base = None
        for a in appenders:
            runs = results[(backend, a)]
            rate = statistics.median(args.appends / r["seconds"] for r in runs)
            base = base or rate
            lat = [x for r in runs for x in r["latencies"]]
            errors = sum(r["errors"] for r in runs)
            requests = statistics.median(1000 * r["requests"] / args.appends for r in runs)
            client = statistics.median(1e6 * r["cpu"] / args.appends for r in runs)
            brokers = [r["broker_cpu"] for r in runs if r["broker_cpu"] is not None]
            broker = (
                f"{statistics.median(1e6 * b / args.appends for b in brokers):.0f}"
                if brokers
                else "-"
            )
            print(
                f"| {backend} | {BACKENDS[backend][1]} | {a} | {rate:,.0f} | "
                f"{1000 * percentile(lat, 0.5):.2f} | {1000 * percentile(lat, 0.99):.2f} | "
                f"{errors} | {requests:,.0f} | {client:.0f} | {broker} | {rate / base:.2f}x |"
            )


if __name__ == "__main__":
    main()
