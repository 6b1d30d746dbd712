"""AddPartitionsToTxn (API key 24), v0-5.

v0-3 is the client's form (one transaction); v4+ is the broker's batched form, with
`VerifyOnly` (KIP-890 part 1) answering whether the partitions are already in the
transaction without adding them. An unknown partition fails with
UNKNOWN_TOPIC_OR_PARTITION and the others of the request with OPERATION_NOT_ATTEMPTED,
as Kafka answers. PRODUCER_FENCED exists from v2.
"""

from __future__ import annotations

from trio_kafka.broker._context import RequestContext
from trio_kafka.broker.handlers._txn_common import fenced_for_version, not_txn_coordinator
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTopicResult,
)

REQUEST = AddPartitionsToTxnRequest


def _results(
    partitions: list[tuple[str, int]], codes: dict[tuple[str, int], ErrorCode]
) -> list[AddPartitionsToTxnTopicResult]:
    by_topic: dict[str, list[AddPartitionsToTxnPartitionResult]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(
            AddPartitionsToTxnPartitionResult(
                partition_index=index, partition_error_code=codes[topic, index]
            )
        )
    return [
        AddPartitionsToTxnTopicResult(name=t, results_by_partition=r) for t, r in by_topic.items()
    ]


def _one(
    ctx: RequestContext,
    txn_id: str,
    pid: int,
    epoch: int,
    topics: list[AddPartitionsToTxnTopic],
    verify_only: bool,
) -> list[AddPartitionsToTxnTopicResult]:
    state = ctx.state
    partitions = [(t.name, p) for t in topics for p in t.partitions]
    unknown = {tp for tp in partitions if state.partition(*tp) is None}
    codes: dict[tuple[str, int], ErrorCode]
    if not_txn_coordinator(ctx):
        codes = dict.fromkeys(partitions, ErrorCode.NOT_COORDINATOR)
    elif unknown:
        codes = {
            tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if tp in unknown
            else ErrorCode.OPERATION_NOT_ATTEMPTED
            for tp in partitions
        }
    elif verify_only:
        codes = {tp: state.txn.verify_partition(txn_id, pid, epoch, tp) for tp in partitions}
    else:
        error = state.txn.add_partitions(txn_id, pid, epoch, partitions, ctx.now_ms())
        codes = dict.fromkeys(partitions, fenced_for_version(error, ctx.version, 2))
    return _results(partitions, codes)


def handle(ctx: RequestContext, req: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse:
    if ctx.version <= 3:
        results = _one(
            ctx,
            req.v3_and_below_transactional_id,
            req.v3_and_below_producer_id,
            req.v3_and_below_producer_epoch,
            req.v3_and_below_topics,
            False,
        )
        return AddPartitionsToTxnResponse(results_by_topic_v3_and_below=results)
    return AddPartitionsToTxnResponse(
        error_code=ErrorCode.NONE,
        results_by_transaction=[
            AddPartitionsToTxnResult(
                transactional_id=t.transactional_id,
                topic_results=_one(
                    ctx,
                    t.transactional_id,
                    t.producer_id,
                    t.producer_epoch,
                    t.topics,
                    t.verify_only,
                ),
            )
            for t in req.transactions
        ],
    )
