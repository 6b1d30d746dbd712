"""Produce (API key 0), versions 0-11; flexible from v9.

v3 transactional id and record batch v2 (KIP-98), v7 zstd (KIP-110), v8 per-record errors
(KIP-467), v9 flexible, v10 leader hints in errors (KIP-951), v11 TRANSACTION_ABORTABLE
(KIP-890).
"""

# `field()` builds a fresh attrs field per declaration, not a shared default value.
# ruff: noqa: RUF009

from __future__ import annotations

import attrs

from .._schema import Request, Response, Struct, array, field
from .._types import INT16, INT32, INT64, RECORDS, STRING


@attrs.frozen
class PartitionProduceData(Struct):
    index: int = field(INT32)
    records: bytes | None = field(RECORDS, nullable="0+")


@attrs.frozen
class TopicProduceData(Struct):
    name: str = field(STRING)
    partition_data: list[PartitionProduceData] = field(array(PartitionProduceData))


@attrs.frozen
class ProduceRequest(Request):
    API_KEY = 0
    MIN_VERSION = 0
    # v12 is v11 on the wire; a transactional producer sending it uses transactions v2
    # (KIP-890): the Produce itself adds the partition to the transaction.
    MAX_VERSION = 12
    FLEXIBLE_VERSION = 9

    transactional_id: str | None = field(STRING, "3+", nullable="3+", default=None)
    acks: int = field(INT16)
    timeout_ms: int = field(INT32)
    topic_data: list[TopicProduceData] = field(array(TopicProduceData))


@attrs.frozen
class BatchIndexAndErrorMessage(Struct):
    batch_index: int = field(INT32, "8+")
    batch_index_error_message: str | None = field(STRING, "8+", nullable="8+", default=None)


@attrs.frozen
class LeaderIdAndEpoch(Struct):
    leader_id: int = field(INT32, "10+", default=-1)
    leader_epoch: int = field(INT32, "10+", default=-1)


@attrs.frozen
class PartitionProduceResponse(Struct):
    index: int = field(INT32)
    error_code: int = field(INT16)
    base_offset: int = field(INT64)
    log_append_time_ms: int = field(INT64, "2+", default=-1)
    log_start_offset: int = field(INT64, "5+", default=-1)
    record_errors: list[BatchIndexAndErrorMessage] = field(array(BatchIndexAndErrorMessage), "8+")
    error_message: str | None = field(STRING, "8+", nullable="8+", default=None)
    current_leader: LeaderIdAndEpoch = field(LeaderIdAndEpoch, "10+", tag=0)


@attrs.frozen
class TopicProduceResponse(Struct):
    name: str = field(STRING)
    partition_responses: list[PartitionProduceResponse] = field(array(PartitionProduceResponse))


@attrs.frozen
class NodeEndpoint(Struct):
    node_id: int = field(INT32, "10+")
    host: str = field(STRING, "10+")
    port: int = field(INT32, "10+")
    rack: str | None = field(STRING, "10+", nullable="10+", default=None)


@attrs.frozen
class ProduceResponse(Response):
    API_KEY = 0
    MIN_VERSION = 0
    MAX_VERSION = 12
    FLEXIBLE_VERSION = 9

    responses: list[TopicProduceResponse] = field(array(TopicProduceResponse))
    throttle_time_ms: int = field(INT32, "1+")
    node_endpoints: list[NodeEndpoint] = field(array(NodeEndpoint), "10+", tag=0)


ProduceRequest.RESPONSE = ProduceResponse
