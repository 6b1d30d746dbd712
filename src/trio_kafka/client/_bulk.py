"""`BulkLoader`: load an iterable of records into a topic exactly once, resumably.

Theory of operation
-------------------
Rows are numbered by their position in the input (0, 1, 2...) and each row has one
partition, decided by the row alone: murmur2 of its key (Java's default) when it has
one, else `row % partitions`. A partition thus receives a fixed, ordered subsequence of
the input, and the load of a partition is complete when its log ends with that
subsequence.

Appends are CAS writes in large batches: batch k of a partition expects to land exactly
where batch k-1 ended. So a partition's part of the load is contiguous in its log, a
batch is all or nothing, and a write can never land twice, whatever the retries.

The manifest is in the topic itself: the *last* record of each batch carries two
headers, `tk.load` (the load id) and `tk.row` (its input row number). Since batches are
atomic and contiguous, "the last record of this load in the partition" says exactly
which rows of the partition are loaded: all of its rows up to that one. Resuming reads
the partition's log end offset and the record before it; when that record is not ours
(another writer appended after us, or this load never wrote here) it scans back in
windows until it finds our last batch end or the log start. No control topic to keep in
step, nothing to commit separately: the data is its own manifest (docs/cas.md).

Per partition, one task (`_Pipe`) sends the batches in order with up to `max_in_flight`
(5) requests out, each request a single batch, with its own producer id (InitProducerId
per partition: a new id never disturbs another partition's sequences). Idempotence
(sequence numbers) plus CAS give:

- a lost answer or a timeout: the pipe waits for the rest of its window, then resends
  the unacknowledged batches in order with the same sequences: the broker deduplicates
  those that landed (its window of 5 batches matches ours);
- a mismatch: nothing of the batch was written. If its last record is ours (an earlier
  attempt landed but the broker lost our producer state), it is acknowledged;
  otherwise another writer took the offset: `ConcurrentWriteError`, and the load stops.
  The batches still in flight behind it cannot land: their sequences follow one the
  broker never accepted (OUT_OF_ORDER_SEQUENCE_NUMBER / UNKNOWN_PRODUCER_ID), and the
  pipe never resends them. Two loaders racing for a partition: at each offset one wins
  and the other stops at its first lost batch; the log never holds their batches
  interleaved behind a lost one.
- the broker forgot our producer (UNKNOWN_PRODUCER_ID, OUT_OF_ORDER_SEQUENCE_NUMBER on
  the oldest batch): a new producer id, sequences from 0 again; CAS still stops a
  duplicate.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import attrs
import trio

from trio_kafka.client._cas import cas_gate
from trio_kafka.client._edge import edge_defaults
from trio_kafka.client._reader import PartitionReader
from trio_kafka.errors import (
    AmbiguousError,
    ConcurrentWriteError,
    ConfigError,
    ErrorCode,
    KafkaError,
    error_for_code,
    error_info,
)
from trio_kafka.net import ExponentialBackoff, KafkaSelector, open_selector
from trio_kafka.producer import _mutants, partition_for_key
from trio_kafka.protocol.messages.init_producer_id import InitProducerIdRequest
from trio_kafka.protocol.messages.produce import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from trio_kafka.records import BatchBuilder, Record

LOAD_HEADER = "tk.load"
ROW_HEADER = "tk.row"
#: An input row: a value, or a (key, value) pair.
Row = bytes | None | tuple[bytes | None, bytes | None]
_RECORD_OVERHEAD = 24  # rough bytes per record besides key and value (size estimate)
_SCAN_WINDOW = 10_000
_RESTART_CODES = {ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER}


def row_of(record: Record, load_id: bytes) -> int | None:
    """The input row of a batch-closing record of load `load_id` (None otherwise)."""
    load: bytes | None = None
    row: bytes | None = None
    for name, value in record.headers:
        if name == LOAD_HEADER:
            load = value
        elif name == ROW_HEADER:
            row = value
    if load != load_id or row is None:
        return None
    try:
        return int(row)
    except ValueError:
        return None


def partition_of(row: int, key: bytes | None, partitions: int) -> int:
    """The partition of input row `row`: by key (murmur2) or round robin by row."""
    if key is not None:
        return partition_for_key(key, partitions)
    return row % partitions


def one_batch_request(
    topic: str,
    partition: int,
    data: bytes,
    *,
    timeout: float,
    transactional_id: str | None = None,
) -> ProduceRequest:
    """An acks=all Produce of one record batch to one partition: how loads write, one
    batch a request, so each answer settles exactly one batch."""
    return ProduceRequest(
        transactional_id=transactional_id,
        acks=-1,
        timeout_ms=int(timeout * 1000),
        topic_data=[
            TopicProduceData(
                name=topic, partition_data=[PartitionProduceData(index=partition, records=data)]
            )
        ],
    )


@attrs.frozen
class PartitionLoad:
    """What one run did in one partition."""

    partition: int
    #: Log end offset when the run started, and when it finished.
    start_offset: int
    end_offset: int
    #: The last input row of this load found in the partition at the start (-1: none).
    resumed_after_row: int
    loaded: int
    skipped: int


@attrs.frozen
class LoadResult:
    load_id: str
    loaded: int
    skipped: int
    partitions: tuple[PartitionLoad, ...]


@attrs.define(eq=False, slots=True)
class _Batch:
    builder: BatchBuilder
    count: int = 0
    size: int = 0
    last_row: int = -1
    expected: int = -1
    sequence: int = -1
    data: bytes = b""
    pending: Any = None  # PendingResponse, or the KafkaError that kept it from leaving


class BulkLoader:
    """Loads rows into `topic` over `selector` (see the module doc)."""

    def __init__(
        self,
        selector: KafkaSelector,
        topic: str,
        load_id: str,
        *,
        batch_bytes: int = 512 * 1024,
        max_in_flight: int = 5,
        request_timeout: float = 30.0,
        retry_timeout: float = 120.0,
        wall_clock: Callable[[], float] | None = None,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> None:
        if not load_id:
            raise ConfigError("a bulk load needs a load_id (it names the load in the manifest)")
        if not 1 <= max_in_flight <= 5:
            raise ConfigError(
                f"max_in_flight={max_in_flight}: use 1 to 5 (the broker's dedup window)"
            )
        self.selector = selector
        self.topic = topic
        self.load_id = load_id
        self._load = load_id.encode()
        self.batch_bytes = batch_bytes
        self.max_in_flight = max_in_flight
        self.request_timeout = request_timeout
        self.retry_timeout = retry_timeout
        # Wall time for the records' create time (the seam the simulator replaces).
        self._wall = edge_defaults(selector.clock, selector.rng, wall_clock)[2]
        # Called with (records, bytes) acknowledged, as acknowledgements arrive.
        self.on_progress = on_progress
        self.reader = PartitionReader(selector, timeout=request_timeout)
        self._backoff = ExponentialBackoff(0.05, 1.0)

    def _timestamp_ms(self) -> int:
        return int(self._wall() * 1000)

    def __repr__(self) -> str:
        return f"<BulkLoader {self.topic} load={self.load_id}>"

    # -- resuming ----------------------------------------------------------------------

    async def resume_point(self, partition: int) -> tuple[int, int, bool]:
        """(log end offset, last row of this load in the partition or -1, whether other
        records follow that row)."""
        reader, topic = self.reader, self.topic
        end = await reader.log_end_offset(topic, partition)
        start = await reader.log_start_offset(topic, partition)
        if end <= start:
            return end, -1, False
        tail = await reader.read_at(topic, partition, end - 1)
        if tail is not None:
            row = row_of(tail, self._load)
            if row is not None:
                return end, row, False
        high = end
        while high > start:
            low = max(start, high - _SCAN_WINDOW)
            found = -1
            async for record in reader.read(topic, partition, start=low, end=high):
                row = row_of(record, self._load)
                if row is not None:
                    found = row
            if found >= 0:
                return end, found, True
            high = low
        return end, -1, False

    # -- the load ------------------------------------------------------------------------

    async def run(self, rows: Iterable[Row]) -> LoadResult:
        """Load `rows` (values, or (key, value) pairs); returns what this run did."""
        selector, topic = self.selector, self.topic
        meta = await selector.wait_for_topic(topic)
        count = meta.partition_count
        gate = cas_gate(selector)
        pipes: list[_Pipe] = []
        for partition in range(count):
            await gate.check(topic, partition)
            end, row, foreign = await self.resume_point(partition)
            pipes.append(_Pipe(self, partition, end, row, foreign))
        try:
            async with trio.open_nursery() as nursery:
                for pipe in pipes:
                    nursery.start_soon(pipe.run)
                try:
                    await self._feed(rows, pipes, count)
                finally:
                    for pipe in pipes:
                        await pipe.close_input()
        except BaseExceptionGroup as group:
            # One pipe's error (the others were cancelled): raise it as itself.
            leaves = _leaves(group)
            if len(leaves) == 1:
                raise leaves[0] from None
            raise
        return LoadResult(
            self.load_id,
            sum(p.loaded for p in pipes),
            sum(p.skipped for p in pipes),
            tuple(p.summary() for p in pipes),
        )

    async def _feed(self, rows: Iterable[Row], pipes: list[_Pipe], count: int) -> None:
        """Route rows to their partitions' open batches; hand full batches to the pipes."""
        limit = self.batch_bytes
        now_ms = self._timestamp_ms
        stamp = now_ms()
        # Per partition: the record held back until we know whether it closes its batch.
        held: list[tuple[int, bytes | None, bytes | None] | None] = [None] * count
        resume = [pipe.resumed_after_row for pipe in pipes]
        for index, item in enumerate(rows):
            if isinstance(item, tuple):
                key, value = item
            else:
                key, value = None, item
            partition = index % count if key is None else partition_for_key(key, count)
            if index <= resume[partition]:
                pipes[partition].skipped += 1
                continue
            pipe = pipes[partition]
            size = _RECORD_OVERHEAD + (len(value) if value else 0) + (len(key) if key else 0)
            previous = held[partition]
            if previous is not None:
                batch = pipe.open
                if batch.size + size > limit and batch.count:
                    prev_row, prev_key, prev_value = previous
                    self._close(batch, stamp, prev_row, prev_key, prev_value)
                    await pipe.submit()
                    stamp = now_ms()
                    batch = pipe.open
                else:
                    batch.builder.append(stamp, previous[1], previous[2])
                batch.size += size
                batch.count += 1
            else:
                pipe.check_can_append()
                batch = pipe.open
                batch.size += size
                batch.count += 1
            held[partition] = (index, key, value)
        for partition, previous in enumerate(held):
            if previous is not None:
                pipe = pipes[partition]
                self._close(pipe.open, stamp, *previous)
                await pipe.submit()

    def _close(
        self, batch: _Batch, stamp: int, row: int, key: bytes | None, value: bytes | None
    ) -> None:
        batch.builder.append(
            stamp, key, value, ((LOAD_HEADER, self._load), (ROW_HEADER, b"%d" % row))
        )
        batch.last_row = row

    def _progress(self, records: int, size: int) -> None:
        if self.on_progress is not None:
            self.on_progress(records, size)


class _Pipe:
    """One partition's in-order CAS pipeline (see the module doc)."""

    def __init__(
        self, loader: BulkLoader, partition: int, end: int, row: int, foreign: bool
    ) -> None:
        self.loader = loader
        self.partition = partition
        self.start_offset = end
        # The offset the next batch expects (advanced when a batch is assigned).
        self.next_offset = end
        self.resumed_after_row = row
        # Other writers appended after this load's last record: appending more would
        # leave the load's rows split around theirs.
        self.foreign_after = foreign
        self.loaded = 0
        self.skipped = 0
        self.open = _Batch(BatchBuilder())
        self.producer_id = -1
        self.producer_epoch = -1
        self.next_sequence = 0
        self._send, self._receive = trio.open_memory_channel[_Batch](0)

    def summary(self) -> PartitionLoad:
        return PartitionLoad(
            self.partition,
            self.start_offset,
            self.next_offset,
            self.resumed_after_row,
            self.loaded,
            self.skipped,
        )

    def check_can_append(self) -> None:
        if self.foreign_after:
            loader = self.loader
            raise ConcurrentWriteError(
                f"{loader.topic}-{self.partition} holds records of other writers after the "
                f"last record of load {loader.load_id!r} (row {self.resumed_after_row}); "
                "appending the rest there would split the load around them",
                offset=self.start_offset,
            )

    async def submit(self) -> None:
        batch, self.open = self.open, _Batch(BatchBuilder())
        await self._send.send(batch)

    async def close_input(self) -> None:
        await self._send.aclose()

    # -- the sending task ----------------------------------------------------------------

    async def run(self) -> None:
        in_flight: collections.deque[_Batch] = collections.deque()
        window = self.loader.max_in_flight
        async with self._receive:
            async for batch in self._receive:
                if self.producer_id < 0:
                    await self._init_producer_id()
                batch.expected = self.next_offset
                self.next_offset += batch.count
                self._sequence(batch)
                await self._write(batch)
                in_flight.append(batch)
                while len(in_flight) >= window or (in_flight and _done(in_flight[0])):
                    await self._settle(in_flight)
        while in_flight:
            await self._settle(in_flight)

    def _sequence(self, batch: _Batch) -> None:
        batch.sequence = self.next_sequence
        self.next_sequence += batch.count
        without_cas = _mutants.active(_mutants.BULK_WITHOUT_CAS)  # planted bug
        batch.data = batch.builder.build(
            base_offset=-1 if without_cas else batch.expected,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=batch.sequence,
        )

    async def _init_producer_id(self) -> None:
        selector = self.loader.selector
        attempt = 0
        while True:
            try:
                response = await selector.request(
                    selector.least_loaded_node(),
                    InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000),
                    timeout=self.loader.request_timeout,
                )
            except KafkaError as exc:
                error: KafkaError = exc
            else:
                if response.error_code == ErrorCode.NONE:
                    self.producer_id = response.producer_id
                    self.producer_epoch = response.producer_epoch
                    self.next_sequence = 0
                    return
                error = error_for_code(response.error_code, "InitProducerId")
                if not error_info(response.error_code).retriable:
                    raise error
            if attempt >= 20:
                raise error
            await trio.sleep(self.loader._backoff.backoff(attempt, selector.rng))
            attempt += 1

    async def _write(self, batch: _Batch) -> None:
        loader = self.loader
        selector = loader.selector
        request = one_batch_request(
            loader.topic, self.partition, batch.data, timeout=loader.request_timeout
        )
        try:
            part = selector.metadata.partition(loader.topic, self.partition)
            if part is None or part.leader < 0:
                raise KafkaError(f"{loader.topic}-{self.partition} has no leader")
            connection = await selector.connection(part.leader)
            batch.pending = await connection.send(request, timeout=loader.request_timeout)
        except KafkaError as exc:
            batch.pending = exc

    async def _settle(self, in_flight: collections.deque[_Batch]) -> None:
        """Wait for the oldest batch's answer and act on it."""
        batch = in_flight[0]
        pending = batch.pending
        code = ErrorCode.NONE
        message: str | None = None
        failure: KafkaError | None = None
        if isinstance(pending, KafkaError):
            failure = pending
        else:
            try:
                response = await pending.wait()
            except KafkaError as exc:
                failure = exc
            else:
                answer = response.responses[0].partition_responses[0]
                code, message = answer.error_code, answer.error_message
                log_end = answer.base_offset
        if failure is None and code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
            self._acknowledged(in_flight.popleft())
            return
        if failure is None and code == ErrorCode.EXPECTED_OFFSET_MISMATCH:
            if await self._is_ours(batch):
                self._acknowledged(in_flight.popleft())
                return
            loader = self.loader
            foreign = await loader.reader.read_at(loader.topic, self.partition, batch.expected)
            raise ConcurrentWriteError(
                f"another writer appended at offset {batch.expected} of "
                f"{loader.topic}-{self.partition} (log end {log_end}) before load "
                f"{loader.load_id!r} could write rows up to {batch.last_row} there; the "
                "load stops (run it again to resume after what is loaded)",
                offset=batch.expected,
                foreign_record=foreign,
            )
        if failure is None:
            info = error_info(code)
            if not (info.retriable or info.invalid_metadata or code in _RESTART_CODES):
                raise error_for_code(code, message)
            failure = error_for_code(code, message)
        await self._rewind(in_flight, failure, restart=code in _RESTART_CODES)

    async def _is_ours(self, batch: _Batch) -> bool:
        loader = self.loader
        last = await loader.reader.read_at(
            loader.topic, self.partition, batch.expected + batch.count - 1
        )
        return last is not None and row_of(last, loader._load) == batch.last_row

    def _acknowledged(self, batch: _Batch) -> None:
        self.loaded += batch.count
        self.loader._progress(batch.count, len(batch.data))
        batch.data = b""
        batch.pending = None

    async def _rewind(
        self, in_flight: collections.deque[_Batch], error: KafkaError, *, restart: bool
    ) -> None:
        """Resend every unacknowledged batch in order (the same sequences, or new ones
        under a new producer id when the broker forgot ours)."""
        loader = self.loader
        selector = loader.selector
        clock = selector.clock
        deadline = clock.now() + loader.retry_timeout
        attempt = 0
        while True:
            for batch in in_flight:  # let the rest of the window come back first
                if batch.pending is not None and not isinstance(batch.pending, KafkaError):
                    with contextlib.suppress(KafkaError):
                        await batch.pending.wait()
            if clock.now() >= deadline:
                raise AmbiguousError(
                    f"{loader.topic}-{self.partition}: could not settle rows up to "
                    f"{in_flight[-1].last_row} within {loader.retry_timeout} s (last error: "
                    f"{error}); run the load again to resume"
                )
            await trio.sleep(loader._backoff.backoff(attempt, selector.rng))
            attempt += 1
            with contextlib.suppress(KafkaError):
                await selector.refresh_metadata([loader.topic])
            if restart:
                await self._init_producer_id()
                for batch in in_flight:
                    self._sequence(batch)
            for batch in in_flight:
                await self._write(batch)
            if not isinstance(in_flight[0].pending, KafkaError):
                return
            error = in_flight[0].pending


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for error in group.exceptions:
        out.extend(_leaves(error) if isinstance(error, BaseExceptionGroup) else [error])
    return out


def _done(batch: _Batch) -> bool:
    pending = batch.pending
    return isinstance(pending, KafkaError) or pending.done()


@contextlib.asynccontextmanager
async def open_bulk_loader(
    topic: str,
    load_id: str,
    *,
    bootstrap: str | None = None,
    selector: KafkaSelector | None = None,
    **options: Any,
) -> AsyncIterator[BulkLoader]:
    """A `BulkLoader` over its own selector (`bootstrap=`) or a shared one (`selector=`)."""
    async with contextlib.AsyncExitStack() as stack:
        if selector is None:
            if bootstrap is None:
                raise ConfigError("open_bulk_loader needs bootstrap= or selector=")
            selector = await stack.enter_async_context(open_selector(bootstrap))
        yield BulkLoader(selector, topic, load_id, **options)


__all__ = [
    "LOAD_HEADER",
    "ROW_HEADER",
    "BulkLoader",
    "LoadResult",
    "PartitionLoad",
    "Row",
    "open_bulk_loader",
    "partition_of",
    "row_of",
]
