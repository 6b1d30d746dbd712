"""WriteTxnMarkers (API key 27), versions 0-1; flexible from v1.

v0 (KIP-98), v1 flexible. Sent by transaction coordinators to partition leaders.
"""

# `field()` builds a fresh attrs field per declaration, not a shared default value.
# ruff: noqa: RUF009

from __future__ import annotations

import attrs

from .._codec import BOOL, INT16, INT32, INT64, STRING, Request, Response, Struct, array, field


@attrs.frozen
class WritableTxnMarkerTopic(Struct):
    name: str = field(STRING)
    partition_indexes: list[int] = field(array(INT32))


@attrs.frozen
class WritableTxnMarker(Struct):
    producer_id: int = field(INT64)
    producer_epoch: int = field(INT16)
    transaction_result: bool = field(BOOL)
    topics: list[WritableTxnMarkerTopic] = field(array(WritableTxnMarkerTopic))
    coordinator_epoch: int = field(INT32)


@attrs.frozen
class WriteTxnMarkersRequest(Request):
    API_KEY = 27
    MIN_VERSION = 0
    MAX_VERSION = 1
    FLEXIBLE_VERSION = 1

    markers: list[WritableTxnMarker] = field(array(WritableTxnMarker))


@attrs.frozen
class WritableTxnMarkerPartitionResult(Struct):
    partition_index: int = field(INT32)
    error_code: int = field(INT16)


@attrs.frozen
class WritableTxnMarkerTopicResult(Struct):
    name: str = field(STRING)
    partitions: list[WritableTxnMarkerPartitionResult] = field(
        array(WritableTxnMarkerPartitionResult)
    )


@attrs.frozen
class WritableTxnMarkerResult(Struct):
    producer_id: int = field(INT64)
    topics: list[WritableTxnMarkerTopicResult] = field(array(WritableTxnMarkerTopicResult))


@attrs.frozen
class WriteTxnMarkersResponse(Response):
    API_KEY = 27
    MIN_VERSION = 0
    MAX_VERSION = 1
    FLEXIBLE_VERSION = 1

    markers: list[WritableTxnMarkerResult] = field(array(WritableTxnMarkerResult))


WriteTxnMarkersRequest.RESPONSE = WriteTxnMarkersResponse
