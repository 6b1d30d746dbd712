"""Choosing partitions: keyed (murmur2), uniform sticky (KIP-480/794), leader-aware.

Theory of operation. The accumulator asks for a partition only on its slow path: a
keyed record hashes with Java's murmur2 over all partitions; an unkeyed record goes to
its topic's `StickyState`, which names the current partition and caches that
partition's open batch so the accumulator's fast path is one comparison. The sticky
partition changes once a batch's worth of bytes went to it and its batch is full (or
twice a batch's worth regardless: Java's cap), to a partition drawn by `next_partition`.

`next_partition` is Java's `BuiltInPartitioner.nextPartition`: uniform over the
available partitions, or, with adaptive partitioning and load stats from `ready()`,
weighted by how short each partition's queue is (the partition whose leader keeps up
gets more). The leader-aware partitioner (the producer API proposal's "one connection
per producer") restricts the draw to the partitions led by one node, and switches node
every `leader_switch_interval` seconds.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Protocol

from trio_kafka.producer._cluster import ClusterView


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
