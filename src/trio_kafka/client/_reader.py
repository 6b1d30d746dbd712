"""A small partition reader: ListOffsets and a Fetch loop over one partition.

Theory of operation
-------------------
`PartitionReader` is what the conditional writer ("was the record at offset N mine?"),
the bulk loader (where did the last run stop?), `trio-kafka tail`, the demo's read-back
and the simulator's final reads use. It is not a consumer: no groups, no committed
offsets, no fetch sessions, no prefetching. Every call asks the partition's leader
directly through the shared `KafkaSelector`, one request at a time.

- Leader: taken from the selector's metadata snapshot (waiting for the topic when it is
  not known yet). An answer that says the metadata is stale (NOT_LEADER_OR_FOLLOWER,
  UNKNOWN_TOPIC_OR_PARTITION, FENCED_LEADER_EPOCH, UNKNOWN_TOPIC_ID, any code with
  `invalid_metadata` in the error table), or a lost connection or timed-out request
  (reads change nothing, so retrying is always safe), refreshes the metadata, backs off
  (`retry_backoff` of the selector's config, jittered with the selector's rng) and
  tries again. Other retriable codes back off without a refresh. OFFSET_OUT_OF_RANGE
  raises `OffsetOutOfRangeError` with the partition's bounds; other codes raise.
- Fetch versions: the highest the connection negotiated, except that without a topic id
  in the metadata (Metadata < v10, or a broker that sends the null id) we stay at v12,
  the last version that names topics, because v13+ only takes ids. read_committed needs
  v4+ (the aborted-transactions list); a broker without it is refused with an error.
- Records: each response's `records` may hold several batches and end in a batch cut by
  `max_bytes` (decoded with `allow_partial`, and fetched again next round). A batch may
  begin before the offset asked for (the broker sends whole batches): its earlier records
  are dropped. Control batches are never yielded. With read_committed, records of
  aborted transactions are dropped the way Kafka consumers do it: the response lists
  (producer id, first offset) of the aborted transactions it overlaps; walking batches
  in offset order, a producer id becomes "aborted" once a batch reaches its first
  offset, its transactional batches are dropped while it is, and its ABORT marker ends
  that (`select_records`, pure, tested on hand-built batches).
- Position: the next offset to fetch is the end of the last complete batch seen
  (control and dropped batches included), so a read always moves forward. A `read`
  without an `end` stops at the high watermark (the last stable offset with
  read_committed) that its first Fetch answer reports.
- Tansu: a Fetch with MaxWaitMs 0 gets an answer without topics, so we send at least
  1 ms (and treat a missing partition as an empty answer); its ListOffsets "latest" is
  the last batch's base offset + 1 (`read_end` asks Fetch); read_committed is not implemented (the last stable
  offset is the high watermark, the aborted list is empty), so aborted records show.
- Time: nothing here reads a clock or draws a random number except the selector's
  `clock` and `rng`, so the simulator can run it deterministically. Every call is bounded
  by `timeout`: `log_end_offset`, `log_start_offset` and `read_at` as a whole, and a
  `read` per step, meaning it raises `ReadTimeoutError` once it has gone `timeout`
  seconds without moving forward (a long read of a big partition never times out
  while it keeps moving). An empty answer before `end` is waited out for up to
  `max_wait` (the broker's long poll; we sleep out the rest if it answered early).

This module holds the reader's whole job: the calls (`PartitionReader`), the
iteration of `read` (`PartitionRead`), which answers retry (`check_code`) and the Fetch
version (`fetch_version`), and what a Fetch answer means, pure (`select_records`,
`FetchResult`, and the judgement of transaction markers from the log itself:
`committed_newest_first`, `CommittedInOrder`). Finding the leader, sending and the
retry loop are the one leader call's (net/_leader.py: `leader_of`, `ask`, `retrying`).
"""

from __future__ import annotations

import collections
import enum
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import TypeVar

import attrs

from trio_kafka.core import ExponentialBackoff, must_be_positive, must_not_be_negative
from trio_kafka.errors import (
    BrokerConnectionError,
    ConfigError,
    CorruptRecordError,
    ErrorCode,
    KafkaError,
    OffsetOutOfRangeError,
    ProtocolError,
    ReadTimeoutError,
    error_for_code,
    error_info,
)
from trio_kafka.net import (
    KafkaSelector,
    Retry,
    ask,
    leader_of,
    retrying,
    sleep_until,
)
from trio_kafka.protocol.messages.fetch import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    PartitionData,
)
from trio_kafka.protocol.messages.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from trio_kafka.records import (
    ControlType,
    Record,
    RecordBatch,
    decode_batches,
    parse_control_record,
)

_T = TypeVar("_T")
_NULL_UUID = uuid.UUID(int=0)

#: ListOffsets timestamps (KIP-79): the latest offset and the earliest one.
_LATEST = -1
_EARLIEST = -2


# -- what a Fetch answer means (pure) ---------------------------------------------------


class IsolationLevel(enum.IntEnum):
    """Fetch and ListOffsets `IsolationLevel` (KIP-98)."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


def _isolation(value: IsolationLevel | str | int) -> IsolationLevel:
    if isinstance(value, str):
        try:
            return IsolationLevel[value.upper()]
        except KeyError:
            raise ConfigError(
                f"isolation must be 'read_uncommitted' or 'read_committed', not {value!r}"
            ) from None
    return IsolationLevel(value)


def select_records(
    batches: Iterable[RecordBatch],
    *,
    start: int,
    end: int | None = None,
    read_committed: bool = False,
    aborted_transactions: Iterable[tuple[int, int]] | None = None,
) -> tuple[list[Record], int]:
    """The records of `batches` a reader sees in `[start, end)`, and the next offset to
    fetch (the end of the last batch, at least `start`).

    `aborted_transactions` are the response's (producer_id, first_offset) pairs; with
    `read_committed`, transactional records of a producer id are dropped from its first
    offset up to its ABORT marker. Control batches are never returned.
    """
    # Aborted transactions not yet reached, in offset order (the broker sends them so,
    # but nothing says it must).
    pending = collections.deque(
        sorted(aborted_transactions or (), key=lambda pair: (pair[1], pair[0]))
    )
    # Producer ids whose records are being dropped (reached their first offset, no
    # ABORT marker yet).
    aborted: set[int] = set()
    records: list[Record] = []
    position = start
    for batch in batches:
        position = max(position, batch.next_offset)
        if read_committed and batch.producer_id >= 0:
            while pending and pending[0][1] <= batch.last_offset:
                aborted.add(pending.popleft()[0])
            if batch.is_control:
                if _is_abort_marker(batch):
                    aborted.discard(batch.producer_id)
                continue
            if batch.is_transactional and batch.producer_id in aborted:
                continue
        if batch.is_control:
            continue
        records.extend(
            r for r in batch.records if r.offset >= start and (end is None or r.offset < end)
        )
    return records, position


def _is_abort_marker(batch: RecordBatch) -> bool:
    # A control batch holds one control record; its key says COMMIT or ABORT. Other
    # types (KRaft's, or ones newer than us) are not markers: skip them, as Kafka does.
    for record in batch.records:
        try:
            if parse_control_record(record).type == ControlType.ABORT:
                return True
        except CorruptRecordError:
            continue
    return False


@attrs.frozen(slots=True)
class FetchResult:
    """One Fetch answer for one partition, after filtering."""

    #: The records a reader sees, in offset order, from the offset asked for.
    records: list[Record]
    #: Where the next fetch starts: past every complete batch of the answer.
    next_offset: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    #: Every batch of the answer as decoded (control batches and, with read_committed,
    #: aborted ones included): for callers that judge the markers themselves.
    batches: list[RecordBatch] = attrs.field(factory=list)

    def log_end(self, read_committed: bool) -> int | None:
        """The log end this answer reports: the last stable offset with read_committed,
        else the high watermark; None when it reports none (a partition left out)."""
        if read_committed and self.last_stable_offset >= 0:
            return self.last_stable_offset
        return self.high_watermark if self.high_watermark >= 0 else None


def committed_newest_first(
    batches: Iterable[RecordBatch],
    next_marker: dict[int, bool],
    counts: Callable[[bool | None], bool] = lambda marker: marker is True,
) -> Iterator[Record]:
    """The records of `batches` (consecutive, in offset order) a read_committed reader
    sees, newest first, judged from the transaction markers in the log itself rather
    than from the broker's last stable offset and aborted-transactions list (which
    Tansu does not keep: it shows aborted records to read_committed readers).

    A transactional batch is seen only when the first marker of its producer id after
    it is a COMMIT; with no marker after it (an open transaction) or an ABORT, it is
    not. `next_marker` maps producer id -> whether that first marker is a COMMIT, for
    the log after these batches: start with {} at the log end and pass the same dict
    when going on to earlier batches (it is updated). `counts(first marker after)`
    decides (the load rules' `checkpoint_committed`: a COMMIT, not an ABORT or none)."""
    for batch in reversed(list(batches)):
        if batch.is_control:
            if batch.producer_id >= 0:
                next_marker[batch.producer_id] = not _is_abort_marker(batch)
            continue
        if batch.is_transactional and not counts(next_marker.get(batch.producer_id)):
            continue
        yield from reversed(batch.records)


@attrs.define(slots=True)
class _Held:
    batch: RecordBatch
    committed: bool | None = None  # None: no marker of its producer id after it yet


@attrs.define(eq=False)
class CommittedInOrder:
    """`committed_newest_first`'s judgement going forward: the records a read_committed
    reader sees, in offset order, from consecutive batches fed in offset order (window
    after window). A transactional batch is held until the first marker of its producer
    id after it: a COMMIT releases it, an ABORT drops it; the batches after a held one
    wait behind it (offset order). `first_held` is where a read must end: the first
    batch no marker has decided yet (None: nothing held)."""

    _held: collections.deque[_Held] = attrs.field(factory=collections.deque)

    @property
    def first_held(self) -> int | None:
        return self._held[0].batch.base_offset if self._held else None

    def feed(self, batches: Iterable[RecordBatch]) -> Iterator[Record]:
        held = self._held
        for batch in batches:
            if batch.is_control:
                if batch.producer_id >= 0:
                    commit = not _is_abort_marker(batch)
                    for entry in held:
                        if entry.committed is None and entry.batch.producer_id == batch.producer_id:
                            entry.committed = commit
            elif batch.is_transactional:
                held.append(_Held(batch))
            elif held:
                held.append(_Held(batch, True))
            else:
                yield from batch.records
                continue
            while held and held[0].committed is not None:
                entry = held.popleft()
                if entry.committed:
                    yield from entry.batch.records


# -- which answers retry, and the Fetch version ------------------------------------------

#: The last Fetch version that names topics (v13+ names them by topic id only).
_LAST_FETCH_VERSION_WITH_NAMES = 12
#: Fetch v4 added isolation levels and the aborted-transactions list (KIP-98).
_FIRST_FETCH_VERSION_WITH_ISOLATION = 4

#: Codes that mean "the metadata is stale": refresh it, then retry. The error table's
#: `invalid_metadata` column covers most; these are the ones a Fetch or ListOffsets
#: can answer during a leader move even where the table does not say so.
_REFRESH_CODES = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INCONSISTENT_TOPIC_ID,
        ErrorCode.REPLICA_NOT_AVAILABLE,
    }
)


async def fetch_version(
    selector: KafkaSelector, node: int, have_topic_id: bool, read_committed: bool
) -> int:
    """The Fetch version to send `node` (see the reader's theory of operation)."""
    try:
        connection = await selector.connection(node)
    except BrokerConnectionError as exc:
        raise Retry(exc, refresh=True) from exc
    negotiated = connection.api_versions.get(FetchRequest.API_KEY)
    if negotiated is None:
        raise error_for_code(
            ErrorCode.UNSUPPORTED_VERSION, f"node {node} speaks no Fetch version we know"
        )
    version = negotiated if have_topic_id else min(negotiated, _LAST_FETCH_VERSION_WITH_NAMES)
    if read_committed and version < _FIRST_FETCH_VERSION_WITH_ISOLATION:
        raise error_for_code(
            ErrorCode.UNSUPPORTED_VERSION,
            f"node {node} speaks Fetch up to v{version}; read_committed needs v4+",
        )
    return version


def partition_data(response: FetchResponse, partition: int, node: int) -> PartitionData | None:
    if response.error_code != ErrorCode.NONE:
        check_code(response.error_code, f"Fetch to node {node}")
    for topic in response.responses:
        for data in topic.partitions:
            if data.partition_index == partition:
                return data
    return None


def check_code(code: int, where: str) -> None:
    """Raise for an error code: `Retry` for the ones another attempt may get past."""
    if code == ErrorCode.NONE:
        return
    info = error_info(code)
    error = error_for_code(code, f"{where}: {info.message}")
    if code in _REFRESH_CODES or info.invalid_metadata:
        raise Retry(error, refresh=True)
    if info.retriable:
        raise Retry(error, refresh=False)
    raise error


# -- the I/O part ----------------------------------------------------------------------


def check_offset(name: str, offset: object, *, optional: bool = True) -> None:
    """Refuse an offset argument that is not an int >= 0 (or None, when `optional`),
    naming it: a str reached the Fetch encoder, a negative one the broker, and a bool
    was read as offset 0 or 1."""
    if offset is None and optional:
        return
    if isinstance(offset, bool) or not isinstance(offset, int):
        allowed = "an offset (an int >= 0) or None" if optional else "an offset (an int >= 0)"
        raise TypeError(f"{name} must be {allowed}, not {type(offset).__name__} ({offset!r})")
    if offset < 0:
        raise ValueError(f"{name} must be an offset (>= 0), not {offset}")


@attrs.define(eq=False)
class PartitionReader:
    """Reads one partition at a time through `selector`. Times are seconds.

    `max_bytes` is the Fetch size limit (per partition and per response), `max_wait`
    the broker's long poll when there is nothing new, `timeout` the bound on every call
    (see the module docstring).
    """

    selector: KafkaSelector
    isolation: IsolationLevel = attrs.field(
        default=IsolationLevel.READ_UNCOMMITTED, converter=_isolation
    )
    max_bytes: int = attrs.field(default=1024 * 1024, validator=must_be_positive)
    max_wait: float = attrs.field(default=0.5, validator=must_not_be_negative)
    timeout: float = attrs.field(default=30.0, validator=must_be_positive)
    # Backoff between retries, from the selector's config (owned here, immutable).
    _backoff: ExponentialBackoff = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._backoff = ExponentialBackoff.of(self.selector.config)

    @property
    def read_committed(self) -> bool:
        return self.isolation is IsolationLevel.READ_COMMITTED

    # -- offsets ---------------------------------------------------------------------------

    async def log_end_offset(
        self, topic: str, partition: int, *, timeout: float | None = None
    ) -> int:
        """The offset the next record will get (ListOffsets latest); with read_committed
        the last stable offset (nothing at or after it is decided yet).

        Tansu answers the last batch's base offset + 1 here, short of the end when that
        batch holds several records; `read(end=None)` does not depend on it, and
        `read_end` is the end it stops at, on every broker.
        """
        return await self._list_offset(topic, partition, _LATEST, timeout)

    async def read_end(self, topic: str, partition: int, *, timeout: float | None = None) -> int:
        """The end `read(end=None)` would stop at now: the high watermark (the last
        stable offset with read_committed) a Fetch answer reports. On Kafka the same as
        `log_end_offset`; on Tansu, whose ListOffsets is short after a batch of several
        records, the real end. What counts back from the end ("the last N records")
        must take it from here, or it and the read disagree.

        One ListOffsets, then one Fetch at the offset it named (a lower bound of the
        end on every broker), so the answer carries at most the last batch."""
        near = await self._list_offset(topic, partition, _LATEST, timeout)

        async def attempt() -> int:
            result = await self._fetch_once(topic, partition, near, None, max_wait=0.0)
            end = result.log_end(self.read_committed)
            if end is None:  # an answer without bounds: ask again
                raise Retry(
                    KafkaError(f"Fetch of {topic}-{partition} at {near} named no bounds"),
                    refresh=False,
                )
            return end

        return await self._retrying(
            f"finding the end of {topic}-{partition}", topic, timeout, attempt
        )

    async def log_start_offset(
        self, topic: str, partition: int, *, timeout: float | None = None
    ) -> int:
        """The first offset the partition still holds (ListOffsets earliest)."""
        return await self._list_offset(topic, partition, _EARLIEST, timeout)

    async def _list_offset(
        self, topic: str, partition: int, timestamp: int, timeout: float | None
    ) -> int:
        what = "latest" if timestamp == _LATEST else "earliest"

        async def attempt() -> int:
            node, meta = await leader_of(self.selector, topic, partition, self.timeout)
            request = ListOffsetsRequest(
                replica_id=-1,
                isolation_level=self.isolation,
                topics=[
                    ListOffsetsTopic(
                        name=topic,
                        partitions=[
                            ListOffsetsPartition(
                                partition_index=partition,
                                current_leader_epoch=meta.leader_epoch,
                                timestamp=timestamp,
                            )
                        ],
                    )
                ],
            )
            response = await ask(self.selector, node, request)
            for t in response.topics:
                for p in t.partitions:
                    if t.name == topic and p.partition_index == partition:
                        check_code(p.error_code, f"ListOffsets ({what}) of {topic}-{partition}")
                        # v0 answers in a list; v1+ in `offset`.
                        if p.offset < 0 and p.old_style_offsets:
                            return int(p.old_style_offsets[0])
                        return int(p.offset)
            raise ProtocolError(
                f"ListOffsets answer from node {node} does not mention {topic}-{partition}"
            )

        return await self._retrying(
            f"ListOffsets ({what}) of {topic}-{partition}", topic, timeout, attempt
        )

    # -- records ---------------------------------------------------------------------------

    def read(
        self,
        topic: str,
        partition: int,
        *,
        start: int | None = None,
        end: int | None = None,
        timeout: float | None = None,
    ) -> PartitionRead:
        """Records of `[start, end)` in offset order: `async for record in ...`.

        `start` None is the log start offset; `end` None is the log end when the
        iteration begins: the high watermark (the last stable offset with
        read_committed) of its first Fetch answer. That saves a ListOffsets round trip,
        and Tansu's ListOffsets "latest" is wrong after a batch of several records (the
        last batch's base offset + 1). An `end` beyond the log end waits for records to
        arrive (bounded by `timeout` without progress).
        """
        check_offset("start", start)
        check_offset("end", end)
        return PartitionRead(
            self, topic, partition, start, end, self.timeout if timeout is None else timeout
        )

    async def read_all(
        self,
        topic: str,
        partition: int,
        *,
        start: int | None = None,
        end: int | None = None,
        timeout: float | None = None,
    ) -> list[Record]:
        """`read()` collected into a list."""
        return [r async for r in self.read(topic, partition, start=start, end=end, timeout=timeout)]

    async def read_at(
        self, topic: str, partition: int, offset: int, *, timeout: float | None = None
    ) -> Record | None:
        """The record at exactly `offset`, or None when none is visible there: the offset
        is a control marker, a gap left by compaction, a record of an aborted transaction
        (read_committed), or at or past the log end (the last stable offset with
        read_committed). Below the log start offset raises `OffsetOutOfRangeError`: the
        record was there once, and "not there" would be a wrong answer to "was it mine?".
        """
        check_offset("offset", offset, optional=False)

        async def attempt() -> Record | None:
            try:
                result = await self._fetch_once(topic, partition, offset, offset + 1, max_wait=0.0)
            except OffsetOutOfRangeError as exc:
                # Past the end is "nothing there"; below the start is an error. Kafka
                # answers OFFSET_OUT_OF_RANGE with no bounds (-1): ask for the start then.
                log_start = exc.log_start_offset
                if log_start < 0:
                    log_start = await self._list_offset(topic, partition, _EARLIEST, timeout)
                if offset >= log_start:
                    return None
                raise
            if result.records:
                return result.records[0]
            if result.next_offset > offset:
                return None  # the batch holding it had nothing visible at the offset
            upper = result.last_stable_offset if self.read_committed else result.high_watermark
            if upper >= 0 and offset >= upper:
                return None
            # Below the end but nothing came back: the broker answered empty (it may
            # be catching up after a leader move); ask again.
            raise Retry(
                KafkaError(f"empty Fetch answer at {offset} below the end {upper}"),
                refresh=False,
            )

        return await self._retrying(
            f"reading offset {offset} of {topic}-{partition}", topic, timeout, attempt
        )

    async def batches(
        self,
        topic: str,
        partition: int,
        low: int,
        high: int,
        *,
        first: bool = False,
        timeout: float | None = None,
    ) -> list[RecordBatch]:
        """Every batch as stored, control batches and aborted ones too, whose base
        offset is in [low, high) (or below `high`, with `first`: the window at the log
        start, whose first batch may begin below it): for callers that judge the
        transaction markers themselves. `ReadTimeoutError` after `timeout` (default the
        reader's) without progress."""
        limit = self.timeout if timeout is None else timeout
        clock = self.selector.clock
        deadline = clock.now() + limit
        batches: list[RecordBatch] = []
        position = low
        while position < high:
            asked = clock.now()
            if asked >= deadline:
                raise ReadTimeoutError(
                    f"reading the batches of {topic}-{partition}: stuck at offset {position} "
                    f"for {limit} s below {high}"
                )
            result = await self.fetch(
                topic, partition, position, end=high, timeout=deadline - asked
            )
            batches.extend(
                b
                for b in result.batches
                if (first or b.base_offset >= low) and b.base_offset < high
            )
            if result.next_offset > position:
                position = result.next_offset
                deadline = clock.now() + limit
            else:  # an empty answer below the end: ask again after max_wait
                await sleep_until(min(asked + self.max_wait, deadline))
        return batches

    async def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        end: int | None = None,
        max_wait: float | None = None,
        timeout: float | None = None,
    ) -> FetchResult:
        """One Fetch from `offset` (retried on stale metadata and lost connections): the
        building block of `read`, for callers that want the bounds too."""
        check_offset("offset", offset, optional=False)
        check_offset("end", end)
        wait = self.max_wait if max_wait is None else max_wait
        return await self._retrying(
            f"fetching {topic}-{partition} at {offset}",
            topic,
            timeout,
            lambda: self._fetch_once(topic, partition, offset, end, max_wait=wait),
        )

    async def _fetch_once(
        self, topic: str, partition: int, offset: int, end: int | None, *, max_wait: float
    ) -> FetchResult:
        node, meta = await leader_of(self.selector, topic, partition, self.timeout)
        topic_meta = self.selector.metadata.topic(topic)
        topic_id = topic_meta.topic_id if topic_meta is not None else None
        version = await fetch_version(
            self.selector, node, topic_id is not None, self.read_committed
        )
        request = FetchRequest(
            replica_id=-1,
            # Never 0: Tansu answers a zero-wait Fetch with no topics at all.
            max_wait_ms=max(1, round(max_wait * 1000)),
            min_bytes=1,
            max_bytes=self.max_bytes,
            isolation_level=self.isolation,
            session_id=0,
            session_epoch=-1,  # no fetch session (KIP-227): a full fetch each time
            topics=[
                FetchTopic(
                    topic=topic,
                    topic_id=topic_id if topic_id is not None else _NULL_UUID,
                    partitions=[
                        FetchPartition(
                            partition=partition,
                            current_leader_epoch=meta.leader_epoch,
                            fetch_offset=offset,
                            partition_max_bytes=self.max_bytes,
                        )
                    ],
                )
            ],
        )
        response = await ask(self.selector, node, request, version=version, extra=max_wait)
        data = partition_data(response, partition, node)
        where = f"Fetch of {topic}-{partition} at {offset}"
        if data is None:  # the broker left the partition out: an empty answer
            return FetchResult([], offset, -1, -1, -1)
        if data.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            # Kafka answers it without bounds (-1): the error names the real ones.
            start, end_offset = data.log_start_offset, data.high_watermark
            if start < 0:
                start = await self._list_offset(topic, partition, _EARLIEST, self.timeout)
            if end_offset < 0:
                end_offset = await self._list_offset(topic, partition, _LATEST, self.timeout)
            raise OffsetOutOfRangeError(
                f"{where}: the partition holds [{start}, {end_offset}) "
                "(log start offset, end offset)",
                offset=offset,
                log_start_offset=start,
                log_end_offset=end_offset,
            )
        check_code(data.error_code, where)
        raw = data.records or b""
        batches = list(decode_batches(raw, allow_partial=True))
        if raw and not batches:
            # Fetch v3+ always returns the first batch whole (KIP-74); an older broker
            # cuts it at our limit and we would never get past it.
            raise KafkaError(
                f"{where}: the first record batch is larger than max_bytes={self.max_bytes}; "
                "raise max_bytes"
            )
        aborted = (
            [(a.producer_id, a.first_offset) for a in data.aborted_transactions]
            if data.aborted_transactions
            else None
        )
        records, position = select_records(
            batches,
            start=offset,
            end=end,
            read_committed=self.read_committed,
            aborted_transactions=aborted,
        )
        return FetchResult(
            records=records,
            next_offset=position,
            high_watermark=data.high_watermark,
            last_stable_offset=data.last_stable_offset,
            log_start_offset=data.log_start_offset,
            batches=batches,
        )

    async def _retrying(
        self,
        what: str,
        topic: str,
        timeout: float | None,
        attempt: Callable[[], Awaitable[_T]],
    ) -> _T:
        """`attempt()` until it succeeds, raises for real, or `timeout` passes
        (`ReadTimeoutError`): the one retry loop, `net/_leader.py`'s `retrying`."""
        limit = self.timeout if timeout is None else timeout
        return await retrying(
            self.selector, topic, attempt, what=what, timeout=limit, backoff=self._backoff
        )

    def __repr__(self) -> str:
        return (
            f"<PartitionReader [{self.isolation.name.lower()}, max_bytes {self.max_bytes}, "
            f"max_wait {self.max_wait} s, timeout {self.timeout} s]>"
        )


@attrs.define(eq=False)
class PartitionRead:
    """An iteration over `[start, end)` of one partition (see `PartitionReader.read`)."""

    reader: PartitionReader
    topic: str
    partition: int
    #: Requested bounds; resolved (None -> log start / log end) on the first step.
    start: int | None
    end: int | None
    timeout: float
    #: The next offset to fetch (None until the first step resolves `start`).
    position: int | None = attrs.field(default=None, init=False)
    # Fetched records not handed out yet (owned by this iteration).
    _buffer: collections.deque[Record] = attrs.field(factory=collections.deque, init=False)

    def __aiter__(self) -> PartitionRead:
        return self

    async def __anext__(self) -> Record:
        while not self._buffer:
            await self._step()
        return self._buffer.popleft()

    async def _step(self) -> None:
        """Fetch once; raise StopAsyncIteration at the end, ReadTimeoutError when no
        progress came within `timeout`."""
        reader = self.reader
        clock = reader.selector.clock
        deadline = clock.now() + self.timeout
        if self.position is None:
            if self.start is None:
                self.start = await reader.log_start_offset(
                    self.topic, self.partition, timeout=self.timeout
                )
            self.position = self.start
        while True:
            if self.end is not None and self.position >= self.end:
                raise StopAsyncIteration
            remaining = deadline - clock.now()
            asked = clock.now()
            # Until the end is known, ask without a long poll: an empty partition must
            # not cost max_wait.
            wait = reader.max_wait if self.end is not None else 0.0
            try:
                if remaining <= 0:
                    raise ReadTimeoutError("no progress")
                result = await reader.fetch(
                    self.topic,
                    self.partition,
                    self.position,
                    end=self.end,
                    max_wait=wait,
                    timeout=remaining,
                )
            except ReadTimeoutError as exc:
                raise ReadTimeoutError(
                    f"reading {self.topic}-{self.partition}: stuck at offset {self.position} "
                    f"for {self.timeout} s before the end {self.end} (is the high watermark, "
                    f"or the last stable offset, below it?): {exc}"
                ) from exc
            records = result.records
            if self.end is None:
                self.end = result.log_end(reader.read_committed)
                if self.end is None:  # an answer without bounds: ask again
                    await sleep_until(min(asked + reader.max_wait, deadline))
                    continue
                records = [r for r in records if r.offset < self.end]
            moved = result.next_offset > self.position
            self.position = max(self.position, result.next_offset)
            self._buffer.extend(records)
            if self._buffer:
                return
            if moved:
                deadline = clock.now() + self.timeout  # control batches, aborted records
                continue
            # Nothing new: the broker long-polled, or answered at once; wait out the rest
            # of max_wait either way so an early empty answer does not become a busy loop.
            await sleep_until(min(asked + wait, deadline))

    def __repr__(self) -> str:
        end = "log end" if self.end is None else self.end
        at = "not started" if self.position is None else f"at {self.position}"
        return (
            f"<PartitionRead [{self.topic}-{self.partition} [{self.start}, {end}), {at}, "
            f"{len(self._buffer)} buffered]>"
        )


__all__ = [
    "CommittedInOrder",
    "FetchResult",
    "IsolationLevel",
    "PartitionRead",
    "PartitionReader",
    "committed_newest_first",
    "select_records",
]
