"""TxnOffsetCommit (API key 28), versions 0-4; flexible from v3.

v2 committed leader epoch (KIP-320), v3 flexible with group membership for fencing
(KIP-447), v4 TRANSACTION_ABORTABLE (KIP-890).
"""

# `field()` builds a fresh attrs field per declaration, not a shared default value.
# ruff: noqa: RUF009

from __future__ import annotations

import attrs

from .._codec import INT16, INT32, INT64, STRING, Request, Response, Struct, array, field


@attrs.frozen
class TxnOffsetCommitRequestPartition(Struct):
    partition_index: int = field(INT32)
    committed_offset: int = field(INT64)
    committed_leader_epoch: int = field(INT32, "2+", default=-1)
    committed_metadata: str | None = field(STRING, nullable="0+")


@attrs.frozen
class TxnOffsetCommitRequestTopic(Struct):
    name: str = field(STRING)
    partitions: list[TxnOffsetCommitRequestPartition] = field(
        array(TxnOffsetCommitRequestPartition)
    )


@attrs.frozen
class TxnOffsetCommitRequest(Request):
    API_KEY = 28
    MIN_VERSION = 0
    MAX_VERSION = 4
    FLEXIBLE_VERSION = 3

    transactional_id: str = field(STRING)
    group_id: str = field(STRING)
    producer_id: int = field(INT64)
    producer_epoch: int = field(INT16)
    generation_id: int = field(INT32, "3+", default=-1)
    member_id: str = field(STRING, "3+")
    group_instance_id: str | None = field(STRING, "3+", nullable="3+", default=None)
    topics: list[TxnOffsetCommitRequestTopic] = field(array(TxnOffsetCommitRequestTopic))


@attrs.frozen
class TxnOffsetCommitResponsePartition(Struct):
    partition_index: int = field(INT32)
    error_code: int = field(INT16)


@attrs.frozen
class TxnOffsetCommitResponseTopic(Struct):
    name: str = field(STRING)
    partitions: list[TxnOffsetCommitResponsePartition] = field(
        array(TxnOffsetCommitResponsePartition)
    )


@attrs.frozen
class TxnOffsetCommitResponse(Response):
    API_KEY = 28
    MIN_VERSION = 0
    MAX_VERSION = 4
    FLEXIBLE_VERSION = 3

    throttle_time_ms: int = field(INT32)
    topics: list[TxnOffsetCommitResponseTopic] = field(array(TxnOffsetCommitResponseTopic))


TxnOffsetCommitRequest.RESPONSE = TxnOffsetCommitResponse
