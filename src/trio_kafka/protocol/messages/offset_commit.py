"""OffsetCommit (API key 8), versions 0-9; flexible from v8.

v2-v4 retention time, v5 drops it, v6 leader epoch (KIP-320), v7 static membership
(KIP-345), v8 flexible, v9 member epochs of the new group protocol (KIP-848).
"""

# `field()` builds a fresh attrs field per declaration, not a shared default value.
# ruff: noqa: RUF009

from __future__ import annotations

import attrs

from .._codec import INT16, INT32, INT64, STRING, Request, Response, Struct, array, field


@attrs.frozen
class OffsetCommitRequestPartition(Struct):
    partition_index: int = field(INT32)
    committed_offset: int = field(INT64)
    committed_leader_epoch: int = field(INT32, "6+", default=-1)
    commit_timestamp: int = field(INT64, "1", default=-1)
    committed_metadata: str | None = field(STRING, nullable="0+")


@attrs.frozen
class OffsetCommitRequestTopic(Struct):
    name: str = field(STRING)
    partitions: list[OffsetCommitRequestPartition] = field(array(OffsetCommitRequestPartition))


@attrs.frozen
class OffsetCommitRequest(Request):
    API_KEY = 8
    MIN_VERSION = 0
    MAX_VERSION = 9
    FLEXIBLE_VERSION = 8

    group_id: str = field(STRING)
    generation_id_or_member_epoch: int = field(INT32, "1+", default=-1)
    member_id: str = field(STRING, "1+")
    group_instance_id: str | None = field(STRING, "7+", nullable="7+", default=None)
    retention_time_ms: int = field(INT64, "2-4", default=-1)
    topics: list[OffsetCommitRequestTopic] = field(array(OffsetCommitRequestTopic))


@attrs.frozen
class OffsetCommitResponsePartition(Struct):
    partition_index: int = field(INT32)
    error_code: int = field(INT16)


@attrs.frozen
class OffsetCommitResponseTopic(Struct):
    name: str = field(STRING)
    partitions: list[OffsetCommitResponsePartition] = field(array(OffsetCommitResponsePartition))


@attrs.frozen
class OffsetCommitResponse(Response):
    API_KEY = 8
    MIN_VERSION = 0
    MAX_VERSION = 9
    FLEXIBLE_VERSION = 8

    throttle_time_ms: int = field(INT32, "3+")
    topics: list[OffsetCommitResponseTopic] = field(array(OffsetCommitResponseTopic))


OffsetCommitRequest.RESPONSE = OffsetCommitResponse
