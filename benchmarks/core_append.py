"""Appends per second into the sans-IO producer core (no I/O, no trio), run by hand:

    .venv/bin/python benchmarks/core_append.py [records]

Measures `core.append` (one call per record) and `core.append_many` (one call per
chunk) for 100-byte unkeyed values, plus keyed appends, and the cost of draining and
encoding the resulting batches (what the sender pays later, once per batch).
"""

from __future__ import annotations

import random
import sys
import time

from trio_kafka.core import ClusterView, ProducerConfig, ProducerCore
from trio_kafka.core._core import PartitionResponse

VALUE = b"v" * 100


def make_core() -> ProducerCore:
    config = ProducerConfig(buffer_memory=1 << 40, linger=0.005, batch_size=16384)
    core = ProducerCore(
        config, random.Random(1), cluster=ClusterView.from_leaders({"t": [0, 1, 2] * 4})
    )
    core.set_producer_id(1, 0, 0.0)
    return core


def bench_append(n: int) -> float:
    core = make_core()
    append = core.append
    value = VALUE
    start = time.perf_counter()
    for _ in range(n):
        append("t", value, None, None, None, None, 0.0)
    return n / (time.perf_counter() - start)


def bench_append_keyword(n: int) -> float:
    core = make_core()
    append = core.append
    value = VALUE
    start = time.perf_counter()
    for _ in range(n):
        append("t", value, now=0.0)
    return n / (time.perf_counter() - start)


def bench_append_keyed(n: int) -> float:
    core = make_core()
    append = core.append
    keys = [b"key-%d" % i for i in range(1000)]
    value = VALUE
    start = time.perf_counter()
    for i in range(n):
        append("t", value, keys[i % 1000], None, None, None, 0.0)
    return n / (time.perf_counter() - start)


def bench_append_many(n: int, chunk: int = 10_000) -> float:
    core = make_core()
    values = [VALUE] * chunk
    start = time.perf_counter()
    for _ in range(n // chunk):
        core.append_many("t", values, 0.0)
    return (n // chunk) * chunk / (time.perf_counter() - start)


def bench_drain_encode(n: int) -> float:
    core = make_core()
    for _ in range(n):
        core.append("t", VALUE, None, None, None, None, 0.0)
    start = time.perf_counter()
    now = 1.0
    done = 0
    while core.accumulator.has_undrained:
        nodes = core.ready(now).ready_nodes
        for node, batches in core.drain(now, nodes).items():
            core.produce_data(batches)
            answers = {(b.topic, b.partition): PartitionResponse(base_offset=0) for b in batches}
            core.handle_response(node, batches, answers, now)
            done += sum(len(b.records) for b in batches)
    return done / (time.perf_counter() - start)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    for name, fn in [
        ("append (positional)", bench_append),
        ("append (keywords)", bench_append_keyword),
        ("append keyed (murmur2)", bench_append_keyed),
        ("append_many", bench_append_many),
        ("drain+encode+ack", bench_drain_encode),
    ]:
        best = max(fn(n) for _ in range(3))
        print(f"{name:26s} {best:>12,.0f} records/s")


if __name__ == "__main__":
    main()
