"""Fetch (API key 1), v0-17 (topic ids from v13); no fetch sessions.

For each partition: the stored batches from the fetch offset on, up to the high
watermark (read_uncommitted) or the last stable offset (read_committed), whole batches
within `PartitionMaxBytes` and the request's `MaxBytes` (the first batch always, as
KIP-74 says, so a consumer never stalls on a big batch). read_committed answers also get
the aborted transactions that overlap what was returned, so the client can drop their
records. Sessions (KIP-227) are declined: SessionId 0 in every answer, a full fetch each
time; a request naming a session gets FETCH_SESSION_ID_NOT_FOUND.

Waiting is the shell's job: when `ready` says the answer has fewer than MinBytes and
MaxWaitMs has not passed, it waits for the cluster to change and calls `handle` again.
"""

from __future__ import annotations

from trio_kafka.broker._context import RequestContext
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol.messages.fetch import (
    AbortedTransaction,
    FetchableTopicResponse,
    FetchRequest,
    FetchResponse,
    LeaderIdAndEpoch,
    PartitionData,
)

REQUEST = FetchRequest
_READ_COMMITTED = 1


def handle(ctx: RequestContext, req: FetchRequest) -> FetchResponse:
    state = ctx.state
    if req.session_id != 0:
        return FetchResponse(error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, session_id=0)
    committed = req.isolation_level == _READ_COMMITTED
    budget = req.max_bytes if req.max_bytes > 0 else 2**31 - 1
    given = False  # whether a batch is already in the response
    responses = []
    for ftopic in req.topics:
        name: str | None = ftopic.topic
        if ctx.version >= 13:
            name = state.topic_ids.get(ftopic.topic_id)
        parts = []
        for fp in ftopic.partitions:
            part = state.partition(name, fp.partition) if name is not None else None
            if part is None:
                code = (
                    ErrorCode.UNKNOWN_TOPIC_ID
                    if ctx.version >= 13
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                )
                parts.append(
                    PartitionData(partition_index=fp.partition, error_code=code, high_watermark=-1)
                )
                continue
            log = part.log
            if part.leader != ctx.node_id:
                parts.append(
                    PartitionData(
                        partition_index=fp.partition,
                        error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                        high_watermark=-1,
                        current_leader=LeaderIdAndEpoch(part.leader, part.leader_epoch),
                    )
                )
                continue
            epoch_error = part.epoch_error(fp.current_leader_epoch)
            if epoch_error is not None:
                parts.append(
                    PartitionData(
                        partition_index=fp.partition,
                        error_code=epoch_error,
                        high_watermark=-1,
                        aborted_transactions=None,
                    )
                )
                continue
            common = {
                "partition_index": fp.partition,
                "high_watermark": log.high_watermark,
                "last_stable_offset": log.last_stable_offset,
                "log_start_offset": log.log_start_offset,
            }
            if not log.log_start_offset <= fp.fetch_offset <= log.log_end_offset:
                # Kafka answers without bounds (-1) and no aborted list: the client asks
                # ListOffsets for them (conformance test).
                parts.append(
                    PartitionData(
                        partition_index=fp.partition,
                        error_code=ErrorCode.OFFSET_OUT_OF_RANGE,
                        high_watermark=-1,
                        aborted_transactions=None,
                    )
                )
                continue
            upper = log.last_stable_offset if committed else log.high_watermark
            # (0 is a limit too: the response's first batch still comes, KIP-74.)
            limit = min(max(fp.partition_max_bytes, 0), budget)
            batches = log.read(fp.fetch_offset, limit, upper=upper)
            if batches and given and len(batches[0].data) > limit:
                # Only the response's first batch may exceed the limits (KIP-74).
                batches = []
            records = b"".join(b.data for b in batches)
            budget = max(budget - len(records), 0)
            given = given or bool(records)
            aborted = None
            if committed and ctx.version >= 4:
                end = batches[-1].next_offset if batches else fp.fetch_offset
                aborted = [
                    AbortedTransaction(producer_id=a.producer_id, first_offset=a.first_offset)
                    for a in log.aborted_in_range(fp.fetch_offset, end)
                ]
            parts.append(
                PartitionData(
                    error_code=ErrorCode.NONE,
                    aborted_transactions=aborted,
                    records=records,
                    **common,  # type: ignore[arg-type]
                )
            )
        responses.append(
            FetchableTopicResponse(topic=name or "", topic_id=ftopic.topic_id, partitions=parts)
        )
    return FetchResponse(error_code=ErrorCode.NONE, session_id=0, responses=responses)


def ready(req: FetchRequest, resp: FetchResponse) -> bool:
    """Whether the answer can go now (else the shell waits, up to MaxWaitMs)."""
    if resp.error_code != ErrorCode.NONE:
        return True
    size = 0
    for topic in resp.responses:
        for part in topic.partitions:
            if part.error_code != ErrorCode.NONE:
                return True
            size += len(part.records or b"")
    return size >= max(req.min_bytes, 1)
