"""`load_partition`: one partition of a load, its numbered rows streamed in chunks.

Theory of operation
-------------------
`BulkLoader.run` numbers the rows of one input itself and routes them to every
partition. A load split over processes (a Spark task holds one Kafka partition's rows)
has the numbers already: each chunk carries its rows' input numbers, increasing, and
every row must belong to this partition by the one rule (producer/_rows.py
`partition_of`: murmur2 of the key, else row % partitions), so the log is the same one
`BulkLoader` would write for the same rows, and either can resume the other.

The rows go through the same `LoadPipeline` and the same shells as `BulkLoader`'s:

- CAS: `_CasPartition` (resume from the log's last checkpoint, batches by bytes, up to 5
  in flight, resends at the same expected offset, mismatch resolution);
- both refuse to resume a partition whose last checkpoint records other routing than
  this call's (`BulkLoader.check_checkpoint`: partition count, guarantee, and the
  loader's `routing=`);
- transactions, *held*: the rows go into ONE transaction of a transactional producer
  (`transactional_id`, one per writer attempt) that is left open at the end and handed
  off (`Producer.hand_off_transaction`): another process (the Spark driver) commits the
  winning attempt's transaction and fences the others. Resume reads the committed
  checkpoint (read_committed), so a partition a previous run committed is skipped.

Memory: the feeder hands a sealed batch to the partition's task through a zero-capacity
channel, so at most the window plus one batch of rows is held, whatever the size of
the partition; a chunk is released once fed.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterable, Sequence

import attrs

from trio_kafka.client._bulk import BulkLoader
from trio_kafka.client._cas import cas_gate
from trio_kafka.client._cas_load import _CasPartition, _Partition
from trio_kafka.client._producer import Producer
from trio_kafka.client._reader import PartitionReader
from trio_kafka.client._txn_calls import HandedOffTransaction
from trio_kafka.client._txn_load import send_chunk
from trio_kafka.errors import ConfigError
from trio_kafka.net import open_task_group, sole_error
from trio_kafka.producer._load import Backend, LoadPipeline
from trio_kafka.producer._rows import encode_routing, partition_of, row_of


@attrs.frozen
class RowChunk:
    """Consecutive rows of one partition: their input numbers (increasing), keys (None:
    all keyless) and values, index by index."""

    rows: Sequence[int]
    keys: Sequence[bytes | None] | None
    values: Sequence[bytes | None]
    #: The caller checked every row against the one rule itself, vectorized (the
    #: Spark task, over its Arrow columns: spark/_arrow.py); a murmur2 in Python per
    #: row here would cost more than the rest of the load.
    routed: bool = False


@attrs.frozen
class PartitionLoadResult:
    """What `load_partition` did in its partition."""

    partition: int
    guarantee: str
    #: Log end when it began (transactions: the last stable offset).
    start_offset: int
    #: The last row of this load found in the partition at the start (-1: none).
    resumed_after_row: int
    #: Rows given, rows written by this call, rows found already loaded and skipped.
    count: int
    loaded: int
    skipped: int
    #: The last row given (-1: none).
    last_row: int
    #: Held transactions: the open transaction to end elsewhere (None: nothing written).
    transaction: HandedOffTransaction | None = None


class _HeldTxnPartition(_Partition):
    """Appends every sealed chunk to one open transaction (see the module doc)."""

    def __init__(self, loader: BulkLoader, pipe: LoadPipeline, producer: Producer) -> None:
        super().__init__(loader, pipe)
        self.producer = producer

    async def run(self) -> None:
        async with self._receive:
            async for _ in self._receive:
                await self._append_sealed()
        await self._append_sealed()

    async def _append_sealed(self) -> None:
        loader, pipe, producer = self.loader, self.pipe, self.producer
        topic, partition = loader.topic, pipe.partition
        while (chunk := pipe.take_sealed()) is not None:
            await send_chunk(producer, topic, partition, chunk)
            # Appended to the transaction: `hand_off_transaction` flushes and checks
            # every record before anything can commit.
            pipe.committed(chunk)
            loader._progress(chunk.count, chunk.size)


def _check(chunk: RowChunk, last: int, topic: str, partition: int, count: int) -> None:
    """Rows increase (from `last` on) and each is this partition's by the one rule."""
    rows, keys = chunk.rows, chunk.keys
    if len(chunk.values) != len(rows) or (keys is not None and len(keys) != len(rows)):
        raise ConfigError(
            f"a chunk of {len(rows)} rows with {len(chunk.values)} values and "
            f"{'no' if keys is None else len(keys)} keys"
        )
    previous = last
    for row in rows:
        if row <= previous:
            raise ConfigError(
                f"{topic}-{partition}: row {row} after row {previous}; the rows of a "
                "partition must come in increasing order (sortWithinPartitions('row'))"
            )
        previous = row
    if chunk.routed:
        return
    if keys is None:
        wrong = next((row for row in rows if row % count != partition), None)
        key: bytes | None = None
    else:
        pairs = zip(rows, keys, strict=True)
        found = next(((r, k) for r, k in pairs if partition_of(r, k, count) != partition), None)
        wrong, key = (None, None) if found is None else found
    if wrong is not None:
        raise ConfigError(
            f"row {wrong} belongs to partition {partition_of(wrong, key, count)} of "
            f"{topic}, not {partition} (murmur2 of the key, else row % {count}: the rule "
            "every load uses)"
        )


async def _resume(
    loader: BulkLoader, partition: int, routing: dict[str, object], reader: PartitionReader
) -> tuple[int, int, bool]:
    """The partition's resume point, refused unless its checkpoint records `routing`."""
    end, record, foreign = await loader.last_checkpoint(partition, reader)
    loader.check_checkpoint(partition, record, routing)
    row = None if record is None else row_of(record, loader.load_id.encode())
    return end, -1 if row is None else row, foreign


async def load_partition(
    loader: BulkLoader,
    partition: int,
    chunks: AsyncIterable[RowChunk],
    *,
    transactional_id: str | None = None,
) -> PartitionLoadResult:
    """Load the rows of `chunks` into `partition` of `loader.topic` (see the module doc).

    `loader.guarantee` must be decided ("exactly_once_cas" or "transactional", checked
    like `BulkLoader.run`); "transactional" needs `transactional_id`, the id of the one
    transaction this call leaves open (`PartitionLoadResult.transaction`)."""
    selector, topic = loader.selector, loader.topic
    count = (await selector.wait_for_topic(topic)).partition_count
    if not 0 <= partition < count:
        raise ConfigError(f"partition {partition}: {topic} has partitions 0 to {count - 1}")
    if loader.guarantee == "auto":
        raise ConfigError(
            "load_partition needs the guarantee decided (exactly_once_cas or "
            "transactional): every writer of one load must use the same; decide it once "
            "with BulkLoader.choose_backend"
        )
    if loader.guarantee == Backend.TRANSACTIONS.value:
        backend = Backend.TRANSACTIONS
    else:  # a forced CAS is checked for this partition, as BulkLoader checks all
        await cas_gate(selector).check(topic, partition)
        backend = Backend.CAS
    routing = loader.load_routing(backend.value, count)
    encoded = encode_routing(routing)
    async with contextlib.AsyncExitStack() as stack:
        part: _Partition
        if backend is Backend.CAS:
            point = await _resume(loader, partition, routing, loader.reader)
            part = _CasPartition(loader, loader._pipeline(backend, partition, point, encoded))
        else:
            if transactional_id is None:
                raise ConfigError("load_partition with transactions needs transactional_id")
            producer = await stack.enter_async_context(
                loader.transactional_producer(transactional_id)
            )
            await producer.init_transactions()
            point = await _resume(loader, partition, routing, loader.committed_reader)
            pipe = loader._pipeline(backend, partition, point, encoded)
            part = _HeldTxnPartition(loader, pipe, producer)
            producer.begin_transaction()
        stack.callback(part.discard)  # a failed input leaves its stream open otherwise
        pipe = part.pipe
        given, last = 0, -1
        try:
            async with open_task_group() as nursery:
                nursery.start_soon(part.run)
                stamp = loader._timestamp_ms()
                async for chunk in chunks:
                    _check(chunk, last, topic, partition, count)
                    if chunk.rows:
                        last = chunk.rows[-1]
                    # The whole chunk as one run (batches cut by cumulative sizes);
                    # each sealed batch is handed on before the next chunk.
                    sealed = pipe.add_run(chunk.rows, chunk.keys, chunk.values, stamp)
                    for _ in range(sealed):
                        await part.sealed()
                    if sealed:
                        stamp = loader._timestamp_ms()
                    given += len(chunk.rows)
                if pipe.finish(stamp):
                    await part.sealed()
                # Only an input that ended is closed (BulkLoader.run says why).
                await part.close_input()
        except BaseExceptionGroup as group:
            error = sole_error(group)
            if error is not None:
                raise error from None
            raise
        transaction = None
        if isinstance(part, _HeldTxnPartition):
            if pipe.loaded:
                transaction = await part.producer.hand_off_transaction()
            else:
                await part.producer.abort_transaction()  # empty: nothing to end elsewhere
    return PartitionLoadResult(
        partition,
        backend.value,
        pipe.start_offset,
        pipe.resumed_after_row,
        given,
        pipe.loaded,
        pipe.skipped,
        last,
        transaction,
    )


__all__ = ["PartitionLoadResult", "RowChunk", "load_partition"]
