"""OffsetCommit (API key 8), v0-9: a group member's (or a simple consumer's) offsets."""

from __future__ import annotations

from trio_kafka.broker._context import RequestContext
from trio_kafka.broker.handlers._commit_common import commit_partitions
from trio_kafka.broker.handlers._txn_common import not_group_coordinator
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)

REQUEST = OffsetCommitRequest


def handle(ctx: RequestContext, req: OffsetCommitRequest) -> OffsetCommitResponse:
    state = ctx.state
    if not_group_coordinator(ctx):
        error = ErrorCode.NOT_COORDINATOR
    elif not req.group_id:
        error = ErrorCode.INVALID_GROUP_ID
    else:
        error = state.groups.validate_commit(
            req.group_id, req.member_id, req.generation_id_or_member_epoch
        )
    topics = commit_partitions(
        ctx,
        req.topics,
        error,
        lambda topic, index, offset: state.commit_offset(req.group_id, topic, index, offset),
        OffsetCommitResponseTopic,
        OffsetCommitResponsePartition,
    )
    return OffsetCommitResponse(topics=topics)
