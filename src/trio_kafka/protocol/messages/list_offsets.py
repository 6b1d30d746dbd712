"""ListOffsets (API key 2), versions 0-10; flexible from v6.

v1 one offset per partition, v2 isolation level (KIP-98), v4 leader epoch (KIP-320), v6
flexible, v7 max timestamp (KIP-734), v8-v9 tiered offsets (KIP-405, KIP-1005), v10
KIP-1075.
"""

# `field()` builds a fresh attrs field per declaration, not a shared default value.
# ruff: noqa: RUF009

from __future__ import annotations

import attrs

from .._codec import INT8, INT16, INT32, INT64, STRING, Request, Response, Struct, array, field


@attrs.frozen
class ListOffsetsPartition(Struct):
    partition_index: int = field(INT32)
    current_leader_epoch: int = field(INT32, "4+", default=-1)
    timestamp: int = field(INT64)
    max_num_offsets: int = field(INT32, "0", default=1)


@attrs.frozen
class ListOffsetsTopic(Struct):
    name: str = field(STRING)
    partitions: list[ListOffsetsPartition] = field(array(ListOffsetsPartition))


@attrs.frozen
class ListOffsetsRequest(Request):
    API_KEY = 2
    MIN_VERSION = 0
    MAX_VERSION = 10
    FLEXIBLE_VERSION = 6

    replica_id: int = field(INT32)
    isolation_level: int = field(INT8, "2+")
    topics: list[ListOffsetsTopic] = field(array(ListOffsetsTopic))
    timeout_ms: int = field(INT32, "10+")


@attrs.frozen
class ListOffsetsPartitionResponse(Struct):
    partition_index: int = field(INT32)
    error_code: int = field(INT16)
    old_style_offsets: list[int] = field(array(INT64), "0")
    timestamp: int = field(INT64, "1+", default=-1)
    offset: int = field(INT64, "1+", default=-1)
    leader_epoch: int = field(INT32, "4+", default=-1)


@attrs.frozen
class ListOffsetsTopicResponse(Struct):
    name: str = field(STRING)
    partitions: list[ListOffsetsPartitionResponse] = field(array(ListOffsetsPartitionResponse))


@attrs.frozen
class ListOffsetsResponse(Response):
    API_KEY = 2
    MIN_VERSION = 0
    MAX_VERSION = 10
    FLEXIBLE_VERSION = 6

    throttle_time_ms: int = field(INT32, "2+")
    topics: list[ListOffsetsTopicResponse] = field(array(ListOffsetsTopicResponse))


ListOffsetsRequest.RESPONSE = ListOffsetsResponse
