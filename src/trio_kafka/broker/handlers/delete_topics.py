"""DeleteTopics (API key 20), v0-6 (by name, or by topic id from v6)."""

from __future__ import annotations

import uuid

from trio_kafka.broker._context import RequestContext
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol.messages.delete_topics import (
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)

REQUEST = DeleteTopicsRequest


def handle(ctx: RequestContext, req: DeleteTopicsRequest) -> DeleteTopicsResponse:
    state = ctx.state
    wanted: list[tuple[str | None, uuid.UUID]] = [
        (name, uuid.UUID(int=0)) for name in req.topic_names
    ]
    wanted += [(t.name, t.topic_id) for t in req.topics]
    results = []
    for name, topic_id in wanted:
        if name is None:
            name = state.topic_ids.get(topic_id)
            if name is None:
                results.append(
                    DeletableTopicResult(
                        name=None, topic_id=topic_id, error_code=ErrorCode.UNKNOWN_TOPIC_ID
                    )
                )
                continue
        topic = state.topics.get(name)
        tid = topic.topic_id if topic is not None else topic_id
        results.append(
            DeletableTopicResult(name=name, topic_id=tid, error_code=state.delete_topic(name))
        )
    return DeleteTopicsResponse(responses=results)
