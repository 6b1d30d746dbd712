"""ListOffsets (API key 2), v0-10.

Timestamps: -1 latest (the high watermark, or the last stable offset for read_committed),
-2 earliest (the log start offset), -3 the offset of the largest timestamp (KIP-734),
-4 the local log start (the same here), -5 the last tiered offset (-1: nothing is
tiered); any other value, the first batch with a timestamp at or after it. -3, -4 and
-5 need versions 7, 8 and 9 (an older request gets UNSUPPORTED_VERSION for it).
"""

from __future__ import annotations

from trio_kafka.broker._context import RequestContext
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol.messages.list_offsets import (
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)

REQUEST = ListOffsetsRequest

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
#: The first ListOffsets version that takes each special timestamp; an older request
#: asking for it is answered UNSUPPORTED_VERSION, as Kafka does.
_SINCE = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9}


def handle(ctx: RequestContext, req: ListOffsetsRequest) -> ListOffsetsResponse:
    state = ctx.state
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            part = state.partition(t.name, p.partition_index)
            if part is None:
                parts.append(
                    ListOffsetsPartitionResponse(
                        partition_index=p.partition_index,
                        error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    )
                )
                continue
            if part.leader != ctx.node_id:
                parts.append(
                    ListOffsetsPartitionResponse(
                        partition_index=p.partition_index,
                        error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    )
                )
                continue
            epoch_error = part.epoch_error(p.current_leader_epoch)
            if epoch_error is not None:
                parts.append(
                    ListOffsetsPartitionResponse(
                        partition_index=p.partition_index, error_code=epoch_error
                    )
                )
                continue
            if ctx.version < _SINCE.get(p.timestamp, 0):
                parts.append(
                    ListOffsetsPartitionResponse(
                        partition_index=p.partition_index,
                        error_code=ErrorCode.UNSUPPORTED_VERSION,
                    )
                )
                continue
            log = part.log
            timestamp, offset = -1, -1
            match p.timestamp:
                case -1:
                    offset = (
                        log.last_stable_offset if req.isolation_level == 1 else log.high_watermark
                    )
                case -2 | -4:
                    offset = log.log_start_offset
                case -3:
                    found = log.max_timestamp()
                    if found is not None:
                        offset, timestamp = found
                case -5:
                    offset = -1
                case ts:
                    found = log.offset_for_timestamp(ts)
                    if found is not None:
                        offset, timestamp = found
            parts.append(
                ListOffsetsPartitionResponse(
                    partition_index=p.partition_index,
                    error_code=ErrorCode.NONE,
                    old_style_offsets=[offset] if offset >= 0 else [],
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=part.leader_epoch,
                )
            )
        topics.append(ListOffsetsTopicResponse(name=t.name, partitions=parts))
    return ListOffsetsResponse(topics=topics)
