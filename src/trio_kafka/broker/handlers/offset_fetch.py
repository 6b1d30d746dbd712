"""OffsetFetch (API key 9), v0-9: one group (v0-7) or several (v8+).

Offsets committed by a transaction are visible once its COMMIT marker is written; before
that a request with `RequireStable` (v7+) gets UNSTABLE_OFFSET_COMMIT for the partitions
that have a pending transactional offset, as Kafka answers (the client retries).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from trio_kafka.broker._context import RequestContext
from trio_kafka.broker.handlers._txn_common import not_group_coordinator
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol.messages.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
)

REQUEST = OffsetFetchRequest

T = TypeVar("T")

Row = tuple[
    int, int, int, str | None, ErrorCode
]  # partition, offset, leader epoch, metadata, error


def _group(
    ctx: RequestContext, group_id: str, topics: list[tuple[str, list[int]]] | None, stable: bool
) -> dict[str, list[Row]]:
    groups = ctx.state.groups
    if topics is None:
        wanted: dict[str, list[int]] = {}
        for topic, index in groups.committed_partitions(group_id):
            wanted.setdefault(topic, []).append(index)
        topics = list(wanted.items())
    out: dict[str, list[Row]] = {}
    for topic, indexes in topics:
        rows = out.setdefault(topic, [])
        for index in indexes:
            error, committed = groups.fetch(group_id, topic, index, require_stable=stable)
            if committed is None:
                rows.append((index, -1, -1, "", error))
            else:
                rows.append(
                    (index, committed.offset, committed.leader_epoch, committed.metadata, error)
                )
    return out


def _topics(
    rows: dict[str, list[Row]], topic_class: Callable[..., T], partition_class: Callable[..., Any]
) -> list[T]:
    """The response topics for `rows`, in the classes of the version (v0-7 and v8+ have
    their own, with the same fields)."""
    return [
        topic_class(
            name=topic,
            partitions=[
                partition_class(
                    partition_index=i,
                    committed_offset=o,
                    committed_leader_epoch=e,
                    metadata=m,
                    error_code=c,
                )
                for i, o, e, m, c in parts
            ],
        )
        for topic, parts in rows.items()
    ]


def handle(ctx: RequestContext, req: OffsetFetchRequest) -> OffsetFetchResponse:
    if not_group_coordinator(ctx):
        top_error = ErrorCode.NOT_COORDINATOR
    else:
        top_error = ErrorCode.NONE
    stable = ctx.version >= 7 and req.require_stable
    if ctx.version <= 7:
        wanted = (
            None
            if req.topics is None
            else [(t.name, list(t.partition_indexes)) for t in req.topics]
        )
        rows = {} if top_error else _group(ctx, req.group_id, wanted, stable)
        return OffsetFetchResponse(
            error_code=top_error,
            topics=_topics(rows, OffsetFetchResponseTopic, OffsetFetchResponsePartition),
        )
    groups = []
    for g in req.groups:
        wanted = (
            None if g.topics is None else [(t.name, list(t.partition_indexes)) for t in g.topics]
        )
        rows = {} if top_error else _group(ctx, g.group_id, wanted, stable)
        groups.append(
            OffsetFetchResponseGroup(
                group_id=g.group_id,
                error_code=top_error,
                topics=_topics(rows, OffsetFetchResponseTopics, OffsetFetchResponsePartitions),
            )
        )
    return OffsetFetchResponse(groups=groups)
