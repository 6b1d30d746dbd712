"""OffsetFetch (API key 9), versions 0-9; flexible from v6.

v2 all topics and a top-level error, v5 leader epoch (KIP-320), v6 flexible, v7 require
stable (KIP-447), v8 batched groups (KIP-709), v9 member epochs (KIP-848).
"""

# `field()` builds a fresh attrs field per declaration, not a shared default value.
# ruff: noqa: RUF009

from __future__ import annotations

import attrs

from .._codec import BOOL, INT16, INT32, INT64, STRING, Request, Response, Struct, array, field


@attrs.frozen
class OffsetFetchRequestTopic(Struct):
    name: str = field(STRING, "0-7")
    partition_indexes: list[int] = field(array(INT32), "0-7")


@attrs.frozen
class OffsetFetchRequestTopics(Struct):
    name: str = field(STRING, "8+")
    partition_indexes: list[int] = field(array(INT32), "8+")


@attrs.frozen
class OffsetFetchRequestGroup(Struct):
    group_id: str = field(STRING, "8+")
    member_id: str | None = field(STRING, "9+", nullable="9+", default=None)
    member_epoch: int = field(INT32, "9+", default=-1)
    topics: list[OffsetFetchRequestTopics] | None = field(
        array(OffsetFetchRequestTopics), "8+", nullable="8+"
    )


@attrs.frozen
class OffsetFetchRequest(Request):
    API_KEY = 9
    MIN_VERSION = 0
    MAX_VERSION = 9
    FLEXIBLE_VERSION = 6

    group_id: str = field(STRING, "0-7")
    topics: list[OffsetFetchRequestTopic] | None = field(
        array(OffsetFetchRequestTopic), "0-7", nullable="2-7"
    )
    groups: list[OffsetFetchRequestGroup] = field(array(OffsetFetchRequestGroup), "8+")
    require_stable: bool = field(BOOL, "7+")


@attrs.frozen
class OffsetFetchResponsePartition(Struct):
    partition_index: int = field(INT32, "0-7")
    committed_offset: int = field(INT64, "0-7")
    committed_leader_epoch: int = field(INT32, "5-7", default=-1)
    metadata: str | None = field(STRING, "0-7", nullable="0-7")
    error_code: int = field(INT16, "0-7")


@attrs.frozen
class OffsetFetchResponseTopic(Struct):
    name: str = field(STRING, "0-7")
    partitions: list[OffsetFetchResponsePartition] = field(
        array(OffsetFetchResponsePartition), "0-7"
    )


@attrs.frozen
class OffsetFetchResponsePartitions(Struct):
    partition_index: int = field(INT32, "8+")
    committed_offset: int = field(INT64, "8+")
    committed_leader_epoch: int = field(INT32, "8+", default=-1)
    metadata: str | None = field(STRING, "8+", nullable="8+")
    error_code: int = field(INT16, "8+")


@attrs.frozen
class OffsetFetchResponseTopics(Struct):
    name: str = field(STRING, "8+")
    partitions: list[OffsetFetchResponsePartitions] = field(
        array(OffsetFetchResponsePartitions), "8+"
    )


@attrs.frozen
class OffsetFetchResponseGroup(Struct):
    group_id: str = field(STRING, "8+")
    topics: list[OffsetFetchResponseTopics] = field(array(OffsetFetchResponseTopics), "8+")
    error_code: int = field(INT16, "8+")


@attrs.frozen
class OffsetFetchResponse(Response):
    API_KEY = 9
    MIN_VERSION = 0
    MAX_VERSION = 9
    FLEXIBLE_VERSION = 6

    throttle_time_ms: int = field(INT32, "3+")
    topics: list[OffsetFetchResponseTopic] = field(array(OffsetFetchResponseTopic), "0-7")
    error_code: int = field(INT16, "2-7")
    groups: list[OffsetFetchResponseGroup] = field(array(OffsetFetchResponseGroup), "8+")


OffsetFetchRequest.RESPONSE = OffsetFetchResponse
