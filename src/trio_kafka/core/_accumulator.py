"""The record accumulator: appending records to their partition's open batch, buffer
memory, and the partitions' queues from append to request and back.

Theory of operation. Each partition with unsent data has a queue of batches; the last
one is open for appends. `append` reserves the record's estimated size from
`buffer_memory` and puts it in the open batch; the common case (an unkeyed record whose
topic's sticky batch has room) touches four attributes and a list. Everything else
(keyed, custom partitioner, CAS, a full batch, a partition switch) takes `_append_slow`.
An explicit partition has its own fast path: into that partition's open batch when it
has room and the partition is below the topic's known count (else `_append_slow`).
`append_many(..., partition=)` is that fast path for a whole run of records: the
cumulative sizes of the run (`itertools.accumulate`, in C) and a bisection say how many
fit the open batch, which takes them with one list extend; the record that does not fit
opens the next batch through `_append_slow`, so batches are filled to `batch_size`
(a load's transaction is a few full batches, not many half-filled ones). The append
paths write the open batch's `values`, `room` and run stamps themselves (the one
exception to "a batch changes through its methods": the per-record path, module doc of
core/_batch.py).

The queues are `BatchQueues` (the accumulator's `batches`): every partition's queue
(`queues`; `open`: the last batch of each, still taking appends), what is in flight per
partition and per node. `ready(now, cluster, send_all)` reports the leaders with a
sendable batch (full, lingered, backed off long enough or sent last to another node
than its leader now, or everything with `send_all`: the buffer exhausted, a flush
running or the producer closing), the delay until the next batch becomes sendable or
expires, and the topics with a partition without leader. `drain(now, nodes, cluster)`
takes, per node, at most one batch per partition, round robin, up to
`max_request_size`, obeying the sequencing policy's ordering rules and `max_in_flight`
per node and per partition; a drained batch is sealed, sequenced and IN_FLIGHT. When its
request comes back the core takes it out of the in-flight counts (`request_done`,
`settle_in_flight`), decides it, and may put it back for a retry in sequence order
(`reenqueue`) or cut it in pieces (`split_and_reenqueue`). `expire(now)` removes queued
batches past `delivery_timeout`. Nothing here calls the core: it calls in.

The accumulator also owns its `Partitioner` (core/_partitioner.py: which partition a
record without one goes to, on the slow path). The per-record path touches no component
method: the fast paths read the open-batch and sticky dicts directly (the same dicts,
bound once in `__init__`).
"""

from __future__ import annotations

import bisect
from bisect import bisect_right
from collections import deque
from collections.abc import Iterable, Sequence
from itertools import accumulate, repeat
from operator import add as _add
from typing import Any, NamedTuple

from trio_kafka.core._batch import DeliveryHandle, ProducerBatch
from trio_kafka.core._config import BufferFullStrategy, ProducerConfig
from trio_kafka.core._partitioner import (
    NO_BATCH,
    ClusterView,
    Partitioner,
    RandomSource,
    StickyState,
    murmur2,
)
from trio_kafka.core._record import (
    RECORD_OVERHEAD,
    Headers,
    ProducerRecord,
    headers_size,
)
from trio_kafka.core._sequencer import SequencingPolicy, TopicPartition
from trio_kafka.errors import InvalidPartitionError, RecordTooLargeError, UnknownTopicError

_KEY_CACHE = 65536


class BatchSpan(NamedTuple):
    """Records `start` to `stop - 1` of `batch` (from `append_many`)."""

    batch: ProducerBatch
    start: int
    stop: int

    def handles(self) -> list[DeliveryHandle]:
        batch = self.batch
        return [DeliveryHandle(batch, i) for i in range(self.start, self.stop)]

    @property
    def record_count(self) -> int:
        return self.stop - self.start


def _joins(batch: ProducerBatch, expected_offset: int) -> bool:
    """Whether a record with `expected_offset` (-1: none) may join open `batch`: a CAS
    record only a CAS batch whose next record is expected exactly there, a plain record
    only a plain batch. (A plain batch's `expected_offset` is -1: the sum alone would let
    a CAS record expecting n - 1 into a plain batch of n records, sent without its
    expectation.)"""
    if expected_offset < 0:
        return batch.expected_offset < 0
    return batch.expected_offset >= 0 and (
        batch.expected_offset + len(batch.values) == expected_offset
    )


def _add_span(spans: list[BatchSpan], batch: ProducerBatch, start: int, stop: int) -> None:
    """Append a span, joined to the last one when it continues it."""
    if spans and spans[-1].batch is batch and spans[-1].stop == start:
        spans[-1] = BatchSpan(batch, spans[-1].start, stop)
    else:
        spans.append(BatchSpan(batch, start, stop))


def record_sizes(
    values: Sequence[bytes | None], keys: Sequence[bytes | None] | None, overhead: int
) -> list[int]:
    """The cumulative estimated sizes of a run of records, from 0: entry i is the bytes
    of the first i records (`overhead` each, plus key and value). Computed in C when no
    value or key is None."""
    try:
        lengths: Iterable[int] = map(len, values)  # type: ignore[arg-type]
        if keys is not None:
            lengths = map(_add, lengths, map(len, keys))  # type: ignore[arg-type]
        return list(accumulate(map(_add, lengths, repeat(overhead)), initial=0))
    except TypeError:  # a None value or key (or not bytes: refused by the caller)
        pass
    if keys is None:
        sizes = (overhead + (len(v) if v is not None else 0) for v in values)
    else:
        sizes = (
            overhead + (len(v) if v is not None else 0) + (len(k) if k is not None else 0)
            for k, v in zip(keys, values, strict=True)
        )
    return list(accumulate(sizes, initial=0))


class RecordAccumulator:
    """See the module doc. Owned by `ProducerCore`; the driver calls it through the core."""

    def __init__(
        self,
        config: ProducerConfig,
        rng: RandomSource,
        sequencing: SequencingPolicy,
        cluster: ClusterView | None = None,
        wall_offset: float = 0.0,
        handle_class: type[DeliveryHandle] = DeliveryHandle,
    ) -> None:
        self.config = config
        # The class of the handles `append` returns (the trio driver's awaitable
        # subclass: made directly, rather than converted, on the per-record path).
        # A msgspec struct: its constructor is C, ~40 ns (see `DeliveryHandle`).
        self.handle_class = handle_class
        self.rng = rng
        self.sequencing = sequencing
        self.cluster = cluster if cluster is not None else ClusterView()
        # Seconds to add to `now` to get Unix time for record timestamps (set by the driver).
        self.wall_offset = wall_offset
        self.batch_size = config.batch_size
        # Topic -> the record bytes a CAS batch of it may hold, below the topic's
        # max.message.bytes (learned by the client's CAS gate): CAS records sent one by
        # one join one batch (`_joins`), which is never split, so a batch over the
        # topic's limit failed every record in it where each alone would have landed.
        self.cas_batch_bytes: dict[str, int] = {}
        self.batches = BatchQueues(config, sequencing)
        # Queued batches per partition at the last ready() (KIP-794's load stats).
        self._ready_lengths: dict[tuple[str, int], int] = {}
        self.partitioner = Partitioner(config, rng, self._ready_lengths)
        # The same objects as the components', bound once: the per-record path reads
        # `_open` and `_sticky`; the core reads `queues` and `node_in_flight`, and a
        # rule may put a batch back with `reenqueue` (core/_rules.py).
        self.queues = self.batches.queues
        self._open = self.batches.open
        self._sticky = self.partitioner.sticky
        self.node_in_flight = self.batches.node_in_flight
        self.reenqueue = self.batches.reenqueue
        # (The fast paths' copies of the settings: keys that choose no partition, and a
        # custom partitioner, which the partitioner calls.)
        self._ignore_keys = config.partitioner_ignore_keys
        self._custom = self.partitioner.custom
        # murmur2 of recently seen keys (bounded): keyed workloads repeat keys.
        self._key_hashes: dict[bytes, int] = {}
        # The partitioner's next leader switch, for the fast path (which steps aside then).
        self._switch_at = self.partitioner.switch_at
        # Buffer accounting: bytes held by unfinished batches, and the limit.
        self.buffer_used = 0
        self.buffer_limit = (
            1 << 62
            if config.buffer_full_strategy is BufferFullStrategy.PARK
            else config.buffer_memory
        )
        # Set when an append found no room; makes everything sendable until room frees.
        self.exhausted = False
        self.flushing = 0  # flushes in progress (Java's flushInProgress)
        self.closed = False

    @property
    def has_undrained(self) -> bool:
        return bool(self.queues)

    def __repr__(self) -> str:
        batches = sum(len(q) for q in self.queues.values())
        return (
            f"<RecordAccumulator queued_batches={batches} buffer={self.buffer_used}"
            f"/{self.config.buffer_memory} in_flight={sum(self.node_in_flight.values())}>"
        )

    # -- append ----------------------------------------------------------------------

    def append(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        now: float = 0.0,
        expected_offset: int = -1,
    ) -> DeliveryHandle | None:
        """Add one record; None when `buffer_memory` has no room for it.

        Raises `UnknownTopicError` (fetch metadata, then append again),
        `RecordTooLargeError` and `InvalidPartitionError`.
        """
        size = RECORD_OVERHEAD if value is None else RECORD_OVERHEAD + len(value)
        if key is not None:
            size += len(key)
        if headers:
            size += headers_size(headers)
        used = self.buffer_used + size
        if used > self.buffer_limit:
            self.no_room(size)
            return None
        if partition is None and now < self._switch_at and (key is None or self._ignore_keys):
            sticky = self._sticky.get(topic)
            if sticky is not None:
                batch: ProducerBatch = sticky.batch  # type: ignore[assignment]
                room = batch.room - size  # negative: full, or sealed (room -1)
                if room >= 0:
                    batch.room = room
                    sticky.produced += size
                    self.buffer_used = used
                    values = batch.values
                    index = len(values)
                    values.append(value)
                    if now >= batch.tick:
                        batch.stamp(index, now)
                    if key is not None or headers or timestamp_ms is not None:
                        batch.set_extras(index, timestamp_ms, key, headers)
                    return self.handle_class(batch, index)
        elif partition is not None:
            # An explicit partition: straight into its open batch when it has room, the
            # record may join it (`_joins`: a CAS record continues a CAS batch, a plain
            # record a plain one) and the partition is still below the topic's known
            # count (metadata may have shrunk it); anything else (no open batch, full, a
            # CAS record that does not continue it, a bad or unknown partition) takes
            # the slow path, which opens batches and raises.
            open_batch = self._open.get((topic, partition))
            if (
                open_batch is not None
                and open_batch.room >= size
                and (
                    open_batch.expected_offset < 0  # (`_joins` inline for a plain record)
                    if expected_offset < 0
                    else _joins(open_batch, expected_offset)
                )
                and partition < len(self.cluster.leaders.get(topic, ()))
            ):
                open_batch.room -= size
                self.buffer_used = used
                values = open_batch.values
                index = len(values)
                values.append(value)
                if now >= open_batch.tick:
                    open_batch.stamp(index, now)
                if key is not None or headers or timestamp_ms is not None:
                    open_batch.set_extras(index, timestamp_ms, key, headers)
                return self.handle_class(open_batch, index)
        return self._append_slow(
            topic, value, key, headers, partition, timestamp_ms, now, expected_offset, size
        )

    def append_value(self, topic: str, value: bytes, now: float) -> DeliveryHandle | None:
        """`append(topic, value, now=now)` for the commonest record (a bytes value, no
        key, headers, partition or timestamp): the sticky batch's fast path with three
        arguments and none of the other cases' tests; anything else is `append`'s."""
        size = RECORD_OVERHEAD + len(value)
        used = self.buffer_used + size
        if used <= self.buffer_limit and now < self._switch_at:
            sticky = self._sticky.get(topic)
            if sticky is not None:
                batch: ProducerBatch = sticky.batch  # type: ignore[assignment]
                room = batch.room - size  # negative: full, or sealed (room -1)
                if room >= 0:
                    batch.room = room
                    sticky.produced += size
                    self.buffer_used = used
                    values = batch.values
                    index = len(values)
                    values.append(value)
                    if now >= batch.tick:
                        batch.stamp(index, now)
                    return self.handle_class(batch, index)
        return self.append(topic, value, now=now)

    def append_record(self, record: ProducerRecord, now: float) -> DeliveryHandle | None:
        return self.append(
            record.topic,
            record.value,
            record.key,
            record.headers or None,
            record.partition,
            record.timestamp,
            now,
        )

    def append_many(
        self,
        topic: str,
        values: Iterable[bytes | None],
        now: float,
        *,
        partition: int | None = None,
        keys: Sequence[bytes | None] | None = None,
    ) -> tuple[list[BatchSpan], int]:
        """Append values to `topic` in one call: unkeyed and spread by the sticky
        partitioner, or all to `partition` (then `keys`, one per value, may give them
        keys; the partition is not derived from them).

        Returns the spans of batches the records went to (one `BatchSpan` per batch,
        `span.handles()` gives per-record handles on demand) and how many records were
        taken: fewer than given when the buffer filled (the driver waits for room and
        passes the rest).
        """
        if partition is not None:
            run = values if isinstance(values, Sequence) else list(values)
            return self._append_many_to(topic, partition, run, keys, now)
        if keys is not None:
            raise ValueError("append_many: keys= needs partition= (keys choose no partition here)")
        spans: list[BatchSpan] = []
        limit = self.buffer_limit
        used = self.buffer_used
        batch = NO_BATCH
        room = -1
        start = 0
        produced = 0
        add: Any = None
        for value in values:
            size = RECORD_OVERHEAD + len(value or b"")
            if size <= room and used + size <= limit:
                room -= size
                used += size
                produced += size
                add(value)  # (the same `now` as the span's first record: no stamp)
                continue
            # Close the current span, then take the slow path for this record.
            if batch is not NO_BATCH:
                self._close_span(topic, batch, room, produced, spans, start)
            self.buffer_used = used
            if used + size > limit:
                self.no_room(size)
                return spans, sum(stop - first for _, first, stop in spans)
            handle = self._append_slow(topic, value, None, None, None, None, now, -1, size)
            batch = handle.batch
            start = handle.index
            room = batch.room
            produced = 0
            add = batch.values.append
            used = self.buffer_used
            sticky = self._sticky.get(topic)
            if sticky is None or sticky.batch is not batch:
                room = -1  # not the sticky batch (e.g. leader switch): no fast path
        if batch is not NO_BATCH:
            self._close_span(topic, batch, room, produced, spans, start)
        self.buffer_used = used
        return spans, sum(stop - first for _, first, stop in spans)

    def _append_many_to(
        self,
        topic: str,
        partition: int,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None,
        now: float,
    ) -> tuple[list[BatchSpan], int]:
        """`append_many` to one partition: fill its open batch with as many records as
        fit (by the run's cumulative sizes), open the next one through `_append_slow`
        (which checks the partition and the record's size), repeat."""
        total = len(values)
        if keys is not None and len(keys) != total:
            raise ValueError(f"append_many: {len(keys)} keys for {total} values")
        cumulative = record_sizes(values, keys, RECORD_OVERHEAD)
        spans: list[BatchSpan] = []
        tp = (topic, partition)
        limit = self.buffer_limit
        position = 0
        while position < total:
            batch = self._open.get(tp)
            stop = position
            if (
                batch is not None
                and batch.expected_offset < 0
                and batch.room > 0
                and partition < len(self.cluster.leaders.get(topic, ()))
            ):
                budget = min(batch.room, limit - self.buffer_used)
                stop = bisect_right(cumulative, cumulative[position] + budget, position) - 1
            if stop <= position:
                # No open batch, or the next record does not fit it: one record through
                # the slow path (it seals the full batch and opens the next), or no room.
                size = cumulative[position + 1] - cumulative[position]
                if self.buffer_used + size > limit:
                    self.no_room(size)
                    break
                key = keys[position] if keys is not None else None
                handle = self._append_slow(
                    topic, values[position], key, None, partition, None, now, -1, size
                )
                _add_span(spans, handle.batch, handle.index, handle.index + 1)
                position += 1
                continue
            added = cumulative[stop] - cumulative[position]
            assert batch is not None  # (stop > position: the open batch took records)
            start = len(batch.values)
            batch.values.extend(values[position:stop])
            if now >= batch.tick:
                batch.stamp(start, now)  # (the whole run shares this `now`)
            if keys is not None:
                batch.add_keys(start, keys[position:stop])
            batch.room -= added
            self.buffer_used += added
            _add_span(spans, batch, start, start + stop - position)
            position = stop
        return spans, position

    def _close_span(
        self,
        topic: str,
        batch: ProducerBatch,
        room: int,
        produced: int,
        spans: list[BatchSpan],
        start: int,
    ) -> None:
        if room >= 0:
            batch.room = room
            sticky = self._sticky.get(topic)
            if sticky is not None:
                sticky.produced += produced
        spans.append(BatchSpan(batch, start, len(batch.values)))

    def no_room(self, size: int) -> None:
        """Mark the buffer exhausted (everything becomes sendable); raise if it never fits."""
        if size > self.config.buffer_memory:
            raise RecordTooLargeError(
                f"a record of {size} bytes is larger than buffer_memory={self.config.buffer_memory}"
            )
        self.exhausted = True

    def _append_slow(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: Headers | None,
        partition: int | None,
        timestamp_ms: int | None,
        now: float,
        expected_offset: int,
        size: int,
    ) -> DeliveryHandle:
        cluster = self.cluster
        if size > self.config.max_request_size:
            raise RecordTooLargeError(
                f"a record of {size} bytes is larger than max_request_size="
                f"{self.config.max_request_size}"
            )
        count = cluster.num_partitions(topic)
        if count == 0:
            raise UnknownTopicError(topic=topic)
        sticky: StickyState | None = None
        if partition is not None:
            if not 0 <= partition < count:
                raise InvalidPartitionError(
                    f"partition {partition} of topic {topic!r} does not exist: it has {count}"
                )
        elif key is not None and not self._ignore_keys and self._custom is None:
            # Keyed: every such record comes here, so the hash is inline (no call).
            hashed = self._key_hashes.get(key)
            if hashed is None:
                if len(self._key_hashes) >= _KEY_CACHE:
                    self._key_hashes.clear()
                hashed = self._key_hashes[key] = murmur2(key) & 0x7FFFFFFF
            partition = hashed % count
        else:
            partition, sticky = self.partitioner.choose(
                topic, value, key, headers, timestamp_ms, size, now, cluster, self._open
            )
            if sticky is not None:
                self._switch_at = self.partitioner.switch_at
        tp = (topic, partition)
        batch = self._open.get(tp)
        if batch is None or size > batch.room or not _joins(batch, expected_offset):
            if batch is not None:
                batch.seal()
            capacity = self.batch_size
            if expected_offset >= 0:
                capacity = min(capacity, self.cas_batch_bytes.get(topic, capacity))
            batch = ProducerBatch(
                topic,
                partition,
                max(capacity, size),
                now,
                self.wall_offset,
                expected_offset,
            )
            self.batches.add(tp, batch)
        batch.room -= size
        self.buffer_used += size
        if sticky is not None:
            sticky.produced += size
            sticky.batch = batch if expected_offset < 0 else NO_BATCH
        values = batch.values
        index = len(values)
        values.append(value)
        if now >= batch.tick:
            batch.stamp(index, now)
        if key is not None or headers or timestamp_ms is not None:
            batch.set_extras(index, timestamp_ms, key, headers)
        return self.handle_class(batch, index)

    @property
    def leader_node(self) -> int | None:
        """The leader-aware partitioner's current node (None for other partitioners)."""
        leader = self.partitioner.leader
        return leader.node if leader is not None else None

    def update_cluster(self, cluster: ClusterView) -> None:
        """New metadata (see `Partitioner.update_cluster`)."""
        old, self.cluster = self.cluster, cluster
        self.partitioner.update_cluster(cluster, old)
        self._switch_at = self.partitioner.switch_at

    # -- ready / drain (the queues', with this accumulator's cluster and state) --------

    def ready(self, now: float) -> ReadyResult:
        """Leaders with sendable data, the delay until the next check, leaderless topics
        (`BatchQueues.ready`); with adaptive partitioning, the load stats' inputs."""
        send_all = self.exhausted or self.flushing > 0 or self.closed
        result = self.batches.ready(now, self.cluster, send_all)
        if self.config.partitioner_adaptive and self._sticky:
            unavailable = self.batches.unavailable_nodes()
            if unavailable != self.cluster.unavailable_nodes:
                self.cluster = self.cluster.with_unavailable(unavailable)
            # What the load stats weigh (as Java's ready()): partitions with a queue only.
            self._ready_lengths.clear()
            self._ready_lengths.update((tp, len(queue)) for tp, queue in self.queues.items())
        return result

    def drain(
        self, now: float, nodes: Iterable[int], max_request_size: int | None = None
    ) -> dict[int, list[ProducerBatch]]:
        """Take the batches to send now: one request's worth per node (`BatchQueues.drain`)."""
        return self.batches.drain(now, nodes, self.cluster, max_request_size)

    # -- buffer memory ------------------------------------------------------------------

    def release(self, batch: ProducerBatch) -> None:
        """Give back a finished batch's buffer bytes."""
        self.buffer_used -= batch.size
        if self.exhausted and self.buffer_used < self.buffer_limit:
            self.exhausted = False

    def has_room(self, size: int) -> bool:
        return self.buffer_used + size <= self.buffer_limit


_INF = float("inf")


class ReadyResult(NamedTuple):
    ready_nodes: set[int]
    next_check_delay: float
    unknown_leader_topics: set[str]


class BatchQueues:
    """See the module doc."""

    def __init__(self, config: ProducerConfig, sequencing: SequencingPolicy) -> None:
        self.config = config
        self.sequencing = sequencing
        # Partition -> queue of batches (only non-empty queues are kept).
        self.queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        # Partition -> its open batch (the last of its queue, still taking appends).
        self.open: dict[TopicPartition, ProducerBatch] = {}
        # Unfinished sequenced-or-sent batches in flight, per partition and per node.
        self.partition_in_flight: dict[TopicPartition, int] = {}
        self.node_in_flight: dict[int, int] = {}
        # Drain round robin per node (so no partition starves): the first partition at
        # or after this key goes first.
        self._drain_cursor: dict[int, TopicPartition] = {}
        # Availability timeout bookkeeping (KIP-794): last time a node had sendable data
        # and last time we could drain it.
        self._node_ready_time: dict[int, float] = {}
        self._node_drain_time: dict[int, float] = {}

    def add(self, tp: TopicPartition, batch: ProducerBatch) -> None:
        """A new open batch for `tp`, at the back of its queue."""
        self.open[tp] = batch
        queue = self.queues.get(tp)
        if queue is None:
            queue = self.queues[tp] = deque()
        queue.append(batch)

    def remove(self, batch: ProducerBatch) -> None:
        """Take a queued batch out of its queue (it ends without being sent again)."""
        tp = (batch.topic, batch.partition)
        queue = self.queues.get(tp)
        if queue is not None and batch in queue:
            queue.remove(batch)
            if not queue:
                del self.queues[tp]

    # -- ready / drain ---------------------------------------------------------------

    def ready(self, now: float, cluster: ClusterView, send_all: bool) -> ReadyResult:
        """Leaders with sendable data, the delay until the next check, leaderless topics
        (`send_all`: the buffer is exhausted, a flush runs or the producer closes, so
        nothing lingers)."""
        ready_nodes: set[int] = set()
        unknown: set[str] = set()
        delay = _INF
        linger = self.config.linger
        max_in_flight = self.config.max_in_flight
        delivery_timeout = self.config.delivery_timeout
        partition_in_flight = self.partition_in_flight
        for tp, queue in self.queues.items():
            batch = queue[0]
            leader = cluster.leader(*tp)
            expire_in = batch.created + delivery_timeout - now
            if expire_in < delay:
                delay = max(expire_in, 0.0)
            if leader < 0:
                unknown.add(tp[0])
                continue
            if leader in ready_nodes:
                continue
            if partition_in_flight.get(tp, 0) >= max_in_flight:
                continue  # waits for a response, not for time
            if batch.attempts:
                wait = batch.retry_at - now
                if wait > 0 and leader == batch.last_node:
                    delay = min(delay, wait)
                    continue
                sendable = True  # (a new leader since the last attempt: no backoff)
            else:
                wait = batch.created + linger - now
                sendable = send_all or wait <= 0 or len(queue) > 1 or batch.room <= 0
            if not sendable:
                delay = min(delay, wait)
                continue
            if self.sequencing.drain_blocked(batch):
                continue  # waits for responses or an epoch bump
            self._node_ready_time[leader] = now
            self._node_drain_time.setdefault(leader, now)
            if self.node_in_flight.get(leader, 0) < max_in_flight:
                ready_nodes.add(leader)
        return ReadyResult(ready_nodes, delay, unknown)

    def unavailable_nodes(self) -> frozenset[int]:
        """KIP-794: the nodes that had sendable data for longer than
        `partitioner_availability_timeout` without a drain (0: the check is off)."""
        timeout = self.config.partitioner_availability_timeout
        if timeout <= 0:
            return frozenset()
        drained = self._node_drain_time
        return frozenset(
            node
            for node, ready_time in self._node_ready_time.items()
            if ready_time - drained.get(node, ready_time) > timeout
        )

    def drain(
        self,
        now: float,
        nodes: Iterable[int],
        cluster: ClusterView,
        max_request_size: int | None = None,
    ) -> dict[int, list[ProducerBatch]]:
        """Take the batches to send now: one request's worth per node (see module doc)."""
        max_size = self.config.max_request_size if max_request_size is None else max_request_size
        max_in_flight = self.config.max_in_flight
        sequencing = self.sequencing
        result: dict[int, list[ProducerBatch]] = {}
        # Each node's partitions with a queue (only those: a producer of thousands of
        # topics pays for what it queued), taken in (topic, partition) order from the
        # node's cursor on (round robin, so no partition starves).
        queued: dict[int, list[TopicPartition]] = {}
        leader = cluster.leader
        for tp in self.queues:
            queued.setdefault(leader(*tp), []).append(tp)
        for node in nodes:
            if self.node_in_flight.get(node, 0) >= max_in_flight:
                continue
            parts = sorted(queued.get(node, ()))
            if not parts:
                continue
            cursor = self._drain_cursor.get(node)
            start = 0 if cursor is None else bisect.bisect_left(parts, cursor) % len(parts)
            taken: list[ProducerBatch] = []
            size = 0
            for i in range(len(parts)):
                index = (start + i) % len(parts)
                tp = parts[index]
                queue = self.queues.get(tp)
                if not queue:
                    continue
                first = queue[0]
                if first.attempts and first.retry_at > now and first.last_node == node:
                    continue
                if self.partition_in_flight.get(tp, 0) >= max_in_flight:
                    continue
                if taken and size + first.size > max_size:
                    self._drain_cursor[node] = tp  # it goes first next time
                    break
                if sequencing.drain_blocked(first):
                    continue
                queue.popleft()
                if not queue:
                    del self.queues[tp]
                if self.open.get(tp) is first:
                    del self.open[tp]
                first.seal()
                sequencing.assign(first)
                first.drained(node, now)
                self.partition_in_flight[tp] = self.partition_in_flight.get(tp, 0) + 1
                size += first.size
                taken.append(first)
            else:
                topic, partition = parts[start]
                self._drain_cursor[node] = (topic, partition + 1)  # the next one first
            if taken:
                result[node] = taken
                self.requests_started(node)
                self._node_drain_time[node] = now
        return result

    # -- batches coming back ---------------------------------------------------------

    def settle_in_flight(self, batch: ProducerBatch) -> None:
        """A drained batch's request came back (answered, lost or timed out)."""
        tp = (batch.topic, batch.partition)
        left = self.partition_in_flight.get(tp, 0) - 1
        if left > 0:
            self.partition_in_flight[tp] = left
        else:
            self.partition_in_flight.pop(tp, None)

    def requests_started(self, node: int, count: int = 1) -> None:
        """`count` more requests to `node` are in flight (each settles once)."""
        self.node_in_flight[node] = self.node_in_flight.get(node, 0) + count

    def request_done(self, node: int) -> None:
        left = self.node_in_flight.get(node, 0) - 1
        # A request settled that was never counted would let an epoch bump (which
        # waits for none in flight) overtake one still out (seed 10816290).
        assert left >= 0, f"a request to node {node} settled that was never in flight"
        if left > 0:
            self.node_in_flight[node] = left
        else:
            self.node_in_flight.pop(node, None)

    def reenqueue(self, batch: ProducerBatch, now: float, backoff: float) -> None:
        """Put a batch back for a retry, in sequence order (Java's insertInSequenceOrder)."""
        batch.requeued(now + backoff)
        tp = (batch.topic, batch.partition)
        queue = self.queues.get(tp)
        if queue is None:
            queue = self.queues[tp] = deque()
        sequence = batch.base_sequence
        if sequence < 0:
            queue.appendleft(batch)
            return
        index = 0
        for index, queued in enumerate(queue):  # noqa: B007
            if queued.base_sequence < 0 or queued.base_sequence > sequence:
                break
        else:
            index = len(queue)
        queue.insert(index, batch)

    def split_and_reenqueue(self, batch: ProducerBatch, now: float) -> list[ProducerBatch]:
        """The broker refused `batch` (several records) as too large: cut it in pieces
        and queue them at the front of its partition in record (and sequence) order,
        sendable at once (Java's `splitAndReenqueue`). A piece takes records up to
        `batch_size` or half the batch's estimated bytes, whichever is smaller (always
        at least one record, and always at least two pieces), so each refusal halves
        what is sent and a record the broker never takes ends up alone."""
        target = max(min(self.config.batch_size, batch.size // 2), 1)
        bounds: list[int] = []
        sizes: list[int] = []
        size = 0
        for index in range(batch.record_count):
            record_size = _record_size(batch, index)
            if size and size + record_size > target:
                bounds.append(index)
                sizes.append(size)
                size = 0
            size += record_size
        sizes.append(size)
        if not bounds:  # (estimates disagree with the batch's size): halve by count
            half = batch.record_count // 2
            bounds, sizes = [half], [size // 2, size - size // 2]
        sizes[-1] = max(sizes[-1] + batch.size - sum(sizes), 0)  # the bytes reserved
        pieces = batch.split(bounds, sizes)
        for piece in reversed(pieces):
            self.reenqueue(piece, now, 0.0)
        return pieces

    def set_aside(
        self, batch: ProducerBatch, refused: Sequence[int], now: float
    ) -> tuple[list[ProducerBatch], dict[int, ProducerBatch]]:
        """The broker refused `batch` for the records at `refused` (indexes, sorted; not
        all of them): cut it so that each refused record is a piece of its own, queue
        the other pieces at the front of its partition in record order, sendable at
        once. Returns every piece in record order, and the refused ones by their index
        in `batch` (the caller fails those). The refused batch appended nothing, so its
        other records are sent again rather than failed with it (Java fails them all:
        KIP-467)."""
        count = batch.record_count
        bounds = sorted({at for index in refused for at in (index, index + 1)} - {0, count})
        sizes: list[int] = []
        for start, stop in zip([0, *bounds], [*bounds, count], strict=True):
            sizes.append(sum(_record_size(batch, index) for index in range(start, stop)))
        sizes[-1] = max(sizes[-1] + batch.size - sum(sizes), 0)  # the bytes reserved
        pieces = batch.split(bounds, sizes)
        set_apart = dict.fromkeys(refused)
        apart: dict[int, ProducerBatch] = {}
        for start, piece in reversed(list(zip([0, *bounds], pieces, strict=True))):
            if start in set_apart:  # (a refused record is a piece of its own)
                apart[start] = piece
            else:
                self.reenqueue(piece, now, 0.0)
        return pieces, apart

    # -- expiry ----------------------------------------------------------------------

    def expire(self, now: float) -> list[ProducerBatch]:
        """Remove and return queued batches older than `delivery_timeout`."""
        timeout = self.config.delivery_timeout
        expired: list[ProducerBatch] = []
        for tp in list(self.queues):
            queue = self.queues[tp]
            # The deadline is the float `created + timeout`, as in ready() (a float
            # subtraction keeps the sign, so both agree on "expired at `now`"). The old
            # `created <= now - timeout` rounds differently: ready() said a batch expires
            # now (delay 0), expire() kept it, and the sender spun at one instant
            # (simulator seeds 885, 1378, 1398, 1532).
            while queue and queue[0].created + timeout <= now:
                batch = queue.popleft()
                if self.open.get(tp) is batch:
                    del self.open[tp]
                batch.seal()
                expired.append(batch)
            if not queue:
                del self.queues[tp]
        return expired

    def take_topic(self, topic: str) -> list[ProducerBatch]:
        """Remove and return every queued batch of `topic` (it no longer exists)."""
        taken: list[ProducerBatch] = []
        for tp in [tp for tp in self.queues if tp[0] == topic]:
            taken += self.queues.pop(tp)
            self.open.pop(tp, None)
        for batch in taken:
            batch.seal()
        return taken

    def take_all_queued(self) -> list[ProducerBatch]:
        """Remove every queued batch (closing, or a fatal error)."""
        batches = [b for q in self.queues.values() for b in q]
        self.queues.clear()
        self.open.clear()
        for batch in batches:
            batch.seal()
        return batches

    @property
    def has_undrained(self) -> bool:
        return bool(self.queues)


def _record_size(batch: ProducerBatch, index: int) -> int:
    """Record `index` of `batch`: its estimated bytes (as appended, `RECORD_OVERHEAD` and
    its key, value and headers)."""
    _, key, value, headers = batch.record(index)
    size = RECORD_OVERHEAD + len(value or b"") + len(key or b"")
    if headers:
        size += headers_size(headers)
    return size
