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

Files: this one (the calls), `_partition_read.py` (the iteration of `read`),
`_leader_calls.py` (finding the leader, the Fetch version, sending, and which answers
retry), `_fetch.py` (what a Fetch answer means, pure).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import attrs

from trio_kafka.client._fetch import FetchResult, IsolationLevel, _isolation, select_records
from trio_kafka.client._leader_calls import (
    Retry,
    ask,
    check_code,
    fetch_version,
    leader_of,
    partition_data,
    retrying,
)
from trio_kafka.client._partition_read import PartitionRead
from trio_kafka.errors import (
    ConfigError,
    ErrorCode,
    KafkaError,
    OffsetOutOfRangeError,
    ProtocolError,
    ReadTimeoutError,
)
from trio_kafka.net import (
    ExponentialBackoff,
    KafkaSelector,
    sleep_until,
)
from trio_kafka.protocol.messages.fetch import (
    FetchPartition,
    FetchRequest,
    FetchTopic,
)
from trio_kafka.protocol.messages.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from trio_kafka.records import (
    Record,
    RecordBatch,
    decode_batches,
)

_T = TypeVar("_T")
_NULL_UUID = uuid.UUID(int=0)

#: ListOffsets timestamps (KIP-79): the latest offset and the earliest one.
_LATEST = -1
_EARLIEST = -2


def _positive(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise ConfigError(f"{attribute.name} must be positive, not {value!r}")


def _not_negative(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if value < 0:
        raise ConfigError(f"{attribute.name} must not be negative, not {value!r}")


# -- the I/O part ----------------------------------------------------------------------


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
    max_bytes: int = attrs.field(default=1024 * 1024, validator=_positive)
    max_wait: float = attrs.field(default=0.5, validator=_not_negative)
    timeout: float = attrs.field(default=30.0, validator=_positive)
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
        if start is not None and start < 0:
            raise ValueError(f"start must be an offset (>= 0), not {start}")
        if end is not None and end < 0:
            raise ValueError(f"end must be an offset (>= 0), not {end}")
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
        if offset < 0:
            raise ValueError(f"offset must be >= 0, not {offset}")

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
        (`ReadTimeoutError`): the one retry loop, `_leader_calls.retrying`."""
        limit = self.timeout if timeout is None else timeout
        return await retrying(
            self.selector, topic, attempt, what=what, timeout=limit, backoff=self._backoff
        )

    def __repr__(self) -> str:
        return (
            f"<PartitionReader [{self.isolation.name.lower()}, max_bytes {self.max_bytes}, "
            f"max_wait {self.max_wait} s, timeout {self.timeout} s]>"
        )


__all__ = [
    "FetchResult",
    "IsolationLevel",
    "PartitionRead",
    "PartitionReader",
    "select_records",
]
