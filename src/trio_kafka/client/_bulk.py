"""`BulkLoader`: load an iterable of rows into a topic exactly once, resumably, on any
Kafka broker: the shell of the load pipeline (producer/_load.py).

Theory of operation
-------------------
Rows are numbered by their position in the input and each goes to the partition its
row alone decides (producer/_rows.py). Per partition, a `LoadPipeline` cuts the rows
into batches and decides every write; this module does the I/O it asks for.

Backend per topic (`guarantee`): "exactly_once_cas" where the partition's leader
advertises `expected.offset.cas` and the topic has `expected.offset.check.enable=true`
(checked by client/_cas.py's gate); "transactional" elsewhere (any Kafka 2.5+, Tansu);
"auto" (the default) picks CAS where it can and transactions otherwise, and says which
in `LoadResult.guarantee` and at INFO on the `trio_kafka.load` logger. A forced
guarantee that the broker cannot give is refused (`CasNotSupportedError`) before a row
is written. Never silently weaker.

Resume. Each partition's resume point is the last checkpoint of this load in its log
(`resume_point`: the record before the log end, else a scan back in windows of
`_SCAN_WINDOW` offsets). With transactions the partition's transactional producer
(`tk-load-<load id>-<topic>-<partition>`) is initialised *first*: InitProducerId fences
an older instance of the load and aborts its open transaction, so the read_committed
read that follows sees exactly what committed.

CAS (`_CasPartition`, client/_cas_load.py): one task per partition sends `next_send`
batches to the leader (`send_to_leader`, one batch a request), awaits answers oldest
first and feeds them to `on_answer`; it asks for an idempotent producer id when the
pipeline needs one (`init_idempotent_producer_id`), sleeps `poll_delay`, refreshes
metadata when told, and reads the record `read_offset` names after a mismatch. Every
retry backs off with the one backoff, `LOAD_BACKOFF` (its own `retry_backoff` and
`retry_backoff_max`, 50 ms to 1 s).

Routing. Every checkpoint records the load's routing (producer/_rows.py): the partition
count, the partitioner, the guarantee used, and what the caller says made its rows
(`routing=`, e.g. the key field and input format of `trio-kafka load`). A resume reads
the routing of each partition's last checkpoint before it writes anything and refuses
another (`ConfigError` naming each difference, then and now), and refuses checkpoints
that record none (written before routing was recorded: nothing can be checked).

Finished loads. A partition's last row, sealed once the input ended, carries an end
marker (the input's row count, the partitions with rows, the partition's rows). When
every partition with a checkpoint of the load ends in one, the markers agree, and the
input has as many rows (`finished(rows)`, or `run` given a sized input), the load is
finished: the result is made from the checkpoints, without reading the input again.

Transactions (`TxnPartition`, client/_txn_load.py): one task per partition writes
each chunk in one transaction of its transactional `Producer` (the producer core's own
sequencing, retries and transaction machinery); the chunk's last row is its
checkpoint, so rows and checkpoint commit together. The chunk's rows are streamed into
its transaction as the feeder adds them. An abortable failure aborts and writes the
chunk again; a commit whose answer was lost is settled by reading the committed
checkpoint back; anything else (a fence: another instance of the load took over) stops
the load, and a rerun resumes from the committed checkpoint.

The feeder routes rows to their pipelines a block at a time: each partition's share of
the block goes to its pipeline as one run (`add_run`: lists, not a call per row; rows
without keys are a strided slice of the block; client/_row_runs.py), and the partition's task is told
(`fed`). CAS: a sealed batch is handed on through a zero-capacity channel, so a
partition has at most its window plus one batch in memory. Transactions: the task
hands the run on to the producer at once (one `send_many(..., partition=)`, which fills
whole batches), and the feeder waits while a partition has two sealed chunks not
committed. The feeder holds one block.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import ssl
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sized
from typing import Any

import anyio
import attrs

from trio_kafka.client._cas import cas_gate
from trio_kafka.client._cas_load import _CasPartition, _Partition, one_batch_request
from trio_kafka.client._edge import edge_defaults
from trio_kafka.client._fetch import committed_newest_first
from trio_kafka.client._open import open_producer
from trio_kafka.client._producer import Producer
from trio_kafka.client._reader import IsolationLevel, PartitionReader
from trio_kafka.client._row_runs import FEED_BLOCK, UNKEYED, keyed_runs, unkeyed_runs
from trio_kafka.client._security import Security, pop_security
from trio_kafka.client._telemetry import telemetry_for
from trio_kafka.client._txn_load import TxnPartition
from trio_kafka.errors import (
    CasNotSupportedError,
    ConfigError,
    ErrorCode,
)
from trio_kafka.net import (
    ExponentialBackoff,
    KafkaSelector,
    SaslConfig,
    open_selector,
    sole_error,
)
from trio_kafka.producer import current_rules
from trio_kafka.producer._load import DEFAULT_BATCH_BYTES, Backend, LoadPipeline
from trio_kafka.producer._rows import (
    LOAD_HEADER,
    LOADER_ROUTING,
    PARTITIONER,
    ROW_HEADER,
    EndMarker,
    Row,
    encode_routing,
    partition_of,
    routing_changes,
    routing_of,
    row_of,
)
from trio_kafka.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic
from trio_kafka.records import Record

logger = logging.getLogger("trio_kafka.load")

_SCAN_WINDOW = 10_000
#: A partition's resume point as read: (log end offset, the last checkpoint record of
#: this load or None, whether other records follow it).
Checkpoint = tuple[int, Record | None, bool]
#: How a refused resume can start afresh instead (every error message says it).
_FRESH = (
    "start a fresh load instead: another load id (load_id=, trio-kafka load --load-id) "
    "or another topic"
)
#: What `guarantee=` accepts.
GUARANTEES = ("auto", "exactly_once_cas", "transactional")


def transactional_id_for(load_id: str, topic: str, partition: int) -> str:
    """The transactional id of one partition of a transactional load."""
    return f"tk-load-{load_id}-{topic}-{partition}"


@attrs.frozen
class PartitionLoad:
    """What one run did in one partition."""

    partition: int
    #: Log end offset when the run started, and when it finished (with transactions:
    #: the last stable offset, read once the run is done).
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
    #: The backend used: "exactly_once_cas" or "transactional".
    guarantee: str = Backend.CAS.value


#: The load's retry_backoff and retry_backoff_max (the one backoff, producer/_backoff.py).
#: Its own, not the selector's 100 ms: with the selector's, the simulator stopped catching
#: the planted bug load-restream-on at its seed (and in the 30 after it), so the load's
#: retries keep the timing the pinned seeds were found with.
LOAD_BACKOFF = ExponentialBackoff(0.05, 1.0)


class BulkLoader:
    """Loads rows into `topic` over `selector` (see the module doc).

    `routing`: what made the rows from the caller's input, as names to JSON values
    (e.g. `{"key_field": "user", "format": "jsonl"}`; None values are unset). It is
    recorded with every checkpoint beside the partition count, partitioner and
    guarantee, and a resume with any other is refused (`ConfigError`)."""

    def __init__(
        self,
        selector: KafkaSelector,
        topic: str,
        load_id: str,
        *,
        guarantee: str = "auto",
        batch_bytes: int = DEFAULT_BATCH_BYTES,
        chunk_bytes: int | None = None,
        max_in_flight: int = 5,
        request_timeout: float = 30.0,
        retry_timeout: float = 120.0,
        transaction_timeout: float = 60.0,
        wall_clock: Callable[[], float] | None = None,
        on_progress: Callable[[int, int], None] | None = None,
        routing: Mapping[str, object] | None = None,
    ) -> None:
        if not load_id:
            raise ConfigError("a bulk load needs a load_id (it names the load in the manifest)")
        _check_numbers(
            batch_bytes=batch_bytes,
            chunk_bytes=chunk_bytes,
            max_in_flight=max_in_flight,
            request_timeout=request_timeout,
            retry_timeout=retry_timeout,
            transaction_timeout=transaction_timeout,
        )
        if not 1 <= max_in_flight <= 5:
            raise ConfigError(
                f"max_in_flight={max_in_flight}: use 1 to 5 (the broker's dedup window)"
            )
        if guarantee not in GUARANTEES:
            raise ConfigError(
                f"guarantee={guarantee!r}: use one of {', '.join(map(repr, GUARANTEES))}"
            )
        routing = dict(routing or {})
        taken = sorted(set(routing) & set(LOADER_ROUTING))
        if taken:
            raise ConfigError(
                f"routing={routing!r}: {', '.join(taken)} is recorded by the loader itself; "
                "routing= names what made the rows (e.g. key_field, format)"
            )
        try:
            encode_routing(routing)
        except (TypeError, ValueError) as exc:
            raise ConfigError(
                f"routing={routing!r}: its values must be JSON (str, int, None, lists): {exc}"
            ) from None
        #: What the caller says made its rows: recorded with every checkpoint.
        self.routing = routing
        self.selector = selector
        self.topic = topic
        self.load_id = load_id
        self.guarantee = guarantee
        self._load = load_id.encode()
        self.batch_bytes = batch_bytes
        #: Transactions: the rows of one transaction (several producer batches).
        self.chunk_bytes = chunk_bytes if chunk_bytes is not None else 8 * batch_bytes
        self.max_in_flight = max_in_flight
        self.request_timeout = request_timeout
        self.retry_timeout = retry_timeout
        self.transaction_timeout = transaction_timeout
        # Wall time for the records' create time (the seam the simulator replaces).
        self._wall_clock = wall_clock
        self._wall = edge_defaults(selector.clock, selector.rng, wall_clock)[2]
        # Called with (records, bytes) acknowledged, as acknowledgements arrive.
        self.on_progress = on_progress
        self.reader = PartitionReader(selector, timeout=request_timeout)
        self.committed_reader = PartitionReader(
            selector, timeout=request_timeout, isolation=IsolationLevel.READ_COMMITTED
        )
        self._backoff = LOAD_BACKOFF
        # Which checkpoints count on resume (the load rules in effect when built).
        self._checkpoint_committed = current_rules().checkpoint_committed

    def _timestamp_ms(self) -> int:
        return int(self._wall() * 1000)

    def __repr__(self) -> str:
        return f"<BulkLoader {self.topic} load={self.load_id} guarantee={self.guarantee}>"

    # -- choosing the backend -------------------------------------------------------------

    async def choose_backend(self, partitions: int) -> Backend:
        """CAS where every partition is CAS-checked, transactions elsewhere (`auto`); a
        forced guarantee is checked (see the module doc)."""
        if self.guarantee == Backend.TRANSACTIONS.value:
            return Backend.TRANSACTIONS
        gate = cas_gate(self.selector)
        try:
            for partition in range(partitions):
                await gate.check(self.topic, partition)
        except CasNotSupportedError as exc:
            if self.guarantee == Backend.CAS.value:
                raise
            logger.info(
                "load %s into %s: transactional (no CAS here: %s)", self.load_id, self.topic, exc
            )
            return Backend.TRANSACTIONS
        logger.info("load %s into %s: exactly_once_cas", self.load_id, self.topic)
        return Backend.CAS

    def transactional_producer(self, transactional_id: str) -> Any:
        """`open_producer(...)` of the transactional backend (an async context manager)."""
        selector = self.selector
        return open_producer(
            selector=selector,
            clock=selector.clock,
            rng=selector.rng,
            wall_clock=self._wall_clock,
            transactional_id=transactional_id,
            transaction_timeout=self.transaction_timeout,
            batch_size=self.batch_bytes,
            max_request_size=max(self.batch_bytes * 2, 1024 * 1024),
            buffer_memory=max(4 * self.chunk_bytes, 32 * 1024 * 1024),
            linger=0.002,
            request_timeout=self.request_timeout,
            # The load has one span of its own (run), not one per row.
            telemetry=False,
        )

    # -- resuming ----------------------------------------------------------------------

    def load_routing(self, guarantee: str, partitions: int) -> dict[str, object]:
        """The routing this load records with its checkpoints (producer/_rows.py), for
        the guarantee it uses ("exactly_once_cas" or "transactional")."""
        return {
            "partitions": partitions,
            "partitioner": PARTITIONER,
            "guarantee": guarantee,
            **self.routing,
        }

    async def resume_point(
        self, partition: int, reader: PartitionReader | None = None
    ) -> tuple[int, int, bool]:
        """(log end offset, last row of this load in the partition or -1, whether other
        records follow that row)."""
        end, record, foreign = await self.last_checkpoint(partition, reader)
        return end, self._row(record), foreign

    def _row(self, checkpoint: Record | None) -> int:
        """The input row of a checkpoint of this load (-1: none)."""
        row = None if checkpoint is None else row_of(checkpoint, self._load)
        return -1 if row is None else row

    async def last_checkpoint(
        self, partition: int, reader: PartitionReader | None = None
    ) -> Checkpoint:
        """(log end offset, the last checkpoint record of this load in the partition or
        None, whether other records follow it)."""
        reader = reader or self.reader
        topic = self.topic
        end = await reader.log_end_offset(topic, partition)
        start = await reader.log_start_offset(topic, partition)
        if end <= start:
            return end, None, False
        if reader.read_committed:
            return await self._committed_checkpoint(partition, start, end)
        tail = await reader.read_at(topic, partition, end - 1)
        if tail is not None and row_of(tail, self._load) is not None:
            return end, tail, False
        high = end
        while high > start:
            low = max(start, high - _SCAN_WINDOW)
            found: Record | None = None
            async for record in reader.read(topic, partition, start=low, end=high):
                if row_of(record, self._load) is not None:
                    found = record
            if found is not None:
                return end, found, True
            high = low
        return end, None, False

    def check_checkpoint(
        self, partition: int, record: Record | None, routing: Mapping[str, object]
    ) -> None:
        """Refuse to resume after `record`, `partition`'s last checkpoint of this load,
        unless it records `routing` (see the module doc)."""
        if record is not None:
            where = f"its checkpoint at row {row_of(record, self._load)} in partition {partition}"
            self.check_routing(routing_of(record), routing, where)

    def check_routing(
        self, recorded: Mapping[str, object] | None, routing: Mapping[str, object], where: str
    ) -> None:
        """Refuse to resume this load with `routing` unless it began with it (`recorded`
        where `where` says; None: nothing recorded, an older trio-kafka's load): a
        `ConfigError` naming each difference and how to start afresh instead."""
        where = f"load {self.load_id!r} into {self.topic} ({where})"
        if recorded is None:
            raise ConfigError(
                f"{where} records no routing: it was written by an older trio-kafka, which "
                "did not record how rows were routed, so this run cannot check that it "
                "routes them the same way (another key field, format or partition count "
                "would load some rows twice and others never). Finish that load with the "
                f"version that began it, or {_FRESH}"
            )
        changes = routing_changes(recorded, routing)
        if changes:
            raise ConfigError(
                f"{where} began with other routing than this run's: {'; '.join(changes)}. "
                "Resuming with it would skip rows by numbers that now name other rows, "
                "loading some twice and others never: run it again with the options it "
                f"began with, or {_FRESH}"
            )

    async def finished(self, rows: int) -> LoadResult | None:
        """The result of this load if it is finished for an input of `rows` rows, judged
        from its checkpoints alone (see the module doc), else None (run it). A
        resume with other routing is refused, as `run` refuses it. A topic that does not
        exist is not created (None)."""
        if not await self._topic_exists():
            return None
        count = (await self.selector.wait_for_topic(self.topic)).partition_count
        backend = await self.choose_backend(count)
        reader = self.committed_reader if backend is Backend.TRANSACTIONS else self.reader
        points = await self._checkpoints(backend, [], count, reader)
        return self._finished_result(backend, points, rows)

    async def _topic_exists(self) -> bool:
        """Whether the topic exists, asked without letting the broker create it (the
        selector's own metadata requests may: `allow_auto_create_topics`)."""
        selector = self.selector
        request = MetadataRequest(
            topics=[MetadataRequestTopic(name=self.topic)], allow_auto_topic_creation=False
        )
        response = await selector.request(
            selector.least_loaded_node(), request, timeout=self.request_timeout
        )
        return any(t.name == self.topic and t.error_code == ErrorCode.NONE for t in response.topics)

    def _finished_result(
        self, backend: Backend, points: list[Checkpoint], rows: int
    ) -> LoadResult | None:
        """The result of a finished load of `rows` rows (module doc), or None."""
        markers = [EndMarker.of(r) if r is not None else None for _, r, _ in points]
        ends = [m for m in markers if m is not None]
        if not ends or len(ends) != sum(r is not None for _, r, _ in points):
            return None  # not every partition of the load saw the input's end
        with_rows = ends[0].partitions_with_rows
        if (
            any((m.rows, m.partitions_with_rows) != (rows, with_rows) for m in ends)
            or len(ends) != with_rows
            or sum(m.partition_rows for m in ends) != rows
        ):
            return None
        partitions = tuple(
            PartitionLoad(
                partition,
                end,
                end,
                self._row(record),
                0,
                0 if marker is None else marker.partition_rows,
            )
            for partition, ((end, record, _), marker) in enumerate(
                zip(points, markers, strict=True)
            )
        )
        logger.info("load %s into %s: finished already (%d rows)", self.load_id, self.topic, rows)
        return LoadResult(self.load_id, 0, rows, partitions, backend.value)

    async def _committed_checkpoint(self, partition: int, start: int, end: int) -> Checkpoint:
        """`resume_point` as a read_committed reader would see it, judged from the
        transaction markers in the log (`committed_newest_first`) instead of the
        broker's read_committed answers: Tansu shows aborted records to read_committed
        readers, and a resume from the checkpoint of a crashed run's aborted chunk would
        never load that chunk's rows. The same answer as read_committed on Kafka."""
        topic = self.topic
        # From the high watermark down: the markers past the last stable offset count.
        high = await self.reader.log_end_offset(topic, partition)
        markers: dict[int, bool] = {}
        while high > start:
            low = max(start, high - _SCAN_WINDOW)
            batches = await self.reader.batches(
                topic, partition, low, high, first=low == start, timeout=self.request_timeout
            )
            for record in committed_newest_first(batches, markers, self._checkpoint_committed):
                if row_of(record, self._load) is not None:
                    return end, record, record.offset != end - 1
            high = low
        return end, None, False

    def _pipeline(
        self, backend: Backend, partition: int, point: tuple[int, int, bool], routing: bytes = b""
    ) -> LoadPipeline:
        end, row, foreign = point
        rng = self.selector.rng
        return LoadPipeline(
            self.topic,
            partition,
            self._load,
            backend=backend,
            log_end_offset=end,
            resumed_after_row=row,
            foreign_after=foreign,
            batch_bytes=self.batch_bytes if backend is Backend.CAS else self.chunk_bytes,
            max_in_flight=self.max_in_flight,
            retry_timeout=self.retry_timeout,
            backoff=lambda attempts: self._backoff.backoff(attempts, rng),
            routing=routing,
        )

    # -- the load ------------------------------------------------------------------------

    async def run(self, rows: Iterable[Row]) -> LoadResult:
        """Load `rows` (values, or (key, value) pairs); returns what this run did.

        With OpenTelemetry configured (docs/observability.md), the run is one `load
        {topic}` span (no span per row)."""
        telemetry = telemetry_for(None, "trio-kafka")
        if telemetry is None:
            return await self._run(rows)
        span = telemetry.begin_load(self.topic, self.load_id)
        try:
            with telemetry.current(span):
                result = await self._run(rows)
        except BaseException as exc:
            telemetry.end_load(span, None, exc)
            raise
        telemetry.end_load(span, result, None)
        return result

    async def _run(self, rows: Iterable[Row]) -> LoadResult:
        if isinstance(rows, str | bytes | bytearray | memoryview) or not isinstance(rows, Iterable):
            raise TypeError(
                f"rows must be an iterable of rows (bytes values, or (key, value) pairs), "
                f"not a {type(rows).__name__}: for one row, pass [row]"
            )
        selector, topic = self.selector, self.topic
        meta = await selector.wait_for_topic(topic)
        count = meta.partition_count
        backend = await self.choose_backend(count)
        async with contextlib.AsyncExitStack() as stack:
            producers: list[Producer] = []
            if backend is Backend.TRANSACTIONS:
                for partition in range(count):
                    transactional_id = transactional_id_for(self.load_id, topic, partition)
                    producers.append(
                        await stack.enter_async_context(
                            self.transactional_producer(transactional_id)
                        )
                    )
            reader = self.committed_reader if backend is Backend.TRANSACTIONS else self.reader
            checkpoints = await self._checkpoints(backend, producers, count, reader)
            if isinstance(rows, Sized):
                done = self._finished_result(backend, checkpoints, len(rows))
                if done is not None:
                    return done
            routing = encode_routing(self.load_routing(backend.value, count))
            parts: list[_Partition | TxnPartition] = []
            for partition, (end, record, foreign) in enumerate(checkpoints):
                point = (end, self._row(record), foreign)
                pipe = self._pipeline(backend, partition, point, routing)
                if backend is Backend.CAS:
                    parts.append(_CasPartition(self, pipe))
                else:
                    parts.append(TxnPartition(self, pipe, producers[partition]))
                stack.callback(parts[-1].discard)
            try:
                async with anyio.create_task_group() as nursery:
                    for part in parts:
                        nursery.start_soon(part.run)
                    await self._feed(rows, parts, count)
                    # Not after a failed feed: a transactional task would take its open
                    # chunk for the input's end (a RuntimeError beside the failure).
                    for part in parts:
                        await part.close_input()
            except BaseExceptionGroup as group:
                # One partition's error (the others were cancelled, by the task group or
                # by an enclosing scope at the same moment): raise it as itself.
                error = sole_error(group)
                if error is not None:
                    raise error from None
                raise
        pipes = [part.pipe for part in parts]
        if backend is Backend.CAS:
            ends = [p.next_offset for p in pipes]  # exact: the batches are contiguous
        else:  # commit markers (and other writers) take offsets too: ask the broker
            ends = [await self.reader.log_end_offset(topic, p.partition) for p in pipes]
        return LoadResult(
            self.load_id,
            sum(p.loaded for p in pipes),
            sum(p.skipped for p in pipes),
            tuple(_summary(p, end) for p, end in zip(pipes, ends, strict=True)),
            backend.value,
        )

    async def _checkpoints(
        self,
        backend: Backend,
        producers: list[Producer],
        count: int,
        reader: PartitionReader,
    ) -> list[Checkpoint]:
        """Every partition's last checkpoint, the partitions at once (a round trip or a
        few each), each refused unless it records this run's routing. With `producers`
        (transactions): after the partition's `init_transactions`, which fences an older
        instance of the load and settles its open transaction."""
        points: list[Checkpoint] = [(0, None, False)] * count

        async def resume(partition: int) -> None:
            if producers:
                await producers[partition].init_transactions()
            points[partition] = await self.last_checkpoint(partition, reader)

        try:
            async with anyio.create_task_group() as tasks:
                for partition in range(count):
                    tasks.start_soon(resume, partition)
        except BaseExceptionGroup as group:
            error = sole_error(group)
            if error is not None:
                raise error from None
            raise
        routing = self.load_routing(backend.value, count)
        for partition, (_, record, _) in enumerate(points):
            self.check_checkpoint(partition, record, routing)
        return points

    async def _feed(
        self, rows: Iterable[Row], parts: list[_Partition | TxnPartition], count: int
    ) -> None:
        """Route rows to their partitions' pipelines, `FEED_BLOCK` input rows at a time
        (each partition's share as one run); wake a partition's task for each batch its
        pipeline sealed."""
        pipes = [part.pipe for part in parts]
        stamp = self._timestamp_ms()
        source = iter(rows)
        # murmur2 partition of recently seen keys (keyed loads repeat keys), bounded.
        key_partitions: dict[bytes, int] = {}
        first = 0
        while block := list(itertools.islice(source, FEED_BLOCK)):
            if {*map(type, block)} <= UNKEYED:
                runs = unkeyed_runs(block, first, count)
            else:
                runs = keyed_runs(block, first, count, key_partitions)
            any_sealed = False
            for partition, run_rows, run_keys, run_values in runs:
                sealed = pipes[partition].add_run(run_rows, run_keys, run_values, stamp)
                await parts[partition].fed(sealed)
                any_sealed = any_sealed or sealed > 0
            if any_sealed:
                stamp = self._timestamp_ms()
            first += len(block)
        # The input ended: each partition's last checkpoint says so (module doc).
        with_rows = sum(1 for pipe in pipes if pipe.given)
        for part in parts:
            end = EndMarker(first, with_rows, part.pipe.given).encode()
            await part.fed(1 if part.pipe.finish(stamp, end) else 0)

    def _progress(self, records: int, size: int) -> None:
        if self.on_progress is not None:
            self.on_progress(records, size)


def _check_numbers(**numbers: object) -> None:
    """Sizes (ints) and times (`*_timeout`) by type: a str failed later, naming nothing."""
    for name, value in numbers.items():
        seconds = name.endswith("_timeout")
        if value is None and name == "chunk_bytes":
            continue  # the default: 8 batches
        if isinstance(value, bool) or not isinstance(value, int | float if seconds else int):
            raise ConfigError(
                f"{name}={value!r} is not allowed: it must be "
                f"{'a number of seconds' if seconds else 'an int'}, not {type(value).__name__}"
            )


def _summary(pipe: LoadPipeline, end: int) -> PartitionLoad:
    return PartitionLoad(
        pipe.partition, pipe.start_offset, end, pipe.resumed_after_row, pipe.loaded, pipe.skipped
    )


@contextlib.asynccontextmanager
async def open_bulk_loader(
    topic: str,
    load_id: str,
    *,
    bootstrap: str | None = None,
    selector: KafkaSelector | None = None,
    tls: ssl.SSLContext | bool | None = None,
    sasl: SaslConfig | None = None,
    **options: Any,
) -> AsyncIterator[BulkLoader]:
    """A `BulkLoader` over its own selector (`bootstrap=`) or a shared one (`selector=`).

    With `bootstrap=`, TLS and SASL as `open_producer` takes them: `tls=` (an
    `ssl.SSLContext`, or True: the system trust store), `sasl=SaslConfig(...)`, or
    Kafka's names (`security_protocol`, `sasl_mechanism`, `sasl_plain_username`,
    `sasl_plain_password`, `ssl_cafile`, ...; docs/security.md). The other `options`
    are `BulkLoader`'s."""
    security = pop_security(options, tls, sasl)  # Kafka's security names leave options
    async with contextlib.AsyncExitStack() as stack:
        if selector is None:
            if bootstrap is None:
                raise ConfigError("open_bulk_loader needs bootstrap= or selector=")
            selector = await stack.enter_async_context(
                open_selector(bootstrap, transport=security.transport(None), sasl=security.sasl)
            )
        elif security != Security():
            raise ConfigError(
                "tls=, sasl= and the security options belong to the selector: pass them "
                "with bootstrap=, or a selector= that has them, not both"
            )
        yield BulkLoader(selector, topic, load_id, **options)


__all__ = [
    "GUARANTEES",
    "LOAD_HEADER",
    "ROW_HEADER",
    "BulkLoader",
    "Checkpoint",
    "LoadResult",
    "PartitionLoad",
    "Row",
    "one_batch_request",
    "open_bulk_loader",
    "partition_of",
    "row_of",
    "transactional_id_for",
]
