"""`BulkLoader`: load an iterable of rows into a topic exactly once, resumably, on any
Kafka broker; and `load_partition`, one partition of a load fed by another process. The
shell of the load pipeline (core/_load.py): this module does the I/O the pipeline
asks for, with one task per partition for the backend the load uses.

Theory of operation
-------------------
Rows are numbered by their position in the input and each goes to the partition its
row alone decides (`partition_of`). Per partition, a `LoadPipeline` cuts the rows into
batches and decides every write.

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

Routing. Every checkpoint records the load's routing (core/_load.py): the partition
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

The feeder (`_feed`) routes rows to their pipelines a block (`_FEED_BLOCK` rows) at a
time: each partition's share of the block goes to its pipeline as one run (`add_run`:
lists, not a call per row): rows without keys are a strided slice of the block
(`_unkeyed_runs`); keyed rows go by murmur2 of the key (`_keyed_runs`, with a bounded
cache of recent keys). A row that is not bytes, None or a (key, value) pair is refused
with its row number. The partition's task is then told (`fed`). The feeder holds one
block.

The CAS backend (`_CasPartition`). A sealed batch is handed on through a zero-capacity
channel (`_Partition`), so a partition has at most its window plus one batch in memory.
The task sends `next_send` batches to the leader (`send_to_leader`, the one leader call
in net/_leader.py, one batch a request: `one_batch_request`, so each answer settles
exactly one batch), awaits answers oldest first and feeds them to `on_answer`; it asks
for an idempotent producer id when the pipeline needs one (`init_idempotent_producer_id`,
client/_producer_id.py: the producer's own loop, with the loader's
`transaction_timeout`), sleeps `poll_delay`, refreshes metadata when told, and reads the
record `read_offset` names after a mismatch. Every retry backs off with the one backoff,
`LOAD_BACKOFF` (its own `retry_backoff` and `retry_backoff_max`, 50 ms to 1 s).

The transactional backend (`TxnPartition`). One task per partition writes each chunk
the pipeline cuts in one transaction of the partition's transactional `Producer` (the
producer core's own sequencing, batching, retries and transaction machinery). A chunk's
last row is its checkpoint, so rows and checkpoint commit together; a committed
transaction is a contiguous run of the partition's rows, and the last committed
checkpoint says exactly what is loaded.

- Streamed. The rows of the oldest uncommitted chunk go to its transaction as the
  feeder adds them (`stream_rows`, one `send_many` a run, which fills whole batches),
  not once the chunk is sealed: they are handed on while still in the CPU's caches (a
  sealed 4 MiB chunk had gone cold: each later pass over its rows cost a cache miss per
  row), the producer sends batches from the first run on, and the chunk is committed as
  soon as its last run arrives. The open batch's last row is held back (it becomes the
  checkpoint if the batch is sealed after it). While a transaction commits, the feeder
  goes on and the next chunk's rows wait in the pipeline; the feeder waits when a
  partition has two sealed chunks not committed (`fed`), so memory stays bounded by
  about three chunks a partition.
- A transaction is open while its chunk's rows are being read, so a chunk whose rows
  come slowly is sealed early (`_SEAL_AFTER` of the transaction timeout after it began)
  and committed, before the coordinator would abort it for its age (unless reading one
  block of the input alone takes longer: the input is read synchronously, and nothing
  runs meanwhile).
- Failures: an abortable one aborts the transaction, and the chunk's rows go again from
  its first (`restream`; aborted rows are invisible to read_committed readers); a
  commit whose answer was lost is settled by re-initialising and reading the committed
  checkpoint back (in: go on; not in: write the chunk again); anything else (a fence:
  another instance of the load took over) stops the load, and a rerun resumes from the
  committed checkpoint.

One partition from chunks (`load_partition`). A load split over processes (a Spark task
holds one Kafka partition's rows) has the row numbers already: each `RowChunk` carries
its rows' input numbers, increasing, and every row must belong to this partition by the
one rule (`partition_of`), so the log is the same one `BulkLoader` would write for the
same rows, and either can resume the other. The rows go through the same pipeline and
the same checks: CAS through `_CasPartition`; transactions *held* (`_HeldTxnPartition`):
the rows go into ONE transaction of a transactional producer (`transactional_id`, one
per writer attempt) that is left open at the end and handed off
(`Producer.hand_off_transaction`): another process (the Spark driver) commits the
winning attempt's transaction and fences the others. Resume reads the committed
checkpoint (read_committed), so a partition a previous run committed is skipped. Memory:
a sealed batch goes through the zero-capacity channel, so at most the window plus one
batch of rows is held, whatever the size of the partition; a chunk is released once fed.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import ssl
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Callable,
    Iterable,
    Mapping,
    Sequence,
    Sized,
)
from typing import Any

import anyio
import anyio.lowlevel
import attrs

from trio_kafka.client._cas import cas_gate
from trio_kafka.client._open import edge_defaults, open_producer
from trio_kafka.client._producer import HandedOffTransaction, Producer
from trio_kafka.client._producer_id import init_idempotent_producer_id
from trio_kafka.client._reader import IsolationLevel, PartitionReader, committed_newest_first
from trio_kafka.client._security import Security, pop_security
from trio_kafka.client._telemetry import telemetry_for
from trio_kafka.core import (
    DEFAULT_BATCH_BYTES,
    LOAD_HEADER,
    LOADER_ROUTING,
    PARTITIONER,
    ROW_HEADER,
    Backend,
    EndMarker,
    ExponentialBackoff,
    Harness,
    LoadBatch,
    LoadPipeline,
    Row,
    Step,
    encode_routing,
    partition_of,
    routing_changes,
    routing_of,
    row_of,
    unrecorded,
)
from trio_kafka.errors import (
    AbortableError,
    AmbiguousError,
    BrokerError,
    CasNotSupportedError,
    ConcurrentWriteError,
    ConfigError,
    ErrorCode,
    KafkaError,
    error_for_code,
    refuses_records,
)
from trio_kafka.net import (
    KafkaSelector,
    SaslConfig,
    open_selector,
    open_task_group,
    send_to_leader,
    sole_error,
)
from trio_kafka.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic
from trio_kafka.protocol.messages.produce import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from trio_kafka.records import Record

logger = logging.getLogger("trio_kafka.load")

#: What a load refused CAS can do on the broker it has (`CasGate.check`'s remedy).
_LOAD_INSTEAD = (
    "load with guarantee='transactional' (or 'auto', which takes transactions where "
    "CAS is not possible)"
)

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
    #: the last stable offset once this run's commit markers are in, so a rerun that
    #: writes nothing reports the same end).
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


#: The load's retry_backoff and retry_backoff_max (the one backoff, core/_backoff.py).
#: Its own, not the selector's 100 ms: with the selector's, the simulator stopped catching
#: the planted bug load-restream-on at its seed (and in the 30 after it), so the load's
#: retries keep the timing the pinned seeds were found with.
LOAD_BACKOFF = ExponentialBackoff(0.05, 1.0)
# Between looks at the last stable offset while the last commit markers land (a few ms).
MARKER_BACKOFF = ExponentialBackoff(0.002, 0.1)


class BulkLoader:
    """Loads rows into `topic` over `selector` (see the module doc).

    `routing`: what made the rows from the caller's input, as names to JSON values
    (e.g. `{"key_field": "user", "format": "jsonl"}`; None values are unset). It is
    recorded with every checkpoint beside the partition count, partitioner and
    guarantee, and a resume with any other is refused (`ConfigError`).

    `harness` is for test harnesses only (the simulator): the rules the load's decisions
    follow and a fault hook, handed to its pipelines and transactional producers
    (`Harness`; None: the client as it ships)."""

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
        harness: Harness | None = None,
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
        # A test harness's rules and fault hook (core/_rules.py): the pipelines' rules,
        # and its transactional producers'.
        self._harness = harness = Harness.given(harness)
        # Which checkpoints count on resume.
        self._checkpoint_committed = harness.rules.checkpoint_committed

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
                await gate.check(self.topic, partition, instead=_LOAD_INSTEAD)
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
            harness=self._harness,
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
        """The routing this load records with its checkpoints (core/_load.py), for
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
        for name in unrecorded(recorded, routing):
            logger.warning(
                "%s was begun by an older trio-kafka, which did not record its %s: this "
                "run resumes it without checking that (%r now)",
                where,
                name,
                routing[name],
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
            rules=self._harness.rules,
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
            ends = [await self._settled_end(topic, p.partition) for p in pipes]
        return LoadResult(
            self.load_id,
            sum(p.loaded for p in pipes),
            sum(p.skipped for p in pipes),
            tuple(_summary(p, end) for p, end in zip(pipes, ends, strict=True)),
            backend.value,
        )

    async def _settled_end(self, topic: str, partition: int) -> int:
        """The partition's end once this run's commit markers are in: Kafka writes them
        after EndTxn has answered, so the end read at once may stop before the last
        marker (a load reported "ends at 1000", and a rerun that loaded nothing "ends at
        1001"). Waits, up to `request_timeout`, for the last stable offset to reach the
        end the records made; another writer's transaction still open there leaves it
        behind: then the end as read."""
        high = await self.reader.log_end_offset(topic, partition)
        with anyio.move_on_after(self.request_timeout):
            attempt = 0
            while True:
                stable = await self.committed_reader.log_end_offset(topic, partition)
                if stable >= high:
                    return stable
                await anyio.sleep(MARKER_BACKOFF.backoff(attempt, self.selector.rng))
                attempt += 1
        return high

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
        """Route rows to their partitions' pipelines, `_FEED_BLOCK` input rows at a time
        (each partition's share as one run); wake a partition's task for each batch its
        pipeline sealed."""
        pipes = [part.pipe for part in parts]
        stamp = self._timestamp_ms()
        source = iter(rows)
        # murmur2 partition of recently seen keys (keyed loads repeat keys), bounded.
        key_partitions: dict[bytes, int] = {}
        first = 0
        while block := list(itertools.islice(source, _FEED_BLOCK)):
            if {*map(type, block)} <= _UNKEYED:
                runs = _unkeyed_runs(block, first, count)
            else:
                runs = _keyed_runs(block, first, count, key_partitions)
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


# -- the feeder's runs ------------------------------------------------------------------

#: Input rows routed at a time: each partition's share of a block is one run (memory
#: bounded by the block; a partition's run is under one 4 MiB chunk of 100 B rows).
_FEED_BLOCK = 1 << 15
_UNKEYED = frozenset((bytes, type(None)))
_KEY_CACHE = 65536
#: One partition's share of a block: (partition, row numbers, keys or None, values).
_Run = tuple[int, Sequence[int], list[bytes | None] | None, list[bytes | None]]


def _unkeyed_runs(block: list[Any], first: int, count: int) -> list[_Run]:
    """Rows without keys go round robin by row number: partition p's share of the block
    (rows `first` on) is a slice with step `count`."""
    runs: list[_Run] = []
    for partition in range(count):
        offset = (partition - first) % count
        values = block[offset::count]
        if values:
            start = first + offset
            runs.append((partition, range(start, start + len(values) * count, count), None, values))
    return runs


def _keyed_runs(
    block: list[Any], first: int, count: int, key_partitions: dict[bytes, int]
) -> list[_Run]:
    """Rows with keys (and maybe some without): each to its partition (`partition_of`:
    murmur2 of the key, else round robin by row), in row order."""
    rows: list[list[int]] = [[] for _ in range(count)]
    keys: list[list[bytes | None]] = [[] for _ in range(count)]
    values: list[list[bytes | None]] = [[] for _ in range(count)]
    keyed = [False] * count
    for index, item in enumerate(block, first):
        if item.__class__ is tuple and len(item) == 2:
            key, value = item
        elif item is None or item.__class__ is bytes:
            key, value = None, item
        else:
            key, value = _row_parts(index, item)
        if value is not None and value.__class__ is not bytes:
            value = _as_bytes(index, "value", value)
        if key is None:
            partition = index % count
        else:
            if key.__class__ is not bytes:
                key = _as_bytes(index, "key", key)
            partition = key_partitions.get(key, -1)
            if partition < 0:
                if len(key_partitions) >= _KEY_CACHE:
                    key_partitions.clear()
                partition = key_partitions[key] = partition_of(index, key, count)
            keyed[partition] = True
        rows[partition].append(index)
        keys[partition].append(key)
        values[partition].append(value)
    return [(p, rows[p], keys[p] if keyed[p] else None, values[p]) for p in range(count) if rows[p]]


def _row_parts(index: int, item: Any) -> tuple[Any, Any]:
    """(key, value) of an input row that is not plain bytes, None or a pair."""
    if isinstance(item, tuple):
        if len(item) != 2:
            raise TypeError(
                f"row {index} is a tuple of {len(item)} items: a keyed row is a (key, value) pair"
            )
        return item[0], item[1]
    return None, item


def _as_bytes(index: int, what: str, item: Any) -> bytes:
    if isinstance(item, bytes | bytearray | memoryview):
        return bytes(item)
    raise TypeError(
        f"the {what} of row {index} is a {type(item).__name__}: a row is bytes, None, or a "
        "(key, value) pair of bytes or None"
    )


# -- the CAS backend ------------------------------------------------------------------


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


class _Partition:
    """One partition's task: woken by the feeder for each sealed batch."""

    def __init__(self, loader: BulkLoader, pipe: LoadPipeline) -> None:
        self.loader = loader
        self.pipe = pipe
        self._send, self._receive = anyio.create_memory_object_stream[None](0)

    async def fed(self, sealed: int) -> None:
        """The feeder added rows to the pipeline, sealing `sealed` batches."""
        for _ in range(sealed):
            await self.sealed()

    async def sealed(self) -> None:
        try:
            await self._send.send(None)
        except anyio.BrokenResourceError:
            # The partition's task ended with an error (only that closes its end early):
            # the task group is cancelling us to raise it; wait for that, adding nothing
            # of ours to the group (trio's channel left the send waiting, cancelled).
            await anyio.sleep_forever()

    async def close_input(self) -> None:
        await self._send.aclose()

    def discard(self) -> None:
        """Close both ends (anyio's streams warn when dropped open; a task cancelled
        before it started never closed its end)."""
        self._send.close()
        self._receive.close()

    async def run(self) -> None:
        raise NotImplementedError


class _CasPartition(_Partition):
    """Drives a CAS pipeline (see the module doc)."""

    def __init__(self, loader: BulkLoader, pipe: LoadPipeline) -> None:
        super().__init__(loader, pipe)
        # batch -> the pending response of its request in flight, or the KafkaError
        # that kept it from leaving.
        self._pending: dict[LoadBatch, Any] = {}

    async def run(self) -> None:
        pipe = self.pipe
        async with self._receive:
            async for _ in self._receive:
                await self._pump()
                while self._must_settle():
                    await self._step()
        while not pipe.done:
            await self._step()

    def _must_settle(self) -> bool:
        pipe = self.pipe
        oldest = pipe.oldest_in_flight()
        if oldest is None:
            return pipe.queued > 0 and pipe.next_send(self.loader.selector.clock.now()) is None
        if len(pipe.in_flight) >= pipe.max_in_flight or pipe.queued > pipe.max_in_flight:
            return True
        pending = self._pending.get(oldest)
        return isinstance(pending, KafkaError) or (pending is not None and pending.done())

    async def _pump(self) -> None:
        loader, pipe = self.loader, self.pipe
        clock = loader.selector.clock
        while (batch := pipe.next_send(clock.now())) is not None:
            request = one_batch_request(
                loader.topic, pipe.partition, batch.data, timeout=loader.request_timeout
            )
            try:
                self._pending[batch] = await send_to_leader(
                    loader.selector,
                    loader.topic,
                    pipe.partition,
                    request,
                    timeout=loader.request_timeout,
                    backoff=loader._backoff,
                )
            except KafkaError as exc:
                self._pending[batch] = exc

    async def _step(self) -> None:
        """Make progress once: take the oldest answer, or do what the pipeline waits for."""
        loader, pipe = self.loader, self.pipe
        selector = loader.selector
        clock = selector.clock
        if (failed := pipe.error) is not None:
            raise failed
        batch = pipe.oldest_in_flight()
        if batch is None:
            if pipe.needs_producer_id:
                got = await init_idempotent_producer_id(
                    selector,
                    timeout=loader.request_timeout,
                    transaction_timeout=loader.transaction_timeout,
                    backoff=loader._backoff,
                    attempts=20,
                )
                assert got is not None  # wanted throughout: a None needs `wanted()` False
                pipe.set_producer(*got)
            delay = pipe.poll_delay(clock.now())
            if delay > 0:
                await anyio.sleep(delay)
            if pipe.refresh_metadata:
                with contextlib.suppress(KafkaError):
                    await selector.refresh_metadata([loader.topic])
                pipe.metadata_refreshed()
            await self._pump()
            return
        code, message, log_end = await self._answer(batch)
        step = pipe.on_answer(batch, code, clock.now(), message)
        if step is Step.READ:
            record = await loader.reader.read_at(
                loader.topic, pipe.partition, pipe.read_offset(batch)
            )
            row = row_of(record, loader._load) if record is not None else None
            step = pipe.on_read(batch, row, log_end)
        if step is Step.FAIL:
            error = pipe.error
            assert error is not None
            if isinstance(error, ConcurrentWriteError):
                error.foreign_record = await loader.reader.read_at(
                    loader.topic, pipe.partition, batch.expected_offset
                )
            raise error
        if step is Step.ACKNOWLEDGED:
            loader._progress(batch.count, batch.size)
        await self._pump()

    async def _answer(self, batch: LoadBatch) -> tuple[int | None, str, int]:
        """(the partition's error code or None when no answer came, message, log end)."""
        pending = self._pending.pop(batch)
        if isinstance(pending, KafkaError):
            return None, str(pending), -1
        try:
            response = await pending.wait()
        except KafkaError as exc:
            return None, str(exc), -1
        answer = response.responses[0].partition_responses[0]
        return answer.error_code, answer.error_message or "", answer.base_offset


# -- the transactional backend ------------------------------------------------------

#: A transaction still waiting for its chunk's rows after this share of the
#: transaction timeout is committed with the rows it has.
_SEAL_AFTER = 0.25


async def _send_chunk(producer: Producer, topic: str, partition: int, chunk: LoadBatch) -> None:
    """Append a whole sealed chunk to `partition`: its rows in bulk (full batches of the
    partition), then the checkpoint row with its headers, last."""
    if chunk.values:
        await producer.send_many(chunk.values, topic=topic, partition=partition, keys=chunk.keys)
    await _send_checkpoint(producer, topic, partition, chunk)


async def _send_checkpoint(
    producer: Producer, topic: str, partition: int, chunk: LoadBatch
) -> None:
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

    def __init__(self, loader: BulkLoader, pipe: LoadPipeline, producer: Producer) -> None:
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
                refused = _rows_refused(exc)
                if refused is not None:
                    # The broker refuses the rows themselves: every retry would too.
                    rows = f"after row {pipe.checkpoint}" if pipe.checkpoint >= 0 else "from row 0"
                    raise error_for_code(
                        refused.code,
                        f"{topic}-{partition}: the broker refuses rows of the chunk {rows}, "
                        f"so the load stops (nothing of that chunk "
                        f"is visible: its transaction was aborted; a rerun resumes there "
                        f"and meets the same rows): {refused.error_message}",
                    ) from exc
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
                await _send_checkpoint(producer, topic, partition, chunk)
                return chunk
            if self._closed:
                raise RuntimeError(f"{self!r}: the input ended with a chunk left open")
            with anyio.move_on_after(seal_at - clock.now()):
                await self._rows.wait()
                continue
            # The rows come slowly: commit the chunk with the rows it has.
            if not pipe.finish(loader._timestamp_ms()):
                raise RuntimeError(f"{self!r}: a transaction open without rows")


# -- one partition from chunks (load_partition) ---------------------------------------


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
            await _send_chunk(producer, topic, partition, chunk)
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


__all__ = [
    "GUARANTEES",
    "LOAD_HEADER",
    "ROW_HEADER",
    "BulkLoader",
    "Checkpoint",
    "LoadResult",
    "PartitionLoad",
    "PartitionLoadResult",
    "Row",
    "RowChunk",
    "TxnPartition",
    "load_partition",
    "one_batch_request",
    "open_bulk_loader",
    "partition_of",
    "row_of",
    "transactional_id_for",
]


def _rows_refused(error: BaseException) -> BrokerError | None:
    """The broker's refusal of the rows behind an aborted chunk, if that is its cause
    (`refuses_records`: a retry meets it again)."""
    for candidate in (error, getattr(error, "cause", None)):
        if refuses_records(candidate):
            assert isinstance(candidate, BrokerError)
            return candidate
    return None
