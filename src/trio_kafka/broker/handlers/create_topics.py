"""CreateTopics (API key 19), v0-7.

Creates topics with their partition count (-1: the cluster default) and configs
(`expected.offset.check.enable`, `max.message.bytes`, `message.timestamp.type`, and the
other Kafka topic configs stored without effect). The replication factor is checked as
Kafka checks it (positive or -1, at most the number of brokers), though there is no
replication to honour. Manual replica assignments choose the leader (the first broker id
listed). `validate_only` checks only.
"""

from __future__ import annotations

import collections

import attrs

from trio_kafka.broker._context import RequestContext
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol.messages.create_topics import (
    CreatableTopicConfigs,
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
)

REQUEST = CreateTopicsRequest


def handle(ctx: RequestContext, req: CreateTopicsRequest) -> CreateTopicsResponse:
    state = ctx.state
    results = []
    # A name given twice is refused, once, after the others' results, and neither entry
    # is created (Kafka's controller: "Duplicate topic name.").
    counts = collections.Counter(topic.name for topic in req.topics)
    twice = [name for name, count in counts.items() if count > 1]
    for topic in req.topics:
        if counts[topic.name] > 1:
            continue
        num = len(topic.assignments) if topic.assignments else topic.num_partitions
        if num == -1:
            num = state.options.default_partitions
        error, message = state.create_topic(
            topic.name,
            num,
            {c.name: c.value for c in topic.configs},
            validate_only=req.validate_only,
            replication_factor=topic.replication_factor,
        )
        if error is not ErrorCode.NONE:
            results.append(
                CreatableTopicResult(name=topic.name, error_code=error, error_message=message)
            )
            continue
        # Kafka answers what the topic is (or, validating only, would be).
        result = CreatableTopicResult(
            name=topic.name,
            error_code=error,
            error_message=None,
            num_partitions=num,
            replication_factor=max(topic.replication_factor, 1),
        )
        created = None if req.validate_only else state.topics[topic.name]
        if created is not None:
            for assignment in topic.assignments:
                if assignment.broker_ids and assignment.broker_ids[0] in state.node_ids:
                    created.partitions[assignment.partition_index].leader = assignment.broker_ids[0]
            result = attrs.evolve(
                result,
                topic_id=created.topic_id,
                configs=[
                    CreatableTopicConfigs(name=name, value=value, config_source=5 if default else 1)
                    for name, (value, default) in sorted(created.config.describe().items())
                ],
            )
        results.append(result)
    results.extend(
        CreatableTopicResult(
            name=name, error_code=ErrorCode.INVALID_REQUEST, error_message="Duplicate topic name."
        )
        for name in twice
    )
    return CreateTopicsResponse(topics=results)
