"""Metadata (API key 3), v0-12.

Lists every node with its advertised endpoint and, for the topics asked (all of them for
a null list, or an empty one before v1), each partition's leader. Replicas and ISR are
the leader alone: the mock does not replicate. An unknown topic is created on the spot
when the cluster allows it (`ClusterOptions.auto_create_topics`, Kafka's default) and the
request does too (`AllowAutoTopicCreation`, v4+); otherwise UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import uuid

from trio_kafka.broker._context import RequestContext
from trio_kafka.broker._state import Topic, topic_name_error
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol.messages.metadata import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)

REQUEST = MetadataRequest


def brokers(ctx: RequestContext) -> list[MetadataResponseBroker]:
    return [
        MetadataResponseBroker(node_id=node, host=host, port=port)
        for node, (host, port) in sorted(ctx.state.endpoints.items())
    ]


def describe_topic(topic: Topic) -> MetadataResponseTopic:
    return MetadataResponseTopic(
        error_code=ErrorCode.NONE,
        name=topic.name,
        topic_id=topic.topic_id,
        partitions=[
            MetadataResponsePartition(
                error_code=ErrorCode.NONE,
                partition_index=p.index,
                leader_id=p.leader,
                leader_epoch=p.leader_epoch,
                replica_nodes=[p.leader],
                isr_nodes=[p.leader],
            )
            for p in topic.partitions
        ],
    )


def handle(ctx: RequestContext, req: MetadataRequest) -> MetadataResponse:
    state = ctx.state
    wanted: list[tuple[str | None, uuid.UUID | None]]
    if req.topics is None or (ctx.version == 0 and not req.topics):
        wanted = [(name, None) for name in sorted(state.topics)]
    else:
        wanted = [(t.name, t.topic_id) for t in req.topics]
    allow_create = state.options.auto_create_topics and (
        ctx.version < 4 or req.allow_auto_topic_creation
    )
    topics = []
    for name, topic_id in wanted:
        if name is None and topic_id is not None:
            name = state.topic_ids.get(topic_id)
            if name is None:
                topics.append(
                    MetadataResponseTopic(
                        error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=topic_id
                    )
                )
                continue
        assert name is not None
        topic = state.topics.get(name)
        if topic is None:
            if topic_name_error(name) is not None:
                topics.append(
                    MetadataResponseTopic(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, name=name)
                )
                continue
            if allow_create:
                state.create_topic(name)
                topic = state.topics[name]
            else:
                topics.append(
                    MetadataResponseTopic(
                        error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        name=name,
                        topic_id=uuid.UUID(int=0),
                    )
                )
                continue
        topics.append(describe_topic(topic))
    return MetadataResponse(
        brokers=brokers(ctx),
        cluster_id=state.options.cluster_id,
        controller_id=state.node_ids[0],
        topics=topics,
    )
