"""A task's memory does not grow with its partition: the rows stream through.

The task half (`write_partitions`) is fed Arrow batches from a generator, as Spark feeds
it, against a mock broker in a process of its own (its log would otherwise count);
`tracemalloc` measures the peak of what this process allocates in Python (the rows
as Python objects, as the old task held them; Arrow's own buffers are not traced). Three times the rows must
not raise the peak by more than a quarter: before issue 12 the task collected its whole
partition into lists (233 MiB at 1,000,000 rows, 416 MiB at 4,000,000). Rows of 1,000 B,
so that the transactional producer's buffer (32 MiB, where its backpressure starts) is
full at both sizes: that buffer is the transactional task's bound, the CAS window of 5
batches the CAS task's. Batches of 64 KiB: above the size from which a Produce request
keeps a batch as a frame part of its own (protocol `GATHER_MIN`, 32 KiB), as real loads
do. The cyclic garbage collector is off while it runs: a reference cycle through those
frame parts (protocol `Gather`) kept every sent batch alive until a full collection,
which in a Spark worker (pyspark, pandas and pyarrow loaded) is rare, so the worker's
RSS grew with its rows; with the collector on, this test did not see it (with it off,
the cycle made the peak 124 MB at 120,000 rows against 43 MB at 40,000).
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from trio_kafka.client import create_topic, open_selector
from trio_kafka.spark._options import LoadOptions
from trio_kafka.spark._task import write_partitions
from trio_kafka.testing import mock_broker_process

pa = pytest.importorskip("pyarrow")

BATCH = 1_000


def _batches(rows: int) -> Iterator[Any]:
    for start in range(0, rows, BATCH):
        numbers = list(range(start, min(start + BATCH, rows)))
        yield pa.RecordBatch.from_pydict(
            {
                "partition": pa.array([0] * len(numbers), pa.int32()),
                "row": pa.array(numbers, pa.int64()),
                "key": pa.array([None] * len(numbers), pa.binary()),
                "value": pa.array([b"%01000d" % n for n in numbers], pa.binary()),
            }
        )


def _peak(bootstrap: str, topic: str, rows: int, guarantee: str) -> int:
    async def make() -> None:
        async with open_selector(bootstrap) as selector:
            await create_topic(selector, topic, 1, cas=guarantee == "exactly_once_cas")

    trio.run(make)
    options = LoadOptions(bootstrap=bootstrap, topic=topic, load_id=topic, batch_bytes=64 * 1024)
    # With the cyclic collector off, as in a process whose full collections are rare
    # (a Spark worker with pyspark, pandas and pyarrow loaded): what a sent batch
    # leaves behind must go by reference counting alone.
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        reports = trio.run(write_partitions, options, guarantee, _batches(rows), 0, 0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        if collecting:
            gc.enable()
    assert [r.loaded for r in reports] == [rows]
    return peak


@pytest.mark.parametrize("guarantee", ["exactly_once_cas", "transactional"])
def test_a_tasks_peak_memory_does_not_grow_with_its_partition(guarantee: str) -> None:
    with mock_broker_process() as bootstrap:
        _peak(bootstrap, "warm", 1_000, guarantee)  # one-time tables (varint caches...)
        small = _peak(bootstrap, "small", 40_000, guarantee)
        large = _peak(bootstrap, "large", 120_000, guarantee)
    assert large < 1.25 * small, f"peak {small:,} B for 40,000 rows, {large:,} B for 120,000"
