"""The whole cluster's state, without sockets: what every handler reads and changes.

Theory of operation
-------------------
A `ClusterState` is the single owner of everything the brokers of one cluster know:
topics and their partitions (each with a leader node), the transaction coordinator, the
group coordinator and committed offsets, and which node coordinates transactions and
groups. Handlers (`handlers/`) are plain functions of (`RequestContext`, request) that
read and change it; the TCP server (`_server.py`) and a simulator are thin shells that
decode frames, call handlers and send what they return. Every handler runs to completion
without awaiting, so within one trio run no request ever sees another half-applied.

Time and randomness are injected: `clock()` returns milliseconds since the epoch (the
server passes the wall clock, a simulator its virtual one), topic ids come from
`new_uuid()`, producer ids from the transaction coordinator's generator. `changed` is
called after every append so that a waiting Fetch can wake up (the shell decides how).

Leaders are spread round robin over the nodes; `move_leader` and
`move_transaction_coordinator` let tests and the simulator change them; the old node then
answers NOT_LEADER_OR_FOLLOWER or NOT_COORDINATOR.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable

import attrs

from trio_kafka.broker._groups import CommittedOffset, GroupCoordinator
from trio_kafka.broker._partition import Partition
from trio_kafka.broker._producer_state import ProducerStateTable
from trio_kafka.broker._topics import (
    DEFAULT_TIMESTAMP_AFTER_MAX_MS,
    DEFAULT_TIMESTAMP_BEFORE_MAX_MS,
    TopicConfig,
    TopicConfigError,
)
from trio_kafka.broker._txn import MarkerJob, TransactionCoordinator
from trio_kafka.errors import ErrorCode

MAX_TOPIC_NAME = 249
_LEGAL_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


@attrs.frozen
class ClusterOptions:
    """Cluster-wide behaviour (the broker configs a test may want to change)."""

    cluster_id: str = "trio-kafka-mock"
    #: Kafka's `auto.create.topics.enable` (default true): Metadata for an unknown topic
    #: creates it when the client allows it, with `default_partitions` partitions.
    auto_create_topics: bool = True
    #: Kafka's `num.partitions` (default 1).
    default_partitions: int = 1
    #: 1: classic transactions; 2: KIP-890 transactions v2 (advertised as the
    #: `transaction.version` feature; EndTxn v5 then bumps the epoch and Produce adds
    #: partitions to the transaction implicitly).
    transaction_version: int = 1
    #: UNKNOWN_PRODUCER_ID for a non-zero first sequence of an unknown producer (Kafka
    #: before 2.5). False: accept it, as Kafka 2.5+ does.
    strict_unknown_producer: bool = True
    #: KIP-890 part 1: a transactional batch must be in a partition its transaction added
    #: (INVALID_TXN_STATE otherwise), as Kafka 3.6+ checks.
    verify_transactions: bool = True
    #: How long markers take to be written after EndTxn (0: at once). While they are
    #: pending the transaction is in PrepareCommit/PrepareAbort and the coordinator
    #: answers CONCURRENT_TRANSACTIONS, as Kafka's does while its markers are in flight.
    marker_delay_ms: int = 0
    #: Kafka's `log.message.timestamp.after.max.ms` and `...before.max.ms`: the
    #: defaults of the topic configs `message.timestamp.after.max.ms` (Kafka 4: an hour)
    #: and `message.timestamp.before.max.ms` (unlimited). The simulator's brokers run on
    #: a virtual clock (2023-11-14 plus the run's seconds) and take any future timestamp,
    #: so that code stamping records with the real time is not refused there alone.
    timestamp_after_max_ms: int = DEFAULT_TIMESTAMP_AFTER_MAX_MS
    timestamp_before_max_ms: int = DEFAULT_TIMESTAMP_BEFORE_MAX_MS


@attrs.define(eq=False)
class Topic:
    name: str
    topic_id: uuid.UUID
    config: TopicConfig
    partitions: list[Partition]


def topic_name_error(name: str) -> str | None:
    if not name or name in (".", ".."):
        return f"topic name {name!r} is illegal"
    if len(name) > MAX_TOPIC_NAME:
        return f"topic name is longer than {MAX_TOPIC_NAME} characters"
    if not set(name) <= _LEGAL_TOPIC_CHARS:
        return f"topic name {name!r} has characters outside [a-zA-Z0-9._-]"
    return None


def _uuid_counter() -> Callable[[], uuid.UUID]:
    counter = itertools.count(1)
    return lambda: uuid.UUID(int=next(counter))


def _wall_clock_unavailable() -> int:
    raise RuntimeError("ClusterState needs a clock: pass clock=")


@attrs.define(eq=False)
class ClusterState:
    """Everything the brokers of one cluster know. Owned by one trio run (or simulator)."""

    node_ids: list[int]
    options: ClusterOptions = attrs.field(factory=ClusterOptions)
    clock: Callable[[], int] = _wall_clock_unavailable
    new_uuid: Callable[[], uuid.UUID] = attrs.field(factory=_uuid_counter)
    txn: TransactionCoordinator = attrs.field(factory=TransactionCoordinator)
    groups: GroupCoordinator = attrs.field(
        factory=lambda: GroupCoordinator(next_member_suffix=itertools.count(1).__next__)
    )
    # node id -> (host, port) as advertised in Metadata; the shell fills it in once bound.
    endpoints: dict[int, tuple[str, int]] = attrs.field(factory=dict)
    topics: dict[str, Topic] = attrs.field(factory=dict)
    topic_ids: dict[uuid.UUID, str] = attrs.field(factory=dict)
    txn_coordinator: int = -1
    group_coordinator: int = -1
    # Called after every append or marker (a waiting Fetch may now have data).
    changed: Callable[[], None] = lambda: None
    # Marker jobs held back by `marker_delay_ms`: (due time, job), written by `tick`.
    pending_markers: list[tuple[int, MarkerJob]] = attrs.field(factory=list)
    _next_leader: int = 0

    def __attrs_post_init__(self) -> None:
        if not self.node_ids:
            raise ValueError("a cluster needs at least one node")
        if self.txn_coordinator < 0:
            self.txn_coordinator = self.node_ids[0]
        if self.group_coordinator < 0:
            self.group_coordinator = self.node_ids[0]

    # -- topics ----------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        num_partitions: int = -1,
        configs: dict[str, str | None] | None = None,
        *,
        validate_only: bool = False,
        replication_factor: int = -1,
    ) -> tuple[ErrorCode, str | None]:
        """Create (or with `validate_only` only check) a topic, checking what Kafka's
        controller checks, in its order: the name, that it is new, the partition count,
        the replication factor (-1: the default, 1; at most the brokers there are: every
        broker holds the one log here, but Kafka cannot place more replicas than
        brokers), the configs. Returns the error and its message (NONE, None)."""
        error = topic_name_error(name)
        if error is not None:
            return ErrorCode.INVALID_TOPIC_EXCEPTION, error
        if name in self.topics:
            return ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists"
        if num_partitions == -1:
            num_partitions = self.options.default_partitions
        if num_partitions <= 0:
            return (
                ErrorCode.INVALID_PARTITIONS,
                f"number of partitions must be positive, got {num_partitions}",
            )
        if replication_factor < -1 or replication_factor == 0:
            return (
                ErrorCode.INVALID_REPLICATION_FACTOR,
                "Replication factor must be larger than 0, or -1 to use the default value.",
            )
        if replication_factor > len(self.node_ids):
            return (
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the partition {replication_factor} time(s): The target "
                f"replication factor of {replication_factor} cannot be reached because only "
                f"{len(self.node_ids)} broker(s) are registered.",
            )
        try:
            config = TopicConfig.from_configs(
                configs or {},
                after_max_ms=self.options.timestamp_after_max_ms,
                before_max_ms=self.options.timestamp_before_max_ms,
            )
        except TopicConfigError as exc:
            return ErrorCode.INVALID_CONFIG, str(exc)
        if validate_only:
            return ErrorCode.NONE, None
        topic_id = self.new_uuid()
        partitions = []
        for index in range(num_partitions):
            leader = self.node_ids[self._next_leader % len(self.node_ids)]
            self._next_leader += 1
            producers = ProducerStateTable(
                strict_unknown_producer=self.options.strict_unknown_producer
            )
            partitions.append(Partition(name, index, leader, producers=producers))
        self.topics[name] = Topic(name, topic_id, config, partitions)
        self.topic_ids[topic_id] = name
        return ErrorCode.NONE, None

    def delete_topic(self, name: str) -> ErrorCode:
        topic = self.topics.pop(name, None)
        if topic is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        del self.topic_ids[topic.topic_id]
        return ErrorCode.NONE

    def partition(self, topic: str, index: int) -> Partition | None:
        t = self.topics.get(topic)
        if t is None or not 0 <= index < len(t.partitions):
            return None
        return t.partitions[index]

    # -- leadership ------------------------------------------------------------------

    def move_leader(self, topic: str, index: int, node_id: int) -> None:
        """Make `node_id` the leader of a partition (bumping its leader epoch)."""
        if node_id not in self.node_ids:
            raise ValueError(f"no node {node_id} in {self.node_ids}")
        part = self.partition(topic, index)
        if part is None:
            raise KeyError(f"no partition {topic}-{index}")
        part.leader = node_id
        part.leader_epoch += 1

    def move_transaction_coordinator(self, node_id: int) -> None:
        if node_id not in self.node_ids:
            raise ValueError(f"no node {node_id} in {self.node_ids}")
        self.txn_coordinator = node_id
        self.txn.coordinator_epoch += 1

    def move_group_coordinator(self, node_id: int) -> None:
        if node_id not in self.node_ids:
            raise ValueError(f"no node {node_id} in {self.node_ids}")
        self.group_coordinator = node_id

    # -- transactions ----------------------------------------------------------------

    def start_markers(self, job: MarkerJob) -> None:
        """Write a transaction's markers now, or after `marker_delay_ms`."""
        now = self.clock()
        if self.options.marker_delay_ms <= 0:
            self.write_markers(job, now)
        else:
            self.pending_markers.append((now + self.options.marker_delay_ms, job))

    def write_markers(self, job: MarkerJob, now_ms: int) -> None:
        """Carry out a marker job to the end and complete the transaction.

        Markers cannot fail here (no replication, no unavailable leader): a partition
        deleted since it was added is skipped, as Kafka drops markers for deleted topics.
        """
        for topic, index in job.partitions:
            part = self.partition(topic, index)
            if part is not None:
                part.write_marker(
                    job.producer_id,
                    job.producer_epoch,
                    commit=job.commit,
                    coordinator_epoch=job.coordinator_epoch,
                    now_ms=now_ms,
                )
        for group in job.groups:
            self.groups.end_transaction(group, job.producer_id, commit=job.commit)
        self.txn.complete(job.transactional_id, now_ms)
        self.changed()

    def tick(self) -> None:
        """Time-driven work: abort timed-out transactions, expire group members."""
        now = self.clock()
        if self.pending_markers:  # (every request ticks: skip the copies when idle)
            due = [job for when, job in self.pending_markers if when <= now]
            self.pending_markers = [(w, j) for w, j in self.pending_markers if w > now]
            for job in due:
                self.write_markers(job, now)
        if self.txn.txns:
            for job in self.txn.expire(now, transaction_version=self.options.transaction_version):
                self.start_markers(job)
        if self.groups.groups:
            self.groups.expire(now)

    def commit_offset(self, group: str, topic: str, index: int, offset: CommittedOffset) -> None:
        self.groups.commit(group, topic, index, offset)
