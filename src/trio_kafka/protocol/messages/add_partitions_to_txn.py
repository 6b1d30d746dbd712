"""AddPartitionsToTxn (API key 24), versions 0-5; flexible from v3.

v2 PRODUCER_FENCED (KIP-588), v3 flexible, v4 broker-side batched verification (KIP-890;
clients use v3 and below), v5 TRANSACTION_ABORTABLE (KIP-890).
"""

# `field()` builds a fresh attrs field per declaration, not a shared default value.
# ruff: noqa: RUF009

from __future__ import annotations

import attrs

from .._codec import BOOL, INT16, INT32, INT64, STRING, Request, Response, Struct, array, field


@attrs.frozen
class AddPartitionsToTxnTopic(Struct):
    name: str = field(STRING)
    partitions: list[int] = field(array(INT32))


@attrs.frozen
class AddPartitionsToTxnTransaction(Struct):
    transactional_id: str = field(STRING, "4+")
    producer_id: int = field(INT64, "4+")
    producer_epoch: int = field(INT16, "4+")
    verify_only: bool = field(BOOL, "4+")
    topics: list[AddPartitionsToTxnTopic] = field(array(AddPartitionsToTxnTopic), "4+")


@attrs.frozen
class AddPartitionsToTxnRequest(Request):
    API_KEY = 24
    MIN_VERSION = 0
    MAX_VERSION = 5
    FLEXIBLE_VERSION = 3

    transactions: list[AddPartitionsToTxnTransaction] = field(
        array(AddPartitionsToTxnTransaction), "4+"
    )
    v3_and_below_transactional_id: str = field(STRING, "0-3")
    v3_and_below_producer_id: int = field(INT64, "0-3")
    v3_and_below_producer_epoch: int = field(INT16, "0-3")
    v3_and_below_topics: list[AddPartitionsToTxnTopic] = field(
        array(AddPartitionsToTxnTopic), "0-3"
    )


@attrs.frozen
class AddPartitionsToTxnPartitionResult(Struct):
    partition_index: int = field(INT32)
    partition_error_code: int = field(INT16)


@attrs.frozen
class AddPartitionsToTxnTopicResult(Struct):
    name: str = field(STRING)
    results_by_partition: list[AddPartitionsToTxnPartitionResult] = field(
        array(AddPartitionsToTxnPartitionResult)
    )


@attrs.frozen
class AddPartitionsToTxnResult(Struct):
    transactional_id: str = field(STRING, "4+")
    topic_results: list[AddPartitionsToTxnTopicResult] = field(
        array(AddPartitionsToTxnTopicResult), "4+"
    )


@attrs.frozen
class AddPartitionsToTxnResponse(Response):
    API_KEY = 24
    MIN_VERSION = 0
    MAX_VERSION = 5
    FLEXIBLE_VERSION = 3

    throttle_time_ms: int = field(INT32)
    error_code: int = field(INT16, "4+")
    results_by_transaction: list[AddPartitionsToTxnResult] = field(
        array(AddPartitionsToTxnResult), "4+"
    )
    results_by_topic_v3_and_below: list[AddPartitionsToTxnTopicResult] = field(
        array(AddPartitionsToTxnTopicResult), "0-3"
    )


AddPartitionsToTxnRequest.RESPONSE = AddPartitionsToTxnResponse
