"""DescribeProducers (API key 61), version 0; flexible from v0.

v0 only (KIP-664): the producer states a partition leader holds.
"""

# `field()` builds a fresh attrs field per declaration, not a shared default value.
# ruff: noqa: RUF009

from __future__ import annotations

import attrs

from .._codec import INT16, INT32, INT64, STRING, Request, Response, Struct, array, field


@attrs.frozen
class TopicRequest(Struct):
    name: str = field(STRING)
    partition_indexes: list[int] = field(array(INT32))


@attrs.frozen
class DescribeProducersRequest(Request):
    API_KEY = 61
    MIN_VERSION = 0
    MAX_VERSION = 0
    FLEXIBLE_VERSION = 0

    topics: list[TopicRequest] = field(array(TopicRequest))


@attrs.frozen
class ProducerState(Struct):
    producer_id: int = field(INT64)
    producer_epoch: int = field(INT32)
    last_sequence: int = field(INT32, default=-1)
    last_timestamp: int = field(INT64, default=-1)
    coordinator_epoch: int = field(INT32)
    current_txn_start_offset: int = field(INT64, default=-1)


@attrs.frozen
class PartitionResponse(Struct):
    partition_index: int = field(INT32)
    error_code: int = field(INT16)
    error_message: str | None = field(STRING, nullable="0+", default=None)
    active_producers: list[ProducerState] = field(array(ProducerState))


@attrs.frozen
class TopicResponse(Struct):
    name: str = field(STRING)
    partitions: list[PartitionResponse] = field(array(PartitionResponse))


@attrs.frozen
class DescribeProducersResponse(Response):
    API_KEY = 61
    MIN_VERSION = 0
    MAX_VERSION = 0
    FLEXIBLE_VERSION = 0

    throttle_time_ms: int = field(INT32)
    topics: list[TopicResponse] = field(array(TopicResponse))


DescribeProducersRequest.RESPONSE = DescribeProducersResponse
