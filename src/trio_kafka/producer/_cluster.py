"""`ClusterView`: what the core knows of the cluster (partitions and their leaders).

An immutable snapshot the driver builds from each Metadata response
(`ClusterView.from_leaders({topic: [leader of partition 0, leader of 1, ...]})`, -1 for
a partition without a leader) and hands to `ProducerCore.update_metadata`. It is also
what a custom partitioner receives: `partition(record, cluster_view) -> int`.
`unavailable_nodes` is filled by the accumulator when `partitioner_availability_timeout`
marks a leader as not keeping up (KIP-794); `available_partitions` leaves their
partitions out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs


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
