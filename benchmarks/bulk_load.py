"""Bulk-load speed: `BulkLoader` (CAS, exactly once, resumable) beside plain `send_many`
(idempotent, no CAS), against the mock broker, in one run.

The mock broker runs in its own subprocess (`trio-kafka broker`), so it does not share
the loader's interpreter. Each measurement writes N records of SIZE bytes to a fresh
one-partition topic (CAS on for the loader, off for send_many) and counts until every
record is acknowledged. Runs alternate, REPEAT times each; the best and the median are
shown, and the ratio BulkLoader / send_many (1.0 = as fast; the aim is >= 0.9).

    .venv/bin/python benchmarks/bulk_load.py [--records N] [--size BYTES] [--repeat R]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import trio

from trio_kafka.client import BulkLoader, create_topic, open_producer
from trio_kafka.net import open_selector
from trio_kafka.testing import mock_broker_process


async def bulk_loader(bootstrap: str, topic: str, values: list[bytes]) -> float:
    async with open_selector(bootstrap) as selector:
        await create_topic(selector, topic, 1, cas=True)
        loader = BulkLoader(selector, topic, "bench")
        started = time.perf_counter()
        result = await loader.run(values)
        elapsed = time.perf_counter() - started
    assert result.loaded == len(values), result
    return elapsed


def send_many(batch_size: int | None) -> Callable[[str, str, list[bytes]], object]:
    """`send_many` of every value, then the delivery awaited; `batch_size` None: the
    producer's default."""
    options = {} if batch_size is None else {"batch_size": batch_size}

    async def run(bootstrap: str, topic: str, values: list[bytes]) -> float:
        async with open_selector(bootstrap) as selector:
            await create_topic(selector, topic, 1, cas=False)
            async with open_producer(selector=selector, **options) as producer:
                started = time.perf_counter()
                delivery = await producer.send_many(values, topic=topic)
                acknowledged = await delivery
                elapsed = time.perf_counter() - started
        assert acknowledged == len(values)
        return elapsed

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    values = [(b"%010d" % i).ljust(args.size, b"x") for i in range(args.records)]
    contenders = {
        "BulkLoader (CAS, 512 KiB batches)": bulk_loader,
        "send_many (no CAS, 512 KiB batches)": send_many(512 * 1024),
        "send_many (no CAS, the default batch_size)": send_many(None),
    }
    times: dict[str, list[float]] = {name: [] for name in contenders}
    with mock_broker_process() as bootstrap:
        for round_ in range(args.repeat):
            for index, (name, fn) in enumerate(contenders.items()):
                topic = f"bench-{round_}-{index}"
                times[name].append(trio.run(fn, bootstrap, topic, values))  # type: ignore[arg-type]
    print(f"{args.records} records of {args.size} bytes, 1 partition, mock broker in a subprocess")
    print(f"{'':44} {'best rec/s':>12} {'median rec/s':>13} {'MB/s':>7}")
    rates: dict[str, float] = {}
    for name, samples in times.items():
        best = args.records / min(samples)
        median = args.records / statistics.median(samples)
        rates[name] = median
        print(f"{name:44} {best:12,.0f} {median:13,.0f} {median * args.size / 1e6:7.1f}")
    loader = rates["BulkLoader (CAS, 512 KiB batches)"]
    for name in list(rates)[1:]:
        print(f"ratio BulkLoader / {name}: {loader / rates[name]:.2f} (median)")


if __name__ == "__main__":
    main()
