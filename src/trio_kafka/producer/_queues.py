"""`BatchQueues`: every partition's batches, from their queue to a request and back.

Theory of operation. Each partition with unsent data has a queue of batches (`queues`);
the last one may still be open for appends (`open`: the accumulator fills it, and adds
a new one with `add` when it is full). `ready(now, cluster, send_all)` reports the
leaders with a sendable batch (full, lingered, backed off long enough or sent last to
another node than its leader now, or everything with `send_all`: the buffer exhausted,
a flush running or the producer closing), the delay until the next batch becomes
sendable or expires, and the topics with a partition without leader. `drain(now,
nodes, cluster)` takes, per node, at most one batch per partition, round robin, up to
`max_request_size`, obeying the sequencing policy's ordering rules and `max_in_flight`
per node and per partition; a drained batch is sealed, sequenced and IN_FLIGHT. When
its request comes back it leaves the in-flight counts (`settle_request`, where the
core decides each batch), and the core may put it back for a retry in sequence order
(`reenqueue`) or cut it in pieces (`split_and_reenqueue`). `expire(now)` removes queued batches past `delivery_timeout`.

Owned by the `RecordAccumulator` (its `batches`); the core calls the methods above.
The per-record path never comes here: an append touches only the open batch.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from trio_kafka.producer._batch import BatchState, ProducerBatch
from trio_kafka.producer._cluster import ClusterView
from trio_kafka.producer._config import ProducerConfig
from trio_kafka.producer._record import RECORD_OVERHEAD, headers_size
from trio_kafka.producer._responses import Decision, Settled
from trio_kafka.producer._sequencing import SequencingPolicy, TopicPartition

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
                first.state = BatchState.IN_FLIGHT
                first.attempts += 1
                first.last_attempt = now
                first.last_node = node
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

    def settle_request(
        self,
        node: int,
        batches: Sequence[ProducerBatch],
        settle: Callable[[ProducerBatch], Decision],
        *,
        refresh: bool,
    ) -> Settled:
        """A request to `node` came back (or could not leave): each of its batches still
        in flight leaves the in-flight counts and `settle` decides it (the core's);
        `refresh`: ask for metadata whatever they say."""
        completed = retried = 0
        for batch in batches:
            if batch.state is not BatchState.IN_FLIGHT:
                continue
            if not (completed or retried):  # the first batch still out: the request
                self.request_done(node)  # counts (none: a late duplicate, counts nothing)
            self.settle_in_flight(batch)
            decision = settle(batch)
            if decision.retried:
                retried += 1
            else:
                completed += 1
            refresh = refresh or decision.refresh
        return Settled(refresh, completed, retried)

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
        pieces = split_batch(batch, bounds, sizes)
        for piece in reversed(pieces):
            self.reenqueue(piece, now, 0.0)
        return pieces

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


def split_batch(
    batch: ProducerBatch, bounds: Sequence[int], sizes: Sequence[int]
) -> list[ProducerBatch]:
    """Cut `batch` into pieces at `bounds` (the first record index of each piece
    after the first; `sizes`: each piece's estimated bytes, which it now holds of
    this batch's buffer reservation). Returns the pieces, in record order; `batch`
    finishes when they all have (see the module doc)."""
    starts = [0, *bounds]
    stops = [*bounds, len(batch.values)]
    pieces: list[tuple[int, ProducerBatch, int]] = []
    extras = batch.extras
    for start, stop, size in zip(starts, stops, sizes, strict=True):
        piece = ProducerBatch(batch.topic, batch.partition, size, batch.created, batch.wall_offset)
        piece.values = batch.values[start:stop]
        first = bisect.bisect_right(batch.run_starts, start) - 1
        last = bisect.bisect_right(batch.run_starts, stop - 1)
        piece.run_starts = [max(0, at - start) for at in batch.run_starts[first:last]]
        piece.run_ms = batch.run_ms[first:last]
        if batch.keys is not None and start < len(batch.keys):
            piece.keys = batch.keys[start:stop]
        if extras:
            for index in range(start, stop):
                extra = extras.get(index)
                if extra is not None:
                    piece.set_extras(index - start, *extra)
        piece.room = -1  # sealed: nothing more is appended to a piece
        piece.reserved = size
        piece.attempts = batch.attempts
        piece.producer_id = batch.producer_id
        piece.producer_epoch = batch.producer_epoch
        piece.is_transactional = batch.is_transactional
        piece.sequence_reset = batch.sequence_reset
        if batch.base_sequence >= 0:
            piece.base_sequence = batch.base_sequence + start
        pieces.append((start, piece, 0))
    batch.follow(pieces)
    return [piece for _, piece, _ in pieces]
