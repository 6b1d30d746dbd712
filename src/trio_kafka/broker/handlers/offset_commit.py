"""OffsetCommit (API key 8), v0-9: a group member's (or a simple consumer's) offsets."""

from __future__ import annotations

from trio_kafka.broker._context import RequestContext
from trio_kafka.broker._groups import CommittedOffset
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
    now = ctx.now_ms()
    topics = []
    for topic in req.topics:
        parts = []
        for p in topic.partitions:
            code = error
            if code is ErrorCode.NONE:
                if state.partition(topic.name, p.partition_index) is None:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    state.commit_offset(
                        req.group_id,
                        topic.name,
                        p.partition_index,
                        CommittedOffset(
                            p.committed_offset, p.committed_metadata, p.committed_leader_epoch, now
                        ),
                    )
            parts.append(
                OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
            )
        topics.append(OffsetCommitResponseTopic(name=topic.name, partitions=parts))
    return OffsetCommitResponse(topics=topics)
