"""Cluster metadata: immutable snapshots of brokers, topics, partitions and leaders.

The selector holds one `ClusterMetadata` and replaces it whole on every refresh, so a
reader that took a snapshot sees a consistent view however long it keeps it. Snapshots
are built from a MetadataResponse by `ClusterMetadata.from_response`, which keeps the
cached partition when the response carries an older leader epoch than the cache
(KIP-320: a broker that lags behind a leader change must not move us back).

Also here: bootstrap address parsing and `invalidates_metadata`, which says whether an
error means "refresh the metadata, then retry" (the `invalid_metadata` column of
`errors.ERRORS`, plus lost connections and timeouts, after which the Java client refreshes
too).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from trio_kafka.errors import (
    BrokerConnectionError,
    BrokerError,
    ConfigError,
    ConnectionLostError,
    ErrorCode,
    InvalidTopicError,
    RequestTimeoutError,
    error_info,
)

_NULL_UUID = uuid.UUID(int=0)


# Kafka's org.apache.kafka.common.internals.Topic: legal characters and maximum length.
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
MAX_TOPIC_LENGTH = 249


def check_topic_name(topic: str) -> None:
    """Kafka's rules for a topic name (`Topic.validate`): `InvalidTopicError` if broken.
    A name no broker can hold fails here, before any request, instead of after a wait."""
    problem = None
    if not topic:
        problem = "it is empty"
    elif topic in (".", ".."):
        problem = "'.' and '..' are not allowed"
    elif len(topic) > MAX_TOPIC_LENGTH:
        problem = f"it is {len(topic)} characters long (at most {MAX_TOPIC_LENGTH})"
    elif _LEGAL_TOPIC.fullmatch(topic) is None:
        bad = sorted({c for c in topic if _LEGAL_TOPIC.fullmatch(c) is None})
        problem = f"it contains {''.join(bad)!r}; only ASCII letters, digits, '.', '_', '-'"
    if problem is not None:
        raise InvalidTopicError(
            f"topic name {topic!r} is not a valid Kafka topic name: {problem}", topic=topic
        )


@attrs.frozen(slots=True)
class BrokerMetadata:
    node_id: int
    host: str
    port: int
    rack: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@attrs.frozen(slots=True)
class PartitionMetadata:
    topic: str
    partition: int
    #: Node id of the leader, -1 when there is none (election in progress).
    leader: int
    #: -1 when the broker does not send one (Metadata < v7).
    leader_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()
    error_code: int = 0


@attrs.frozen(slots=True)
class TopicMetadata:
    name: str
    #: The partitions, indexed by partition number (sorted, usually 0..n-1).
    partitions: tuple[PartitionMetadata, ...] = ()
    topic_id: uuid.UUID | None = None
    error_code: int = 0
    is_internal: bool = False

    @property
    def error(self) -> ErrorCode | int:
        try:
            return ErrorCode(self.error_code)
        except ValueError:
            return self.error_code

    @property
    def partition_count(self) -> int:
        return len(self.partitions)

    @property
    def is_usable(self) -> bool:
        """Known, without a topic-level error, and with at least one partition."""
        return self.error_code == 0 and bool(self.partitions)


@attrs.frozen(slots=True)
class ClusterMetadata:
    """One consistent view of the cluster. Treat the mappings as read-only."""

    brokers: Mapping[int, BrokerMetadata] = attrs.field(factory=dict)
    topics: Mapping[str, TopicMetadata] = attrs.field(factory=dict)
    cluster_id: str | None = None
    controller_id: int = -1
    #: Clock time of the response this snapshot came from (None: never refreshed).
    updated_at: float | None = None

    def topic(self, name: str) -> TopicMetadata | None:
        return self.topics.get(name)

    def partition(self, topic: str, partition: int) -> PartitionMetadata | None:
        info = self.topics.get(topic)
        if info is None or not 0 <= partition < len(info.partitions):
            return None
        found = info.partitions[partition]
        return found if found.partition == partition else None

    def leader_for(self, topic: str, partition: int) -> BrokerMetadata | None:
        """The leader broker, or None when unknown (refresh the metadata)."""
        found = self.partition(topic, partition)
        if found is None or found.leader < 0:
            return None
        return self.brokers.get(found.leader)

    def with_response(
        self, response: Any, *, now: float, requested: Iterable[str] | None
    ) -> ClusterMetadata:
        """The snapshot after a MetadataResponse. Topics not requested keep their cached
        entry; a partition whose new leader epoch is older than the cached one is kept."""
        brokers = {
            b.node_id: BrokerMetadata(b.node_id, b.host, b.port, getattr(b, "rack", None))
            for b in response.brokers
        }
        topics: dict[str, TopicMetadata] = {}
        if requested is not None:
            # The entries of topics not asked for are kept as they are (the same
            # objects: a reader may tell what changed by identity).
            topics = dict(self.topics)
            for name in requested:
                topics.pop(name, None)
        for raw in response.topics:
            if raw.name is None:
                continue
            cached = self.topics.get(raw.name)
            partitions = sorted(
                (
                    PartitionMetadata(
                        topic=raw.name,
                        partition=p.partition_index,
                        leader=p.leader_id,
                        leader_epoch=getattr(p, "leader_epoch", -1),
                        replicas=tuple(p.replica_nodes),
                        isr=tuple(p.isr_nodes),
                        offline_replicas=tuple(getattr(p, "offline_replicas", ())),
                        error_code=p.error_code,
                    )
                    for p in raw.partitions
                ),
                key=lambda p: p.partition,
            )
            if cached is not None:
                partitions = [_newer(cached, p) for p in partitions]
            topic_id = getattr(raw, "topic_id", None)
            topics[raw.name] = TopicMetadata(
                name=raw.name,
                partitions=tuple(partitions),
                topic_id=None if topic_id in (None, _NULL_UUID) else topic_id,
                error_code=raw.error_code,
                is_internal=bool(getattr(raw, "is_internal", False)),
            )
        return ClusterMetadata(
            brokers=brokers,
            topics=topics,
            cluster_id=getattr(response, "cluster_id", None),
            controller_id=getattr(response, "controller_id", -1),
            updated_at=now,
        )

    def with_leaders(
        self,
        leaders: Iterable[tuple[str, int, int, int]],
        endpoints: Iterable[BrokerMetadata] = (),
    ) -> ClusterMetadata:
        """KIP-951: the snapshot after a Produce answer named partitions' current
        leaders ((topic, partition, leader id, leader epoch)) and their endpoints. A hint
        is taken only when its leader epoch is newer than the cached one (or the cached
        one is unknown) and the leader's address is known; brokers already known keep
        their address (a Metadata refresh decides moves). Returns `self` when nothing
        changes; `updated_at` stays (this is no refresh)."""
        brokers = dict(self.brokers)
        for broker in endpoints:
            brokers.setdefault(broker.node_id, broker)
        topics = dict(self.topics)
        changed = len(brokers) != len(self.brokers)
        for topic, partition, leader, epoch in leaders:
            info = topics.get(topic)
            if info is None or not 0 <= partition < len(info.partitions):
                continue
            found = info.partitions[partition]
            if found.partition != partition or leader not in brokers:
                continue
            if found.leader_epoch >= 0 and epoch <= found.leader_epoch:
                continue  # not newer than what we know
            if found.leader == leader and found.leader_epoch == epoch:
                continue
            moved = attrs.evolve(found, leader=leader, leader_epoch=epoch)
            parts = list(info.partitions)
            parts[partition] = moved
            topics[topic] = attrs.evolve(info, partitions=tuple(parts))
            changed = True
        if not changed:
            return self
        return ClusterMetadata(
            brokers=brokers,
            topics=topics,
            cluster_id=self.cluster_id,
            controller_id=self.controller_id,
            updated_at=self.updated_at,
        )

    def __repr__(self) -> str:
        return (
            f"<ClusterMetadata [cluster {self.cluster_id!r}, brokers "
            f"{sorted(self.brokers)}, topics {sorted(self.topics)}]>"
        )


def _newer(cached: TopicMetadata, fresh: PartitionMetadata) -> PartitionMetadata:
    old = cached.partitions[fresh.partition] if fresh.partition < len(cached.partitions) else None
    if (
        old is not None
        and old.partition == fresh.partition
        and fresh.leader_epoch >= 0
        and old.leader_epoch > fresh.leader_epoch
    ):
        return old
    return fresh


def parse_bootstrap(servers: str | Iterable[str]) -> list[tuple[str, int]]:
    """`"a:1,b:2"` or `["a:1", "b:2"]` -> `[("a", 1), ("b", 2)]`; IPv6 as `[::1]:9092`.
    A listener's `PLAINTEXT://` or `tcp://` before an address is dropped (the Java
    client and librdkafka drop any); `SSL://` and the SASL ones are refused, naming the
    option that does turn them on, rather than ignored."""
    given: object = servers  # checked: callers pass what users typed
    if isinstance(given, bytes) or not isinstance(given, str | Iterable):
        raise ConfigError(
            f"bootstrap servers must be 'host:port,host:port' or a list of 'host:port' "
            f"strs, not {type(servers).__name__} ({servers!r})"
        )
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    addresses: list[tuple[str, int]] = []
    for item in items:
        if not isinstance(item, str):
            raise ConfigError(
                f"bootstrap server {item!r} is not a 'host:port' str but a {type(item).__name__}"
            )
        text = item.strip()
        if not text:
            continue
        scheme, sep, rest = text.partition("://")
        if sep:
            if scheme.upper() not in ("PLAINTEXT", "TCP"):
                raise ConfigError(
                    f"bootstrap server {text!r}: give host:port without {scheme}://"
                    + (
                        f" (for {scheme.upper()}, pass security_protocol={scheme.upper()!r})"
                        if scheme.upper() in ("SSL", "SASL_SSL", "SASL_PLAINTEXT")
                        else ""
                    )
                )
            text = rest
        host, sep, port_text = text.rpartition(":")
        if not sep or not host or not port_text.isdigit():
            raise ConfigError(f"bootstrap server {text!r} is not host:port")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        port = int(port_text)
        if not 0 < port < 65536:
            raise ConfigError(f"bootstrap server {text!r} has a port out of range")
        addresses.append((host, port))
    if not addresses:
        raise ConfigError(f"no bootstrap servers given ({servers!r})")
    return addresses


def invalidates_metadata(error: int | BaseException) -> bool:
    """True when `error` (an error code or an exception) means: refresh the metadata,
    then retry."""
    if isinstance(error, BaseException):
        if isinstance(error, BrokerError):
            return error_info(error.code).invalid_metadata
        return isinstance(error, BrokerConnectionError | ConnectionLostError | RequestTimeoutError)
    return error_info(error).invalid_metadata
