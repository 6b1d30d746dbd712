"""OffsetForLeaderEpoch (API key 23), versions 0-4; flexible from v4.

v2 current leader epoch (KIP-320), v3 replica id, v4 flexible. A consumer uses it to
validate its position after a leader change (KIP-320).
"""

# `field()` builds a fresh attrs field per declaration, not a shared default value.
# ruff: noqa: RUF009

from __future__ import annotations

import attrs

from .._codec import INT16, INT32, INT64, STRING, Request, Response, Struct, array, field


@attrs.frozen
class OffsetForLeaderPartition(Struct):
    partition: int = field(INT32)
    current_leader_epoch: int = field(INT32, "2+", default=-1)
    leader_epoch: int = field(INT32)


@attrs.frozen
class OffsetForLeaderTopic(Struct):
    topic: str = field(STRING)
    partitions: list[OffsetForLeaderPartition] = field(array(OffsetForLeaderPartition))


@attrs.frozen
class OffsetForLeaderEpochRequest(Request):
    API_KEY = 23
    MIN_VERSION = 0
    MAX_VERSION = 4
    FLEXIBLE_VERSION = 4

    replica_id: int = field(INT32, "3+", default=-2)
    topics: list[OffsetForLeaderTopic] = field(array(OffsetForLeaderTopic))


@attrs.frozen
class EpochEndOffset(Struct):
    error_code: int = field(INT16)
    partition: int = field(INT32)
    leader_epoch: int = field(INT32, "1+", default=-1)
    end_offset: int = field(INT64, default=-1)


@attrs.frozen
class OffsetForLeaderTopicResult(Struct):
    topic: str = field(STRING)
    partitions: list[EpochEndOffset] = field(array(EpochEndOffset))


@attrs.frozen
class OffsetForLeaderEpochResponse(Response):
    API_KEY = 23
    MIN_VERSION = 0
    MAX_VERSION = 4
    FLEXIBLE_VERSION = 4

    throttle_time_ms: int = field(INT32, "2+")
    topics: list[OffsetForLeaderTopicResult] = field(array(OffsetForLeaderTopicResult))


OffsetForLeaderEpochRequest.RESPONSE = OffsetForLeaderEpochResponse
