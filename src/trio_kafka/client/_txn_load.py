"""The transactional backend of `BulkLoader` (client/_bulk.py): one task per partition
writes each chunk the pipeline cuts in one transaction of the partition's
transactional `Producer` (the producer core's own sequencing, retries and transaction
machinery).

Theory of operation
-------------------
A chunk's last row is its checkpoint, so rows and checkpoint commit together; a
committed transaction is a contiguous run of the partition's rows, and the last
committed checkpoint says exactly what is loaded.

Streamed. The rows of the oldest uncommitted chunk go to its transaction as the feeder
adds them (`LoadPipeline.stream_rows`, one `send_many` a run), not once the chunk is
sealed: they are handed on while still in the CPU's caches (a sealed 4 MiB chunk had
gone cold: each later pass over its rows cost a cache miss per row), the producer
fills and sends batches from the first run on, and the chunk is committed as soon as
its last run arrives. The open batch's last row is held back (it becomes the
checkpoint if the batch is sealed after it). While a transaction commits, the feeder
goes on and the next chunk's rows wait in the pipeline; the feeder waits when a
partition has two sealed chunks not committed (`fed`), so memory stays bounded by
about three chunks a partition.

A transaction is open while its chunk's rows are being read, so a chunk whose rows
come slowly is sealed early (`_SEAL_AFTER` of the transaction timeout after it began)
and committed, before the coordinator would abort it for its age (unless reading one
block of the input alone takes longer: the input is read synchronously, and nothing
runs meanwhile).

Failures: an abortable one aborts the transaction, and the chunk's rows go again from
its first (`restream`; aborted rows are invisible to read_committed readers); a commit
whose answer was lost is settled by re-initialising and reading the committed
checkpoint back (in: go on; not in: write the chunk again); anything else (a fence:
another instance of the load took over) stops the load, and a rerun resumes from the
committed checkpoint.
"""

from __future__ import annotations

import logging
from typing import Protocol

import anyio
import anyio.lowlevel

from trio_kafka.client._producer import Producer
from trio_kafka.client._reader import PartitionReader
from trio_kafka.errors import AbortableError, AmbiguousError
from trio_kafka.net import KafkaSelector
from trio_kafka.producer import ExponentialBackoff
from trio_kafka.producer._load import LoadBatch, LoadPipeline


class Loader(Protocol):
    """What a partition task uses of its `BulkLoader` (client/_bulk.py)."""

    selector: KafkaSelector
    topic: str
    retry_timeout: float
    transaction_timeout: float
    committed_reader: PartitionReader
    _backoff: ExponentialBackoff

    async def resume_point(
        self, partition: int, reader: PartitionReader | None = None
    ) -> tuple[int, int, bool]: ...

    def _timestamp_ms(self) -> int: ...

    def _progress(self, records: int, size: int) -> None: ...


logger = logging.getLogger("trio_kafka.load")

#: A transaction still waiting for its chunk's rows after this share of the
#: transaction timeout is committed with the rows it has.
_SEAL_AFTER = 0.25


async def send_chunk(producer: Producer, topic: str, partition: int, chunk: LoadBatch) -> None:
    """Append a whole sealed chunk to `partition`: its rows in bulk (full batches of the
    partition), then the checkpoint row with its headers, last."""
    if chunk.values:
        await producer.send_many(chunk.values, topic=topic, partition=partition, keys=chunk.keys)
    await send_checkpoint(producer, topic, partition, chunk)


async def send_checkpoint(producer: Producer, topic: str, partition: int, chunk: LoadBatch) -> None:
    await producer.send(
        topic,
        chunk.checkpoint_value,
        key=chunk.checkpoint_key,
        headers=chunk.headers,
        partition=partition,
    )


class _Signal:
    """A wake-up one task waits for and others give: set until the waiter takes it."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def set(self) -> None:
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()
        self._event = anyio.Event()


class TxnPartition:
    """Drives a transactional pipeline: one transaction per chunk, streamed (see the
    module doc)."""

    def __init__(self, loader: Loader, pipe: LoadPipeline, producer: Producer) -> None:
        self.loader = loader
        self.pipe = pipe
        self.producer = producer
        # Set by the feeder: rows were added, or the input ended (`_closed`).
        self._rows = _Signal()
        self._closed = False
        # Set by this task when a chunk committed (the feeder may be waiting for room).
        self._room = _Signal()
        self._seal_after = loader.transaction_timeout * _SEAL_AFTER

    def __repr__(self) -> str:
        return f"<TxnPartition {self.pipe!r}{' closed' if self._closed else ''}>"

    async def fed(self, sealed: int) -> None:
        """The feeder added rows to the pipeline (sealing `sealed` chunks): let this task
        hand them on while they are fresh; wait while two chunks are sealed and not
        committed."""
        self._rows.set()
        await anyio.lowlevel.checkpoint()
        while self.pipe.queued >= 2:
            await self._room.wait()

    async def close_input(self) -> None:
        self._closed = True
        self._rows.set()

    def discard(self) -> None:
        pass  # (nothing to close)

    async def run(self) -> None:
        pipe = self.pipe
        while True:
            while not pipe.streamable:
                if self._closed:
                    return
                await self._rows.wait()
            chunk = await self._write_chunk()
            pipe.committed(chunk)
            self._room.set()
            self.loader._progress(chunk.count, chunk.size)

    async def _write_chunk(self) -> LoadBatch:
        """Write the oldest chunk in one transaction, retried (see the module doc)."""
        loader, pipe, producer = self.loader, self.pipe, self.producer
        clock = loader.selector.clock
        topic, partition = loader.topic, pipe.partition
        deadline = clock.now() + loader.retry_timeout
        attempt = 0
        while True:
            chunk: LoadBatch | None = None
            try:
                async with producer.transaction():
                    chunk = await self._stream()
                return chunk
            except AmbiguousError as exc:
                # The commit's answer was lost (TransactionOutcomeUnknownError): the
                # producer re-initialises, which settles the transaction (a fenced
                # producer raises here: another instance took over, the load stops);
                # then the committed checkpoint says whether the chunk is in.
                await producer.init_transactions()
                _, row, _ = await loader.resume_point(partition, loader.committed_reader)
                if chunk is not None and row >= chunk.last_row:
                    return chunk
                if clock.now() >= deadline:
                    raise
                logger.info(
                    "%s-%d: commit outcome unknown (%s), not committed: retrying",
                    topic,
                    partition,
                    exc,
                )
            except AbortableError as exc:
                # Aborted: nothing of the chunk is visible to read_committed readers.
                if clock.now() >= deadline:
                    raise AmbiguousError(
                        f"{topic}-{partition}: the transaction of the rows after row "
                        f"{pipe.checkpoint} kept failing for {loader.retry_timeout} s "
                        f"(last: {exc}); run the load again to resume"
                    ) from exc
                logger.info("%s-%d: chunk aborted (%s), retrying", topic, partition, exc)
                await anyio.sleep(loader._backoff.backoff(attempt, loader.selector.rng))
                attempt += 1
            pipe.restream()

    async def _stream(self) -> LoadBatch:
        """Inside the chunk's transaction: hand its rows to the producer as they come;
        once it is sealed and all handed on, send its checkpoint row and return it (the
        transaction then commits)."""
        loader, pipe, producer = self.loader, self.pipe, self.producer
        clock = loader.selector.clock
        topic, partition = loader.topic, pipe.partition
        seal_at = clock.now() + self._seal_after
        while True:
            rows = pipe.stream_rows()
            if rows is not None:
                values, keys = rows
                await producer.send_many(values, topic=topic, partition=partition, keys=keys)
                continue
            chunk = pipe.chunk_streamed()
            if chunk is not None:
                await send_checkpoint(producer, topic, partition, chunk)
                return chunk
            if self._closed:
                raise RuntimeError(f"{self!r}: the input ended with a chunk left open")
            with anyio.move_on_after(seal_at - clock.now()):
                await self._rows.wait()
                continue
            # The rows come slowly: commit the chunk with the rows it has.
            if not pipe.finish(loader._timestamp_ms()):
                raise RuntimeError(f"{self!r}: a transaction open without rows")


__all__ = ["Loader", "TxnPartition", "send_checkpoint", "send_chunk"]
