"""The record accumulator: per-partition batch queues, buffer memory, ready/drain/expire.

Theory of operation. Each partition with unsent data has a queue of batches; the last
one is open for appends (`_open`). `append` reserves the record's estimated size from
`buffer_memory` and puts it in the open batch; the common case (an unkeyed record whose
topic's sticky batch has room) touches four attributes and a list. Everything else
(keyed, custom partitioner, CAS, a full batch, a partition switch) takes `_append_slow`.
An explicit partition has its own fast path: into that partition's open batch when it
has room and the partition is below the topic's known count (else `_append_slow`).
`append_many(..., partition=)` is that fast path for a whole run of records: the
cumulative sizes of the run (`itertools.accumulate`, in C) and a bisection say how many
fit the open batch, which takes them with one list extend; the record that does not fit
opens the next batch through `_append_slow`, so batches are filled to `batch_size`
(a load's transaction is a few full batches, not many half-filled ones).

`ready(now)` reports the leaders with a sendable batch (full, lingered, backed off
long enough or sent last to another node than its leader now, or everything when the buffer is exhausted, a flush runs or the
accumulator closes), the delay until the next batch becomes sendable or expires, and
the topics with a partition without leader; it also builds the adaptive partitioner's
load stats. `drain(now, nodes)` takes, per node, at most one batch per partition, round
robin, up to `max_request_size`, obeying the sequencing policy's ordering rules and
`max_in_flight` per node and per partition. `expire(now)` removes queued batches past
`delivery_timeout`. In-flight batches are the core's business until they come back.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Iterable, Sequence
from itertools import accumulate, repeat
from operator import add as _add
from typing import Any, NamedTuple

from trio_kafka.errors import InvalidPartitionError, RecordTooLargeError, UnknownTopicError
from trio_kafka.producer._batch import BatchState, ProducerBatch
from trio_kafka.producer._cluster import ClusterView
from trio_kafka.producer._config import BufferFullStrategy, ProducerConfig
from trio_kafka.producer._handle import DeliveryHandle
from trio_kafka.producer._murmur import murmur2
from trio_kafka.producer._partitioner import LeaderChooser, RandomSource, StickyState
from trio_kafka.producer._record import Headers, ProducerRecord
from trio_kafka.producer._sequencer import SequencingPolicy, TopicPartition

# Per-record overhead estimate (length, attributes, deltas, key/value lengths, header
# count varints): an upper bound for small records, as Java's estimate is.
RECORD_OVERHEAD = 16
_INF = float("inf")
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


class ReadyResult(NamedTuple):
    ready_nodes: set[int]
    next_check_delay: float
    unknown_leader_topics: set[str]


def _sealed_placeholder() -> ProducerBatch:
    batch = ProducerBatch("", -1, 0, 0.0)
    batch.seal()
    return batch


_NO_BATCH = _sealed_placeholder()


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


def headers_size(headers: Headers) -> int:
    return sum(len(k) + (len(v) if v else 0) + 4 for k, v in headers)


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
        self.handle_class = handle_class
        self.rng = rng
        self.sequencing = sequencing
        self.cluster = cluster if cluster is not None else ClusterView()
        # Seconds to add to `now` to get Unix time for record timestamps (set by the driver).
        self.wall_offset = wall_offset
        self.batch_size = config.batch_size
        self.linger = config.linger
        # Partition -> queue of batches (only non-empty queues are kept).
        self.queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        # Partition -> its open batch (the last of its queue, still taking appends).
        self._open: dict[TopicPartition, ProducerBatch] = {}
        self._sticky: dict[str, StickyState] = {}
        self._leader = (
            LeaderChooser(config.leader_switch_interval)
            if config.partitioner == "leader_aware"
            else None
        )
        # Next time the fast path must step aside (leader-aware node switch).
        self._switch_at = -_INF if self._leader is not None else _INF
        self._custom = config.partitioner if callable(config.partitioner) else None
        self._ignore_keys = config.partitioner_ignore_keys
        # murmur2 of recently seen keys (bounded): keyed workloads repeat keys.
        self._key_hashes: dict[bytes, int] = {}
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
        # Unfinished sequenced-or-sent batches in flight, per partition and per node.
        self.partition_in_flight: dict[TopicPartition, int] = {}
        self.node_in_flight: dict[int, int] = {}
        # Drain round-robin start per node (so no partition starves).
        self._drain_index: dict[int, int] = {}
        # Availability timeout bookkeeping (KIP-794): last time a node had sendable data
        # and last time we could drain it.
        self._node_ready_time: dict[int, float] = {}
        self._node_drain_time: dict[int, float] = {}

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
            self._no_room(size)
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
        elif partition is not None and expected_offset < 0:
            # An explicit partition: straight into its open batch when it has room and
            # the partition is still below the topic's known count (metadata may have
            # shrunk it); anything else (no open batch, full, CAS, a bad or unknown
            # partition) takes the slow path, which opens batches and raises.
            open_batch = self._open.get((topic, partition))
            if (
                open_batch is not None
                and open_batch.expected_offset < 0
                and open_batch.room >= size
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
        batch = _NO_BATCH
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
            if batch is not _NO_BATCH:
                self._close_span(topic, batch, room, produced, spans, start)
            self.buffer_used = used
            if used + size > limit:
                self._no_room(size)
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
        if batch is not _NO_BATCH:
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
                    self._no_room(size)
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
            if keys is not None:  # in the batch's key list: no tuple per record
                batch_keys = batch.keys
                if batch_keys is None:
                    batch_keys = batch.keys = []
                if len(batch_keys) < start:
                    batch_keys.extend(repeat(None, start - len(batch_keys)))
                batch_keys.extend(keys[position:stop])
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

    def _no_room(self, size: int) -> None:
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
        elif self._custom is not None:
            record = ProducerRecord(topic, value, key, headers or (), None, timestamp_ms)
            partition = self._custom(record, cluster)
            if not 0 <= partition < count:
                raise InvalidPartitionError(
                    f"the custom partitioner chose partition {partition} of topic {topic!r},"
                    f" which has {count}"
                )
        elif key is not None and not self._ignore_keys:
            hashed = self._key_hashes.get(key)
            if hashed is None:
                if len(self._key_hashes) >= _KEY_CACHE:
                    self._key_hashes.clear()
                hashed = self._key_hashes[key] = murmur2(key) & 0x7FFFFFFF
            partition = hashed % count
        else:
            if now >= self._switch_at:
                self._switch_leader(now, topic)
            sticky = self._sticky.get(topic)
            if sticky is None:
                sticky = self._sticky[topic] = StickyState()
            partition = self._sticky_partition(topic, sticky, size)
        tp = (topic, partition)
        batch = self._open.get(tp)
        if (
            batch is None
            or size > batch.room
            or (
                expected_offset >= 0
                and batch.expected_offset + len(batch.values) != expected_offset
            )
            or (expected_offset < 0 and batch.expected_offset >= 0)
        ):
            if batch is not None:
                batch.seal()
            batch = ProducerBatch(
                topic,
                partition,
                max(self.batch_size, size),
                now,
                self.wall_offset,
                expected_offset,
            )
            self._open[tp] = batch
            queue = self.queues.get(tp)
            if queue is None:
                queue = self.queues[tp] = deque()
            queue.append(batch)
        batch.room -= size
        self.buffer_used += size
        if sticky is not None:
            sticky.produced += size
            sticky.batch = batch if expected_offset < 0 else _NO_BATCH
        values = batch.values
        index = len(values)
        values.append(value)
        if now >= batch.tick:
            batch.stamp(index, now)
        if key is not None or headers or timestamp_ms is not None:
            batch.set_extras(index, timestamp_ms, key, headers)
        return self.handle_class(batch, index)

    def _sticky_partition(self, topic: str, sticky: StickyState, size: int) -> int:
        """Java's sticky switch: after a batch's worth of bytes, once that batch is full
        (or after twice a batch's worth regardless)."""
        partition = sticky.partition
        if partition >= 0:
            open_batch = self._open.get((topic, partition))
            full = open_batch is None or size > open_batch.room
            produced = sticky.produced
            if not (produced >= self.batch_size and full) and produced < 2 * self.batch_size:
                return partition
        node = self._leader.node if self._leader is not None else None
        partition = sticky.next_partition(topic, self.cluster, self.rng, node)
        sticky.partition = partition
        sticky.produced = 0
        sticky.batch = _NO_BATCH
        return partition

    def _switch_leader(self, now: float, topic: str) -> None:
        assert self._leader is not None
        self._leader.choose(self.cluster, self.rng, now, {topic, *self._sticky})
        self._switch_at = self._leader.switch_at
        for sticky in self._sticky.values():
            sticky.partition = -1
            sticky.batch = _NO_BATCH

    @property
    def leader_node(self) -> int | None:
        """The leader-aware partitioner's current node (None for other partitioners)."""
        return self._leader.node if self._leader is not None else None

    def update_cluster(self, cluster: ClusterView) -> None:
        """New metadata: forget sticky choices whose partition lost its leader."""
        self.cluster = cluster
        for topic, sticky in self._sticky.items():
            if sticky.partition >= 0 and cluster.leader(topic, sticky.partition) < 0:
                sticky.partition = -1
                sticky.batch = _NO_BATCH
        if self._leader is not None and self._leader.node not in cluster.nodes:
            self._switch_at = -_INF  # pick another node at the next append

    # -- ready / drain ---------------------------------------------------------------

    def ready(self, now: float) -> ReadyResult:
        """Leaders with sendable data, the delay until the next check, leaderless topics."""
        cluster = self.cluster
        ready_nodes: set[int] = set()
        unknown: set[str] = set()
        delay = _INF
        linger = self.linger
        max_in_flight = self.config.max_in_flight
        delivery_timeout = self.config.delivery_timeout
        send_all = self.exhausted or self.flushing > 0 or self.closed
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
        if self.config.partitioner_adaptive and self._sticky:
            self._update_load_stats(now)
        return ReadyResult(ready_nodes, delay, unknown)

    def _update_load_stats(self, now: float) -> None:
        cluster = self.cluster
        timeout = self.config.partitioner_availability_timeout
        unavailable: set[int] = set()
        if timeout > 0:
            for node, ready_time in self._node_ready_time.items():
                if ready_time - self._node_drain_time.get(node, ready_time) > timeout:
                    unavailable.add(node)
        if frozenset(unavailable) != cluster.unavailable_nodes:
            self.cluster = cluster = cluster.with_unavailable(frozenset(unavailable))
        queues = self.queues
        for topic, sticky in self._sticky.items():
            leaders = cluster.leaders.get(topic, ())
            sizes: list[int] = []
            ids: list[int] = []
            for partition, node in enumerate(leaders):
                if node < 0 or node in unavailable:
                    continue
                queue = queues.get((topic, partition))
                sizes.append(len(queue) if queue else 0)
                ids.append(partition)
            sticky.update_load_stats(sizes, ids, len(leaders))

    def drain(
        self, now: float, nodes: Iterable[int], max_request_size: int | None = None
    ) -> dict[int, list[ProducerBatch]]:
        """Take the batches to send now: one request's worth per node (see module doc)."""
        max_size = self.config.max_request_size if max_request_size is None else max_request_size
        max_in_flight = self.config.max_in_flight
        sequencing = self.sequencing
        result: dict[int, list[ProducerBatch]] = {}
        for node in nodes:
            if self.node_in_flight.get(node, 0) >= max_in_flight:
                continue
            parts = self.cluster.partitions_for_node(node)
            if not parts:
                continue
            start = self._drain_index.get(node, 0) % len(parts)
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
                    self._drain_index[node] = index
                    break
                if sequencing.drain_blocked(first):
                    continue
                queue.popleft()
                if not queue:
                    del self.queues[tp]
                if self._open.get(tp) is first:
                    del self._open[tp]
                first.seal()
                sequencing.assign(first)
                first.state = BatchState.IN_FLIGHT
                first.attempts += 1
                first.last_attempt = now
                first.last_node = node
                self.partition_in_flight[tp] = self.partition_in_flight.get(tp, 0) + 1
                size += first.size
                taken.append(first)
            else:
                self._drain_index[node] = start + 1
            if taken:
                result[node] = taken
                self.node_in_flight[node] = self.node_in_flight.get(node, 0) + 1
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

    def request_done(self, node: int) -> None:
        left = self.node_in_flight.get(node, 0) - 1
        if left > 0:
            self.node_in_flight[node] = left
        else:
            self.node_in_flight.pop(node, None)

    def reenqueue(self, batch: ProducerBatch, now: float, backoff: float) -> None:
        """Put a batch back for a retry, in sequence order (Java's insertInSequenceOrder)."""
        batch.state = BatchState.QUEUED
        batch.retry_at = now + backoff
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
            _, key, value, headers = batch.record(index)
            record_size = RECORD_OVERHEAD + len(value or b"") + len(key or b"")
            if headers:
                record_size += headers_size(headers)
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

    def release(self, batch: ProducerBatch) -> None:
        """Give back a finished batch's buffer bytes."""
        self.buffer_used -= batch.size
        if self.exhausted and self.buffer_used < self.buffer_limit:
            self.exhausted = False

    def has_room(self, size: int) -> bool:
        return self.buffer_used + size <= self.buffer_limit

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
                if self._open.get(tp) is batch:
                    del self._open[tp]
                batch.seal()
                expired.append(batch)
            if not queue:
                del self.queues[tp]
        return expired

    def take_all_queued(self) -> list[ProducerBatch]:
        """Remove every queued batch (closing, or a fatal error)."""
        batches = [b for q in self.queues.values() for b in q]
        self.queues.clear()
        self._open.clear()
        for batch in batches:
            batch.seal()
        return batches

    @property
    def has_undrained(self) -> bool:
        return bool(self.queues)
