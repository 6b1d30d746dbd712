"""A Spark task's half of a load: its Arrow batches streamed into the load pipeline.

Theory of operation
-------------------
The task's input has the columns `partition` (the Kafka partition), `row` (the row's
number in the whole input, the one `BulkLoader` would give it), `key` and `value`,
sorted by `row` (`write_dataframe` arranges it). Each Arrow batch is split by Kafka
partition (a single-partition batch, the usual case, is not copied) and handed, as a
`RowChunk`, to that partition's `load_partition` (client/_bulk.py) through a
one-slot channel: the task holds one Arrow batch per partition plus the pipeline's
window, however many rows the partition has. The next batch is pulled from Spark in a
worker thread, so the load's I/O goes on while Spark decodes it.

`load_partition` checks each row's partition by the one rule and that rows increase,
resumes from the partition's last checkpoint, and writes with the load's guarantee:
CAS batches, or one transaction per attempt (`trio-kafka-<load>-<partition>-<attempt>`)
left open for the driver (`PartitionReport.transaction`).
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import attrs
import trio

from trio_kafka.client import (
    BulkLoader,
    HandedOffTransaction,
    RowChunk,
    group_leaves,
    load_partition,
    open_selector,
)
from trio_kafka.errors import ConfigError
from trio_kafka.spark._options import NAME

if TYPE_CHECKING:
    from trio_kafka.spark._options import LoadOptions


class InjectedFailure(RuntimeError):
    """A test-only failure (the `fail` option): the attempt stops here on purpose."""


@attrs.frozen
class FailurePlan:
    """Test-only: make attempt `attempt` of the task writing `partition` fail once
    `after` rows are acknowledged (CAS) or appended (transactions), by raising
    (`how="raise"`) or by killing the Python worker with batches in flight
    (`how="exit"`)."""

    partition: int
    attempt: int = 0
    after: int = 0
    how: str = "raise"

    @classmethod
    def parse(cls, text: str | None) -> tuple[FailurePlan, ...]:
        """`"partition=1,attempt=0,after=1000,how=exit; partition=3,after=10"`."""
        plans = []
        for part in (text or "").split(";"):
            if not part.strip():
                continue
            fields: dict[str, Any] = {}
            for item in part.split(","):
                name, _, value = item.strip().partition("=")
                fields[name.strip()] = value.strip() if name.strip() == "how" else int(value)
            if fields.get("how", "raise") not in ("raise", "exit"):
                raise ValueError(f"fail: how must be raise or exit, not {fields['how']!r}")
            plans.append(cls(**fields))
        return tuple(plans)


@attrs.frozen
class PartitionReport:
    """What one attempt did in one Kafka partition (part of a Spark commit message)."""

    partition: int
    #: The attempt (Spark's attempt number) and the Spark partition (task) that wrote it.
    attempt: int
    task: int
    #: Rows of the partition this attempt was given; written by it; found loaded.
    count: int
    loaded: int
    skipped: int
    #: The partition's last row (-1: none given).
    last_row: int
    #: Transactional: the open transaction the driver ends (None: nothing written).
    transaction: HandedOffTransaction | None = None
    #: The Python worker's peak resident memory so far (ru_maxrss, KiB).
    peak_rss_kib: int = 0
    #: Seconds from the partition's first chunk to its end (hand-off included).
    seconds: float = 0.0
    #: The Python worker's CPU seconds meanwhile (all its threads: Arrow reads too).
    cpu_seconds: float = 0.0


def transactional_id(load_id: str, partition: int, attempt: int) -> str:
    """The transactional id of one attempt at one partition of a transactional load."""
    return f"trio-kafka-{load_id}-{partition}-{attempt}"


def _binary(column: Any) -> list[bytes | None]:
    import pyarrow as pa  # type: ignore[import-untyped]

    if not (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
        column = column.cast(pa.binary())
    values: list[bytes | None] = column.to_pylist()
    return values


def chunks_of(batch: Any, partitions: int | None = None) -> Iterator[tuple[int, RowChunk]]:
    """(Kafka partition, its rows) of one Arrow batch, in row order. With `partitions`
    (the topic's count), every row's `partition` is checked here against the one rule,
    vectorized over the Arrow columns (spark/_arrow.py), and the chunks say so
    (`RowChunk.routed`: `load_partition` then only checks that rows increase)."""
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    names = batch.schema.names
    for column in ("partition", "row", "value"):
        if column not in names:
            raise ConfigError(
                f"the {NAME} data source needs the columns partition, row, key, value "
                f"(got {names}); use trio_kafka.spark.write_dataframe(), which adds them"
            )
    if batch.num_rows == 0:
        return
    parts = batch.column("partition")
    if partitions is not None:
        _check_routing(batch, partitions)
    bounds = pc.min_max(parts)
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    groups = [(low, batch)] if low == high else []
    if not groups:
        for partition in sorted(pc.unique(parts).to_pylist()):
            groups.append((partition, batch.filter(pc.equal(parts, partition))))
    for partition, rows in groups:
        keys = rows.column("key") if "key" in names else None
        yield (
            int(partition),
            RowChunk(
                rows.column("row").to_numpy().tolist(),
                None if keys is None or keys.null_count == len(keys) else _binary(keys),
                _binary(rows.column("value")),
                routed=partitions is not None,
            ),
        )


def _check_routing(batch: Any, partitions: int) -> None:
    """Every row's `partition` is its partition by the one rule (murmur2 of the key,
    else row % partitions): what `load_partition` checks row by row, at C speed."""
    import numpy as np

    from trio_kafka.spark._arrow import partitions_of

    keys = batch.column("key") if "key" in batch.schema.names else None
    rows = batch.column("row").to_numpy()
    want = partitions_of(rows, keys, partitions)
    given = batch.column("partition").to_numpy(zero_copy_only=False)
    wrong = np.flatnonzero(want != given)
    if len(wrong):
        at = int(wrong[0])
        raise ConfigError(
            f"row {int(rows[at])} belongs to partition {int(want[at])} of the topic, not "
            f"{int(given[at])} (murmur2 of the key, else row % {partitions}: the rule "
            "every load uses)"
        )


def _failure(plans: tuple[FailurePlan, ...], partition: int, attempt: int) -> FailurePlan | None:
    return next((p for p in plans if (p.partition, p.attempt) == (partition, attempt)), None)


async def _load_one(
    options: LoadOptions,
    guarantee: str,
    loader_args: dict[str, Any],
    partition: int,
    receive: trio.MemoryReceiveChannel[RowChunk],
    task: int,
    attempt: int,
    reports: list[PartitionReport],
) -> None:
    plan = _failure(FailurePlan.parse(options.fail), partition, attempt)
    done = 0

    def progress(records: int, size: int) -> None:
        nonlocal done
        done += records
        if plan is None or done < plan.after:
            return
        fail()

    def fail() -> None:
        if plan is not None and plan.how == "exit":
            os._exit(1)  # the worker dies with batches in flight
        raise InjectedFailure(
            f"injected failure: {options.topic}-{partition} attempt {attempt} after {done} rows"
        )

    if plan is not None and plan.after <= 0:
        fail()  # before any row
    loader = BulkLoader(
        guarantee=guarantee, on_progress=progress if plan is not None else None, **loader_args
    )

    async def chunks() -> AsyncIterator[RowChunk]:
        async with receive:
            async for chunk in receive:
                yield chunk

    txn_id = transactional_id(options.load_id, partition, attempt)
    started, cpu = trio.current_time(), time.process_time()
    result = await load_partition(loader, partition, chunks(), transactional_id=txn_id)
    reports.append(
        PartitionReport(
            partition,
            attempt,
            task,
            result.count,
            result.loaded,
            result.skipped,
            result.last_row,
            result.transaction,
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            trio.current_time() - started,
            time.process_time() - cpu,
        )
    )


async def write_partitions(
    options: LoadOptions, guarantee: str, batches: Iterator[Any], task: int, attempt: int
) -> list[PartitionReport]:
    """Stream the task's batches into one `load_partition` per Kafka partition."""
    reports: list[PartitionReport] = []
    async with open_selector(options.bootstrap, request_timeout=options.request_timeout) as sel:
        loader_args: dict[str, Any] = {
            "selector": sel,
            "topic": options.topic,
            "load_id": options.load_id,
            "batch_bytes": options.batch_bytes,
            "request_timeout": options.request_timeout,
            "transaction_timeout": options.transaction_timeout,
            "routing": options.routing_fields(),
        }
        count = (await sel.wait_for_topic(options.topic)).partition_count
        sends: dict[int, trio.MemorySendChannel[RowChunk]] = {}
        try:
            async with trio.open_nursery() as nursery:
                while True:
                    batch = await trio.to_thread.run_sync(next, batches, None)
                    if batch is None:
                        break
                    for partition, chunk in chunks_of(batch, count):
                        send = sends.get(partition)
                        if send is None:
                            send, receive = trio.open_memory_channel[RowChunk](1)
                            sends[partition] = send
                            nursery.start_soon(
                                _load_one,
                                options,
                                guarantee,
                                loader_args,
                                partition,
                                receive,
                                task,
                                attempt,
                                reports,
                            )
                        await send.send(chunk)
                for send in sends.values():
                    await send.aclose()
        except BaseExceptionGroup as group:
            errors = group_leaves(group)
            if len(errors) == 1:
                raise errors[0] from None
            raise
    return sorted(reports, key=lambda r: r.partition)


__all__ = [
    "FailurePlan",
    "InjectedFailure",
    "PartitionReport",
    "chunks_of",
    "transactional_id",
    "write_partitions",
]
