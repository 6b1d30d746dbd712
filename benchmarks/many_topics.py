"""A producer writing to many topics: trio-kafka beside confluent-kafka and aiokafka,
against Tansu (and, with `--broker mock`, our mock broker in a process of its own), each
at its defaults.

What a user of many topics meets (aiokafka#943: `send()` 10x slower at 5,000 topics):
the timed window is the producer's creation, a first record to each of `--topics`
topics of one partition (each first send has to learn its topic's metadata), then
`--records` records of 100 bytes round robin over the topics, every record's outcome
observed (as in benchmarks/produce.py: handles awaited, delivery callbacks counted,
futures awaited), and the close. A run counts only if every record is acknowledged.

Each run is its own subprocess against its own fresh broker, with the topics created
before the timer starts; the variants run round robin, `--rounds` times; the table
shows medians of the wall clock and of the client process's CPU seconds, and the
ratios trio-kafka / peer (above 1: trio-kafka faster).

The two brokers sit at two ends: Tansu answers an idempotent batch slowly (about 1 ms),
so records pile up into big batches while requests are out; the mock broker answers at
once, so at 1,000 partitions a batch holds a record or two and what each client spends
per batch is what counts. `--settings equal` runs the peers idempotent, as trio-kafka
is at its defaults (confluent-kafka `enable.idempotence=true`, aiokafka
`enable_idempotence=True`).

`--partitions P` gives each topic P partitions, and `--keys K` keys record i with
`key-{i % K}` (each client's default partitioner, murmur2 for all three, puts it), so
`--topics 1 --partitions 12 --keys 5000` is the commonest producer there is: keyed
records to one topic.

    .venv/bin/python benchmarks/many_topics.py [--topics N] [--partitions P] [--keys K]
        [--records N] [--rounds N] [--clients a,b] [--settings defaults,equal]
        [--broker tansu,mock] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import statistics
import time
from typing import Any

from produce import _run_child, count_acknowledged  # benchmarks/ is the script's directory

VALUE = b"x" * 100
CLIENT_MODULES = {
    "trio-kafka": ("trio", "trio_kafka.client"),
    "confluent-kafka": ("confluent_kafka",),
    "aiokafka": ("aiokafka",),
}


def _create_topics(bootstrap: str, names: list[str], partitions: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for start in range(0, len(names), 500):
        futures = admin.create_topics(
            [
                NewTopic(name, num_partitions=partitions, replication_factor=1)
                for name in names[start : start + 500]
            ]
        )
        for future in futures.values():
            future.result(timeout=60)


def _order(names: list[str], records: int) -> list[str]:
    """Each topic once (its first send), then `records` round robin."""
    return names + [names[i % len(names)] for i in range(records)]


def _keys(count: int, keys: int) -> list[bytes | None]:
    """Record i's key: `key-{i % keys}`, or None for every record (`keys` 0)."""
    return [b"key-%d" % (i % keys) if keys else None for i in range(count)]


def run_trio_kafka(bootstrap: str, sent: list[tuple[str, bytes | None]], equal: bool) -> int:
    import trio

    from trio_kafka.client import open_producer

    async def main() -> int:
        async with open_producer(bootstrap) as producer:
            send = producer.send
            handles = [await send(topic, VALUE, key=key) for topic, key in sent]
            acked = await count_acknowledged(handles)
        return acked

    return trio.run(main)


def run_confluent(bootstrap: str, sent: list[tuple[str, bytes | None]], equal: bool) -> int:
    from confluent_kafka import Producer

    config: dict[str, Any] = {"bootstrap.servers": bootstrap}
    if equal:
        config["enable.idempotence"] = True
    producer = Producer(config)
    acked = 0

    def on_delivery(err: Any, msg: Any) -> None:
        nonlocal acked
        if err is None:
            acked += 1

    produce, poll = producer.produce, producer.poll
    for topic, key in sent:
        while True:
            try:
                produce(topic, VALUE, key=key, on_delivery=on_delivery)
                break
            except BufferError:
                poll(0.01)
        poll(0)
    producer.flush(600)
    return acked


def run_aiokafka(bootstrap: str, sent: list[tuple[str, bytes | None]], equal: bool) -> int:
    from aiokafka import AIOKafkaProducer

    async def main() -> int:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=equal)
        await producer.start()
        try:
            futures = [await producer.send(topic, VALUE, key=key) for topic, key in sent]
            acked = await count_acknowledged(futures)
        finally:
            await producer.stop()
        return acked

    return asyncio.run(main())


CLIENTS = {
    "trio-kafka": run_trio_kafka,
    "confluent-kafka": run_confluent,
    "aiokafka": run_aiokafka,
}


def child(spec: dict[str, Any]) -> None:
    from trio_kafka.testing import mock_broker_process, tansu_broker

    for module in CLIENT_MODULES[spec["client"]]:
        importlib.import_module(module)
    names = [f"topic-{i:05d}" for i in range(spec["topics"])]
    with contextlib.ExitStack() as stack:
        if spec["broker"] == "mock":
            bootstrap = stack.enter_context(mock_broker_process())
        else:
            bootstrap = stack.enter_context(tansu_broker()).bootstrap
        _create_topics(bootstrap, names, spec["partitions"])
        # What to send, (topic, key) per record, made before the clock starts.
        order = _order(names, spec["records"])
        sent = list(zip(order, _keys(len(order), spec["keys"]), strict=True))
        cpu = time.process_time()
        start = time.perf_counter()
        acked = CLIENTS[spec["client"]](bootstrap, sent, spec["settings"] == "equal")
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu
    print(json.dumps({**spec, "acked": acked, "seconds": elapsed, "cpu": cpu}))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=1, help="partitions per topic")
    parser.add_argument("--keys", type=int, default=0, help="distinct keys (0: no keys)")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--settings", default="defaults", help="defaults, equal, or both")
    parser.add_argument("--broker", default="tansu", help="tansu, mock (its own process), or both")
    parser.add_argument("--json", help="write every run's result to this file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    if args.topics < 1 or args.partitions < 1 or args.keys < 0 or args.records < 0:
        parser.error("--topics and --partitions must be at least 1, --keys and --records 0 or more")
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = sorted(set(clients) - set(CLIENTS))
    if unknown:
        parser.error(f"unknown clients {unknown}: choose from {', '.join(CLIENTS)}")
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    if not settings or set(settings) - {"defaults", "equal"}:
        parser.error(f"--settings {args.settings!r}: give defaults, equal, or both")
    brokers = [b.strip() for b in args.broker.split(",") if b.strip()]
    if not brokers or set(brokers) - {"tansu", "mock"}:
        parser.error(f"--broker {args.broker!r}: give tansu, mock, or both")
    for broker in brokers:
        for setting in settings:
            _compare(args, clients, setting, broker)


def _compare(args: argparse.Namespace, clients: list[str], setting: str, broker: str) -> None:
    total = args.topics + args.records
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in clients}
    for round_ in range(args.rounds):
        for client in clients:
            spec = {
                "client": client,
                "topics": args.topics,
                "partitions": args.partitions,
                "keys": args.keys,
                "records": args.records,
                "settings": setting,
                "broker": broker,
            }
            result = _run_child(spec, script=__file__, timeout=1800)
            runs[client].append(result)
            status = result.get("error") or (
                f"{result['seconds']:.2f} s, cpu {result['cpu']:.2f} s, "
                f"{result['acked']:,}/{total:,} acknowledged"
            )
            print(f"round {round_ + 1} {client} ({setting}, {broker}): {status}", flush=True)
    if args.json:
        with open(args.json.replace(".json", f"-{broker}-{setting}.json"), "w") as f:
            json.dump(runs, f, indent=1)

    def medians(client: str) -> tuple[float, float] | None:
        done = [r for r in runs[client] if "error" not in r and r["acked"] == total]
        if len(done) != len(runs[client]) or not done:
            return None
        return (
            statistics.median(r["seconds"] for r in done),
            statistics.median(r["cpu"] for r in done),
        )

    keyed = f"keyed ({args.keys:,} keys) " if args.keys else ""
    print(
        f"\n{args.topics:,} topic(s) of {args.partitions} partition(s): a first record to "
        f"each, then {args.records:,} {keyed}of 100 B round robin, "
        + ("at each client's defaults" if setting == "defaults" else "every client idempotent")
        + (", against Tansu" if broker == "tansu" else ", against the mock broker")
        + f" (medians of {args.rounds})"
    )
    ours = medians("trio-kafka") if "trio-kafka" in runs else None
    print(f"{'client':<16} {'records/s':>12} {'wall s':>8} {'cpu s':>8} {'trio-kafka / it':>16}")
    for client in clients:
        found = medians(client)
        if found is None:
            failed = [str(r.get("error") or f"{r['acked']:,} acknowledged") for r in runs[client]]
            print(f"{client:<16} {'incomplete':>12}  ({failed[0].splitlines()[-1][:100]})")
            continue
        seconds, cpu = found
        ratio = f"{seconds / ours[0]:.2f}x" if ours is not None and client != "trio-kafka" else ""
        print(f"{client:<16} {total / seconds:>12,.0f} {seconds:>8.2f} {cpu:>8.2f} {ratio:>16}")


if __name__ == "__main__":
    main()
