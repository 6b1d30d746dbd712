"""What OffsetCommit and TxnOffsetCommit share: the per-partition walk.

Both answer every partition of the request with the request-level error if there is one,
UNKNOWN_TOPIC_OR_PARTITION for a partition the cluster does not have, and otherwise store
the offset; they differ only in where the offset goes (committed now, or pending until the
transaction's marker) and in their response classes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from trio_kafka.broker._context import RequestContext
from trio_kafka.broker._groups import CommittedOffset
from trio_kafka.errors import ErrorCode

P = TypeVar("P")
T = TypeVar("T")


class CommitPartition(Protocol):
    @property
    def partition_index(self) -> int: ...
    @property
    def committed_offset(self) -> int: ...
    @property
    def committed_leader_epoch(self) -> int: ...
    @property
    def committed_metadata(self) -> str | None: ...


class CommitTopic(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def partitions(self) -> Sequence[CommitPartition]: ...


def commit_partitions(
    ctx: RequestContext,
    topics: Sequence[CommitTopic],
    error: ErrorCode,
    store: Callable[[str, int, CommittedOffset], None],
    response_topic: Callable[..., T],
    response_partition: Callable[..., P],
) -> list[T]:
    """Check and `store(topic, partition, offset)` each partition; the response topics.

    `response_topic(name=, partitions=)` and `response_partition(partition_index=,
    error_code=)` are the API's own response classes.
    """
    now = ctx.now_ms()
    out: list[T] = []
    for topic in topics:
        parts: list[Any] = []
        for p in topic.partitions:
            code = error
            if code is ErrorCode.NONE:
                if ctx.state.partition(topic.name, p.partition_index) is None:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    store(
                        topic.name,
                        p.partition_index,
                        CommittedOffset(
                            p.committed_offset, p.committed_metadata, p.committed_leader_epoch, now
                        ),
                    )
            parts.append(response_partition(partition_index=p.partition_index, error_code=code))
        out.append(response_topic(name=topic.name, partitions=parts))
    return out


__all__ = ["CommitPartition", "CommitTopic", "commit_partitions"]
