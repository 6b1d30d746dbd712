"""TxnOffsetCommit (API key 28), v0-4: offsets that become committed with the
transaction's COMMIT marker (and vanish with an ABORT)."""

from __future__ import annotations

from trio_kafka.broker._context import RequestContext
from trio_kafka.broker.handlers._commit_common import commit_partitions
from trio_kafka.broker.handlers._txn_common import not_group_coordinator
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)

REQUEST = TxnOffsetCommitRequest


def handle(ctx: RequestContext, req: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    state = ctx.state
    if not_group_coordinator(ctx):
        error = ErrorCode.NOT_COORDINATOR
    else:
        error = state.txn.check_offset_commit(
            req.transactional_id, req.producer_id, req.producer_epoch, req.group_id
        )
        if error is ErrorCode.PRODUCER_FENCED:
            error = ErrorCode.INVALID_PRODUCER_EPOCH
    topics = commit_partitions(
        ctx,
        req.topics,
        error,
        lambda topic, index, offset: state.groups.commit_pending(
            req.group_id, req.producer_id, topic, index, offset
        ),
        TxnOffsetCommitResponseTopic,
        TxnOffsetCommitResponsePartition,
    )
    return TxnOffsetCommitResponse(topics=topics)
