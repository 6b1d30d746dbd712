"""Choosing partitions: the cluster view, keyed (murmur2), uniform sticky (KIP-480/794),
leader-aware.

Theory of operation. What the core knows of the cluster is a `ClusterView`, an
immutable snapshot the driver builds from each Metadata response
(`ClusterView.from_leaders({topic: [leader of partition 0, leader of 1, ...]})`, -1 for
a partition without a leader) and hands to `ProducerCore.update_metadata`. It is also
what a custom partitioner receives: `partition(record, cluster_view) -> int`.
`unavailable_nodes` is filled by the accumulator when `partitioner_availability_timeout`
marks a leader as not keeping up (KIP-794); `available_partitions` leaves their
partitions out.

The accumulator asks its `Partitioner` for a partition only on its slow path (a custom
partitioner is called with the record and the cluster); a keyed record (hashed by the
accumulator itself, inline: every keyed record takes the slow path) hashes with Java's
murmur2 over all partitions; an unkeyed record goes to its topic's `StickyState`, which
names the current partition and caches that partition's open batch so the
accumulator's fast path is one comparison. The sticky partition changes once a batch's
worth of bytes went to it and its batch is full (or twice a batch's worth regardless:
Java's cap), to a partition drawn by `next_partition`.

`next_partition` is Java's `BuiltInPartitioner.nextPartition`: uniform over the
available partitions, or, with adaptive partitioning and load stats from `ready()`,
weighted by how short each partition's queue is (the partition whose leader keeps up
gets more; the table is built when the topic chooses). The leader-aware partitioner (the
producer API proposal's "one connection per producer") restricts the draw to the
partitions led by one node, and switches node every `leader_switch_interval` seconds.

`murmur2` is Kafka's key hash, bit for bit as the Java client computes it, and
`partition_for_key(key, n)` is Java's `BuiltInPartitioner.partitionForKey`:
`toPositive(murmur2(key)) % n`, where `toPositive` masks the sign bit (it does not take
an absolute value). librdkafka's `murmur2` / `murmur2_random` partitioners compute the
same function, so a key lands on the same partition from Java, librdkafka and us.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable, Mapping
from typing import Protocol

import attrs

from trio_kafka.core._batch import ProducerBatch
from trio_kafka.core._config import ProducerConfig
from trio_kafka.core._record import Headers, ProducerRecord
from trio_kafka.errors import InvalidPartitionError


@attrs.frozen(slots=True)
class ClusterView:
    #: topic -> leader node id of each partition (-1: no leader known).
    leaders: Mapping[str, tuple[int, ...]] = attrs.field(factory=dict)
    #: Nodes whose partitions the partitioners avoid (availability timeout).
    unavailable_nodes: frozenset[int] = frozenset()
    # Derived, on first use: node -> its partitions in (topic, partition) order (the
    # leader-aware partitioner's). Not built for every view: a view is made at each
    # metadata change, and with thousands of topics that would cost O(partitions) each.
    _by_node: Mapping[int, tuple[tuple[str, int], ...]] | None = attrs.field(
        default=None, init=False, repr=False, eq=False
    )

    def _partitions_by_node(self) -> Mapping[int, tuple[tuple[str, int], ...]]:
        if self._by_node is None:
            by_node: dict[int, list[tuple[str, int]]] = {}
            for topic in sorted(self.leaders):
                for partition, node in enumerate(self.leaders[topic]):
                    if node >= 0:
                        by_node.setdefault(node, []).append((topic, partition))
            object.__setattr__(self, "_by_node", {n: tuple(p) for n, p in by_node.items()})
        assert self._by_node is not None
        return self._by_node

    @classmethod
    def from_leaders(cls, leaders: Mapping[str, Iterable[int]]) -> ClusterView:
        return cls({topic: tuple(nodes) for topic, nodes in leaders.items()})

    def knows(self, topic: str) -> bool:
        return topic in self.leaders

    def num_partitions(self, topic: str) -> int:
        return len(self.leaders.get(topic, ()))

    def leader(self, topic: str, partition: int) -> int:
        nodes = self.leaders.get(topic)
        if nodes is None or partition >= len(nodes):
            return -1
        return nodes[partition]

    def available_partitions(self, topic: str) -> list[int]:
        """Partitions with a known leader that is not marked unavailable."""
        down = self.unavailable_nodes
        return [p for p, n in enumerate(self.leaders.get(topic, ())) if n >= 0 and n not in down]

    def partitions_for_node(self, node: int) -> tuple[tuple[str, int], ...]:
        return self._partitions_by_node().get(node, ())

    @property
    def nodes(self) -> list[int]:
        """Nodes that lead at least one partition, sorted."""
        return sorted(self._partitions_by_node())

    def with_unavailable(self, nodes: frozenset[int]) -> ClusterView:
        return ClusterView(self.leaders, nodes)


_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
_UNPACKERS: dict[int, struct.Struct] = {}


def murmur2(data: bytes) -> int:
    """Java's `Utils.murmur2`: the 32-bit hash as a signed Java int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    words = length >> 2
    if words:
        unpack = _UNPACKERS.get(words)
        if unpack is None:
            unpack = _UNPACKERS[words] = struct.Struct(f"<{words}I")
        for k in unpack.unpack_from(data):
            k = (k * _M) & _MASK
            k ^= k >> 24
            k = (k * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        base = length - tail
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(value: int) -> int:
    """Java's `Utils.toPositive`: clear the sign bit (not `abs`)."""
    return value & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Java's default partitioner gives a keyed record."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


def _sealed_placeholder() -> ProducerBatch:
    batch = ProducerBatch("", -1, 0, 0.0)
    batch.seal()
    return batch


#: A `StickyState.batch` that no record may take (sealed: room -1), so the accumulator's
#: fast path steps aside until the slow path names the sticky partition's open batch.
NO_BATCH = _sealed_placeholder()


class RandomSource(Protocol):
    """What the core draws randomness from (a seeded `random.Random` in the shell)."""

    def random(self) -> float: ...

    def randrange(self, stop: int, /) -> int: ...


class StickyState:
    """One topic's sticky partition and adaptive load statistics (owned by the accumulator)."""

    __slots__ = ("batch", "cumulative", "partition", "partition_ids", "produced")

    def __init__(self) -> None:
        # Current partition (-1: choose on next append) and its open batch (or a sealed
        # placeholder): the accumulator's fast path appends to `batch` directly.
        self.partition = -1
        self.batch: object = None
        # Bytes appended to `partition` since it was chosen.
        self.produced = 0
        # KIP-794 load stats: cumulative frequency table over partition_ids (None: uniform).
        self.cumulative: list[int] | None = None
        self.partition_ids: list[int] = []

    def update_load_stats(
        self, queue_sizes: list[int], partition_ids: list[int], total: int
    ) -> None:
        """Java's `updatePartitionLoadStats`: weight partitions by max+1-queue size.

        `total` is the topic's partition count; `partition_ids` may be fewer (leaders
        unavailable). Uniform when all queues are equal and none was excluded.
        """
        if not partition_ids or total < 2:
            self.cumulative = None
            return
        top = max(queue_sizes) + 1
        if len(partition_ids) == total and all(q == queue_sizes[0] for q in queue_sizes):
            self.cumulative = None
            return
        running = 0
        table = []
        for size in queue_sizes:
            running += top - size
            table.append(running)
        self.cumulative = table
        self.partition_ids = partition_ids

    def next_partition(
        self, topic: str, cluster: ClusterView, rng: RandomSource, node: int | None = None
    ) -> int:
        if node is not None:
            # Leader-aware: only the chosen node's partitions of this topic, if any.
            mine = [p for t, p in cluster.partitions_for_node(node) if t == topic]
            if mine:
                return mine[rng.randrange(len(mine))]
        table = self.cumulative
        if table is not None and node is None:
            pick = rng.randrange(table[-1])
            return self.partition_ids[bisect.bisect_right(table, pick)]
        available = cluster.available_partitions(topic)
        if available:
            return available[rng.randrange(len(available))]
        return rng.randrange(cluster.num_partitions(topic))


class LeaderChooser:
    """The leader-aware partitioner's node: one node at a time, switched on a timer."""

    __slots__ = ("interval", "node", "switch_at")

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.node: int | None = None
        self.switch_at = -float("inf")  # choose at the first append

    def choose(
        self, cluster: ClusterView, rng: RandomSource, now: float, topics: Iterable[str] = ()
    ) -> int | None:
        """Pick the next node (another one than the current when there is a choice),
        preferring nodes that lead a partition of every topic produced to so far."""
        nodes = [n for n in cluster.nodes if n not in cluster.unavailable_nodes] or cluster.nodes
        wanted = set(topics)
        covering = [n for n in nodes if wanted <= {t for t, _ in cluster.partitions_for_node(n)}]
        nodes = covering or nodes
        if len(nodes) > 1 and self.node in nodes:
            nodes = [n for n in nodes if n != self.node]
        self.node = nodes[rng.randrange(len(nodes))] if nodes else None
        self.switch_at = now + self.interval
        return self.node


class Partitioner:
    """The accumulator's choice of partition for a record that names none (see the
    module doc). Its `sticky` states are read and updated by the accumulator's fast
    path, which appends to `sticky.batch` while it has room."""

    def __init__(
        self,
        config: ProducerConfig,
        rng: RandomSource,
        queue_lengths: Mapping[tuple[str, int], int] | None = None,
    ) -> None:
        self.rng = rng
        # KIP-794: partitions' queued batches at the last ready() (absent: none), for
        # the load stats of a topic choosing its sticky partition (None: not adaptive).
        self.queue_lengths = queue_lengths if config.partitioner_adaptive else None
        self.batch_size = config.batch_size
        # Topic -> its sticky partition and batch (unkeyed records).
        self.sticky: dict[str, StickyState] = {}
        self.leader = (
            LeaderChooser(config.leader_switch_interval)
            if config.partitioner == "leader_aware"
            else None
        )
        self.custom = config.partitioner if callable(config.partitioner) else None

    @property
    def switch_at(self) -> float:
        """When the leader-aware node is switched next (inf: never)."""
        return self.leader.switch_at if self.leader is not None else float("inf")

    def choose(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: Headers | None,
        timestamp_ms: int | None,
        size: int,
        now: float,
        cluster: ClusterView,
        open_batches: dict[tuple[str, int], ProducerBatch],
    ) -> tuple[int, StickyState | None]:
        """The partition for a record that is not hashed by its key (the accumulator
        hashes those itself, inline): from the custom partitioner, else sticky, with the
        topic's `StickyState` (the caller records the bytes appended)."""
        count = cluster.num_partitions(topic)
        if self.custom is not None:
            record = ProducerRecord(topic, value, key, headers or (), None, timestamp_ms)
            partition = self.custom(record, cluster)
            if not 0 <= partition < count:
                raise InvalidPartitionError(
                    f"the custom partitioner chose partition {partition} of topic {topic!r},"
                    f" which has {count}"
                )
            return partition, None
        if now >= self.switch_at:
            self._switch_leader(now, topic, cluster)
        sticky = self.sticky.get(topic)
        if sticky is None:
            sticky = self.sticky[topic] = StickyState()
        return self._sticky_partition(topic, sticky, size, cluster, open_batches), sticky

    def _sticky_partition(
        self,
        topic: str,
        sticky: StickyState,
        size: int,
        cluster: ClusterView,
        open_batches: dict[tuple[str, int], ProducerBatch],
    ) -> int:
        """Java's sticky switch: after a batch's worth of bytes, once that batch is full
        (or after twice a batch's worth regardless)."""
        partition = sticky.partition
        if partition >= 0:
            open_batch = open_batches.get((topic, partition))
            full = open_batch is None or size > open_batch.room
            produced = sticky.produced
            if not (produced >= self.batch_size and full) and produced < 2 * self.batch_size:
                return partition
        node = self.leader.node if self.leader is not None else None
        if self.queue_lengths is not None and node is None:
            self._update_load_stats(topic, sticky, cluster, self.queue_lengths)
        partition = sticky.next_partition(topic, cluster, self.rng, node)
        sticky.partition = partition
        sticky.produced = 0
        sticky.batch = NO_BATCH
        return partition

    def _switch_leader(self, now: float, topic: str, cluster: ClusterView) -> None:
        assert self.leader is not None
        self.leader.choose(cluster, self.rng, now, {topic, *self.sticky})
        for sticky in self.sticky.values():
            sticky.partition = -1
            sticky.batch = NO_BATCH

    def update_cluster(self, cluster: ClusterView, old: ClusterView | None = None) -> None:
        """New metadata: forget sticky choices whose partition lost its leader, and the
        leader-aware node if it left the cluster (another is picked at the next append).
        Topics whose leaders are the same object as in `old` (unchanged) are skipped."""
        before = old.leaders if old is not None else {}
        for topic, sticky in self.sticky.items():
            leaders = cluster.leaders.get(topic)
            if leaders is not None and leaders is before.get(topic):
                continue
            if sticky.partition >= 0 and cluster.leader(topic, sticky.partition) < 0:
                sticky.partition = -1
                sticky.batch = NO_BATCH
        if self.leader is not None and self.leader.node not in cluster.nodes:
            self.leader.switch_at = -float("inf")

    @staticmethod
    def _update_load_stats(
        topic: str,
        sticky: StickyState,
        cluster: ClusterView,
        queue_lengths: Mapping[tuple[str, int], int],
    ) -> None:
        """KIP-794: weight the topic's partitions by how short their queues were at the
        last `ready()`, leaving out partitions without leader or on an unavailable node.
        Java builds every topic's table at each `ready()`; here only the table of the
        topic choosing its next partition, when it does (once a batch), from the same
        lengths, so a producer writing to thousands of topics does not pay for all of
        them on every pass of its sender."""
        leaders = cluster.leaders.get(topic, ())
        unavailable = cluster.unavailable_nodes
        sizes: list[int] = []
        ids: list[int] = []
        for partition, node in enumerate(leaders):
            if node < 0 or node in unavailable:
                continue
            sizes.append(queue_lengths.get((topic, partition), 0))
            ids.append(partition)
        sticky.update_load_stats(sizes, ids, len(leaders))
