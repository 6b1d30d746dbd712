"""Fetch (API key 1), versions 0-17; flexible from v12.

v4 isolation level (KIP-98), v7 fetch sessions (KIP-227), v9 leader epoch (KIP-320), v11
rack (KIP-392), v12 flexible and diverging epochs (KIP-595), v13 topic ids (KIP-516), v15
replica state (KIP-903), v16 leader hints (KIP-951), v17 directory id (KIP-853).
"""

# `field()` builds a fresh attrs field per declaration, not a shared default value.
# ruff: noqa: RUF009

from __future__ import annotations

import uuid

import attrs

from .._codec import (
    INT8,
    INT16,
    INT32,
    INT32_MAX,
    INT64,
    RECORDS,
    STRING,
    UUID,
    Request,
    Response,
    Struct,
    array,
    field,
)


@attrs.frozen
class ReplicaState(Struct):
    replica_id: int = field(INT32, "15+", default=-1)
    replica_epoch: int = field(INT64, "15+", default=-1)


@attrs.frozen
class FetchPartition(Struct):
    partition: int = field(INT32)
    current_leader_epoch: int = field(INT32, "9+", default=-1)
    fetch_offset: int = field(INT64)
    last_fetched_epoch: int = field(INT32, "12+", default=-1)
    log_start_offset: int = field(INT64, "5+", default=-1)
    partition_max_bytes: int = field(INT32)
    replica_directory_id: uuid.UUID = field(UUID, "17+", tag=0)


@attrs.frozen
class FetchTopic(Struct):
    topic: str = field(STRING, "0-12")
    topic_id: uuid.UUID = field(UUID, "13+")
    partitions: list[FetchPartition] = field(array(FetchPartition))


@attrs.frozen
class ForgottenTopic(Struct):
    topic: str = field(STRING, "7-12")
    topic_id: uuid.UUID = field(UUID, "13+")
    partitions: list[int] = field(array(INT32), "7+")


@attrs.frozen
class FetchRequest(Request):
    API_KEY = 1
    MIN_VERSION = 0
    MAX_VERSION = 17
    FLEXIBLE_VERSION = 12

    cluster_id: str | None = field(STRING, "12+", nullable="12+", tag=0, default=None)
    replica_id: int = field(INT32, "0-14", default=-1)
    replica_state: ReplicaState = field(ReplicaState, "15+", tag=1)
    max_wait_ms: int = field(INT32)
    min_bytes: int = field(INT32)
    max_bytes: int = field(INT32, "3+", default=INT32_MAX)
    isolation_level: int = field(INT8, "4+")
    session_id: int = field(INT32, "7+")
    session_epoch: int = field(INT32, "7+", default=-1)
    topics: list[FetchTopic] = field(array(FetchTopic))
    forgotten_topics_data: list[ForgottenTopic] = field(array(ForgottenTopic), "7+")
    rack_id: str = field(STRING, "11+")


@attrs.frozen
class EpochEndOffset(Struct):
    epoch: int = field(INT32, "12+", default=-1)
    end_offset: int = field(INT64, "12+", default=-1)


@attrs.frozen
class LeaderIdAndEpoch(Struct):
    leader_id: int = field(INT32, "12+", default=-1)
    leader_epoch: int = field(INT32, "12+", default=-1)


@attrs.frozen
class SnapshotId(Struct):
    end_offset: int = field(INT64, default=-1)
    epoch: int = field(INT32, default=-1)


@attrs.frozen
class AbortedTransaction(Struct):
    producer_id: int = field(INT64, "4+")
    first_offset: int = field(INT64, "4+")


@attrs.frozen
class PartitionData(Struct):
    partition_index: int = field(INT32)
    error_code: int = field(INT16)
    high_watermark: int = field(INT64)
    last_stable_offset: int = field(INT64, "4+", default=-1)
    log_start_offset: int = field(INT64, "5+", default=-1)
    diverging_epoch: EpochEndOffset = field(EpochEndOffset, "12+", tag=0)
    current_leader: LeaderIdAndEpoch = field(LeaderIdAndEpoch, "12+", tag=1)
    snapshot_id: SnapshotId = field(SnapshotId, "12+", tag=2)
    aborted_transactions: list[AbortedTransaction] | None = field(
        array(AbortedTransaction), "4+", nullable="4+"
    )
    preferred_read_replica: int = field(INT32, "11+", default=-1)
    records: bytes | None = field(RECORDS, nullable="0+")


@attrs.frozen
class FetchableTopicResponse(Struct):
    topic: str = field(STRING, "0-12")
    topic_id: uuid.UUID = field(UUID, "13+")
    partitions: list[PartitionData] = field(array(PartitionData))


@attrs.frozen
class NodeEndpoint(Struct):
    node_id: int = field(INT32, "16+")
    host: str = field(STRING, "16+")
    port: int = field(INT32, "16+")
    rack: str | None = field(STRING, "16+", nullable="16+", default=None)


@attrs.frozen
class FetchResponse(Response):
    API_KEY = 1
    MIN_VERSION = 0
    MAX_VERSION = 17
    FLEXIBLE_VERSION = 12

    throttle_time_ms: int = field(INT32, "1+")
    error_code: int = field(INT16, "7+")
    session_id: int = field(INT32, "7+")
    responses: list[FetchableTopicResponse] = field(array(FetchableTopicResponse))
    node_endpoints: list[NodeEndpoint] = field(array(NodeEndpoint), "16+", tag=0)


FetchRequest.RESPONSE = FetchResponse
