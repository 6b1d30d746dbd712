"""Appends/s and latency of one ConditionalWriter used as a commit log, by how many
tasks append on it at once (issue 35), run by hand:

    .venv/bin/python benchmarks/commit_log.py --appends 2000 --repeat 3

For each backend, `--appends` appends are split among 1, then 16 tasks (`--appenders`)
appending on one writer; each round reports appends/s and p50/p99 latency of one
append, the best round's throughput is kept, and the ratio to one appender printed.
Backends (`--backends`): "cas" (CAS on the mock broker, a `trio-kafka broker`
process), "txn-mock" (the transactional writer on the same mock broker), "txn-kafka"
(the transactional writer on Apache Kafka 4.4, `kafka_broker()`; needs the jars in
.cache/kafka/jars). Numbers on a shared machine are ratios, not absolutes.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Iterator

import trio

from trio_kafka.client import create_topic, open_conditional_writer
from trio_kafka.net import open_selector
from trio_kafka.testing import mock_broker_process

VALUE = b"e" * 100
OPTIONS: dict[str, object] = {}


@contextlib.contextmanager
def broker(backend: str) -> Iterator[str]:
    if backend == "txn-kafka":
        from trio_kafka.testing import kafka_broker

        with kafka_broker() as node:
            yield node.bootstrap
    else:
        with mock_broker_process() as bootstrap:
            yield bootstrap


async def one_round(
    bootstrap: str, topic: str, guarantee: str, appends: int, appenders: int
) -> tuple[float, list[float]]:
    """appends/s, and each append's latency (s)."""
    latencies: list[float] = []
    async with open_conditional_writer(
        topic, 0, bootstrap=bootstrap, guarantee=guarantee, **OPTIONS
    ) as log:
        async for _ in log.read_to_end(start=None):
            pass
        per_task = appends // appenders

        async def appender() -> None:
            for _ in range(per_task):
                began = time.perf_counter()
                await log.append(VALUE)
                latencies.append(time.perf_counter() - began)

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(appenders):
                nursery.start_soon(appender)
        elapsed = time.perf_counter() - start
    return per_task * appenders / elapsed, latencies


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


async def bench(backend: str, bootstrap: str, args: argparse.Namespace) -> None:
    cas = backend == "cas"
    guarantee = "exactly_once_cas" if cas else "transactional"
    best: dict[int, float] = {}
    for appenders in args.appenders:
        for r in range(args.repeat):
            topic = f"log-{appenders}-{r}"
            async with open_selector(bootstrap) as selector:
                await create_topic(selector, topic, 1, cas=cas, replication_factor=1)
            rate, latencies = await one_round(bootstrap, topic, guarantee, args.appends, appenders)
            best[appenders] = max(best.get(appenders, 0.0), rate)
            print(
                f"{backend:10} appenders={appenders:3} round={r} {rate:9.0f} appends/s "
                f"p50={statistics.median(latencies) * 1e3:7.2f} ms "
                f"p99={percentile(latencies, 0.99) * 1e3:7.2f} ms",
                flush=True,
            )
    one = best.get(1)
    for appenders, rate in sorted(best.items()):
        ratio = f" ({rate / one:.1f}x one appender)" if one else ""
        print(f"{backend:10} appenders={appenders:3} best {rate:9.0f} appends/s{ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--appenders", type=lambda s: [int(n) for n in s.split(",")], default=[1, 16]
    )
    parser.add_argument(
        "--backends", type=lambda s: s.split(","), default=["cas", "txn-mock", "txn-kafka"]
    )
    parser.add_argument("--max-in-flight", type=int, default=None)
    args = parser.parse_args()
    if args.max_in_flight is not None:
        OPTIONS["max_in_flight"] = args.max_in_flight
    for backend in args.backends:
        with broker(backend) as bootstrap:
            trio.run(bench, backend, bootstrap, args)


if __name__ == "__main__":
    main()
