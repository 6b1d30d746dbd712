"""Produce (API key 0), v0-11; record batch v2 only (v3+ in practice).

KIP-951 (v10+): NOT_LEADER_OR_FOLLOWER names the partition's current leader and epoch
(`CurrentLeader`), and the response carries those leaders' endpoints (`NodeEndpoints`),
as Kafka's broker does, so a client can go there without a Metadata round trip.

Each partition is checked and appended on its own (`Partition.produce`): a corrupt batch
in one partition fails that partition only. acks must be -1, 0 or 1 (INVALID_REQUIRED_ACKS
otherwise); with no replication every ack level is satisfied at append, and acks=0 gets
no response at all (the shell sends nothing). A request holding a transactional batch
but no transactional id is refused whole (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as
Kafka answers: it authorizes the id first). Transactional batches are verified with
the transaction coordinator when they open a transaction on a partition (KIP-890 part 1);
with transactions v2 the partition is added to the transaction implicitly instead.
"""

from __future__ import annotations

from trio_kafka.broker._context import RequestContext
from trio_kafka.broker._partition import ProduceOutcome
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol import INTERNAL_TOPICS
from trio_kafka.protocol.messages.produce import (
    BatchIndexAndErrorMessage,
    LeaderIdAndEpoch,
    NodeEndpoint,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceResponse,
)
from trio_kafka.records import first_batch_is_transactional

REQUEST = ProduceRequest


def handle(ctx: RequestContext, req: ProduceRequest) -> ProduceResponse:
    state = ctx.state
    now = ctx.now_ms()
    acks_ok = req.acks in (-1, 0, 1)
    # Transactional batches without a transactional id are refused whole, every
    # partition, before anything else (Kafka authorizes the id first, and there is none).
    no_txn_id = req.transactional_id is None and any(
        first_batch_is_transactional(p.records) for t in req.topic_data for p in t.partition_data
    )
    responses = []
    appended = False
    leaders: set[int] = set()  # named in a CurrentLeader: their endpoints go back too
    for topic_data in req.topic_data:
        topic = state.topics.get(topic_data.name)
        partitions = []
        for pdata in topic_data.partition_data:
            part = state.partition(topic_data.name, pdata.index)
            leader = LeaderIdAndEpoch()
            if no_txn_id:
                out = ProduceOutcome(
                    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "a transactional batch in a Produce request without a transactional id",
                )
            elif not acks_ok:
                out = ProduceOutcome(ErrorCode.INVALID_REQUIRED_ACKS, f"acks={req.acks}")
            elif topic is None or part is None:
                out = ProduceOutcome(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"unknown partition {topic_data.name}-{pdata.index}",
                )
            elif topic_data.name in INTERNAL_TOPICS:
                # Kafka's ReplicaManager refuses an internal topic before the leader
                # check, with no message in the answer (conformance test).
                out = ProduceOutcome(ErrorCode.INVALID_TOPIC_EXCEPTION, None)
            elif part.leader != ctx.node_id:
                out = ProduceOutcome(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    f"node {ctx.node_id} does not lead {part.topic}-{part.index} "
                    f"(node {part.leader} does)",
                )
                leader = LeaderIdAndEpoch(part.leader, part.leader_epoch)
                if part.leader >= 0:
                    leaders.add(part.leader)
            else:
                key = (part.topic, part.index)

                def verify(pid: int, epoch: int, key: tuple[str, int] = key) -> ErrorCode:
                    txn_id = req.transactional_id
                    if (
                        state.options.transaction_version >= 2
                        and txn_id is not None
                        and ctx.version >= 12
                    ):
                        # KIP-890 part 2: only a Produce v12+ (a transactions-v2 client)
                        # adds its partition; older ones are verified (conformance test).
                        error = state.txn.add_partitions(txn_id, pid, epoch, [key], now)
                        if error is ErrorCode.PRODUCER_FENCED:
                            return ErrorCode.INVALID_PRODUCER_EPOCH
                        return error
                    if not state.options.verify_transactions:
                        return ErrorCode.NONE
                    error = state.txn.verify_partition(txn_id, pid, epoch, key)
                    if error is ErrorCode.INVALID_TXN_STATE and ctx.version >= 11:
                        # KIP-890: Produce v11 clients understand TRANSACTION_ABORTABLE,
                        # which Kafka answers them instead (conformance test).
                        return ErrorCode.TRANSACTION_ABORTABLE
                    return error

                out = part.produce(pdata.records, topic.config, now, verify_txn=verify)
                appended = appended or (out.error is ErrorCode.NONE and not out.duplicate)
            partitions.append(
                PartitionProduceResponse(
                    index=pdata.index,
                    error_code=out.error,
                    base_offset=out.base_offset,
                    log_append_time_ms=out.log_append_time_ms,
                    log_start_offset=out.log_start_offset,
                    error_message=out.message,
                    current_leader=leader,
                    record_errors=[
                        BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=why)
                        for i, why in out.record_errors
                    ],
                )
            )
        responses.append(TopicProduceResponse(name=topic_data.name, partition_responses=partitions))
    if appended:
        state.changed()
    endpoints = [
        NodeEndpoint(node_id=node, host=state.endpoints[node][0], port=state.endpoints[node][1])
        for node in sorted(leaders)
        if node in state.endpoints
    ]
    return ProduceResponse(responses=responses, node_endpoints=endpoints)
