"""Building the coordinator requests of a transactional producer, and reading answers.

Pure functions, one pair per API, that know the version-dependent shapes:

- FindCoordinator: v1-3 one `key` and answers at top level; v4+ `coordinator_keys` and
  a `coordinators` array (KIP-699). v0 has no key type (groups only).
- InitProducerId: v3+ carries the current producer id and epoch, so the coordinator can
  bump the epoch of the same producer instead of fencing it (KIP-360).
- AddPartitionsToTxn: v0-3 the client form (`v3_and_below_*`); v4+ the batched form
  (`transactions`, KIP-890 part 1), which Kafka reserves for brokers verifying; the
  manager caps the version at 3 by default, as Java does.
- AddOffsetsToTxn, EndTxn (v5+ answers with the producer id and epoch to use next,
  KIP-890 part 2), TxnOffsetCommit (v3+ group membership, KIP-447).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from trio_kafka.errors import ErrorCode
from trio_kafka.producer._txn_types import (
    Coordinator,
    CoordinatorType,
    GroupMetadata,
    OffsetAndMetadata,
    TopicPartition,
)
from trio_kafka.protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest
from trio_kafka.protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
)
from trio_kafka.protocol.messages.end_txn import EndTxnRequest
from trio_kafka.protocol.messages.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from trio_kafka.protocol.messages.init_producer_id import InitProducerIdRequest
from trio_kafka.protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
)


def find_coordinator(key: str, key_type: CoordinatorType, version: int) -> FindCoordinatorRequest:
    if version >= 4:
        return FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key])
    return FindCoordinatorRequest(key=key, key_type=key_type)


def read_find_coordinator(
    response: FindCoordinatorResponse, key: str, version: int
) -> tuple[int, str | None, Coordinator | None]:
    """(error code, error message, coordinator when the code is NONE)."""
    if version >= 4:
        found = [c for c in response.coordinators if c.key == key] or response.coordinators
        if len(found) != 1:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, "no single coordinator in answer", None
        c = found[0]
        code, message, node_id, host, port = (
            c.error_code,
            c.error_message,
            c.node_id,
            c.host,
            c.port,
        )
    else:
        code, message = response.error_code, response.error_message
        node_id, host, port = response.node_id, response.host, response.port
    if code != ErrorCode.NONE:
        return code, message, None
    return code, message, Coordinator(node_id, host, port)


def init_producer_id(
    transactional_id: str,
    transaction_timeout: float,
    producer_id: int,
    producer_epoch: int,
) -> InitProducerIdRequest:
    return InitProducerIdRequest(
        transactional_id=transactional_id,
        transaction_timeout_ms=round(transaction_timeout * 1000),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
    )


def _topics(partitions: Iterable[TopicPartition]) -> list[AddPartitionsToTxnTopic]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return [AddPartitionsToTxnTopic(name=t, partitions=p) for t, p in by_topic.items()]


def add_partitions_to_txn(
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partitions: Iterable[TopicPartition],
    version: int,
) -> AddPartitionsToTxnRequest:
    topics = _topics(partitions)
    if version >= 4:
        return AddPartitionsToTxnRequest(
            transactions=[
                AddPartitionsToTxnTransaction(
                    transactional_id=transactional_id,
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    verify_only=False,
                    topics=topics,
                )
            ]
        )
    return AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=transactional_id,
        v3_and_below_producer_id=producer_id,
        v3_and_below_producer_epoch=producer_epoch,
        v3_and_below_topics=topics,
    )


def read_add_partitions_to_txn(
    response: AddPartitionsToTxnResponse,
    transactional_id: str,
    partitions: Iterable[TopicPartition],
    version: int,
) -> dict[TopicPartition, int]:
    """Error code per partition asked for; a top-level v4+ error applies to all of them,
    and a partition the broker did not answer for counts as OPERATION_NOT_ATTEMPTED."""
    asked = list(partitions)
    if version >= 4:
        if response.error_code != ErrorCode.NONE:
            return dict.fromkeys(asked, response.error_code)
        topic_results = [
            t
            for r in response.results_by_transaction
            if r.transactional_id == transactional_id
            for t in r.topic_results
        ]
    else:
        topic_results = response.results_by_topic_v3_and_below
    codes = {
        (t.name, p.partition_index): p.partition_error_code
        for t in topic_results
        for p in t.results_by_partition
    }
    return {tp: codes.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in asked}


def add_offsets_to_txn(
    transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
) -> AddOffsetsToTxnRequest:
    return AddOffsetsToTxnRequest(
        transactional_id=transactional_id,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        group_id=group_id,
    )


def txn_offset_commit(
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    group: GroupMetadata,
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
) -> TxnOffsetCommitRequest:
    by_topic: dict[str, list[TxnOffsetCommitRequestPartition]] = {}
    for (topic, partition), om in sorted(offsets.items()):
        by_topic.setdefault(topic, []).append(
            TxnOffsetCommitRequestPartition(
                partition_index=partition,
                committed_offset=om.offset,
                committed_leader_epoch=om.leader_epoch,
                committed_metadata=om.metadata,
            )
        )
    # Fields absent in older versions are simply not written (v0-2 lose the KIP-447
    # membership fencing; v0-1 the leader epoch).
    return TxnOffsetCommitRequest(
        transactional_id=transactional_id,
        group_id=group.group_id,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        generation_id=group.generation_id,
        member_id=group.member_id,
        group_instance_id=group.group_instance_id,
        topics=[TxnOffsetCommitRequestTopic(name=t, partitions=p) for t, p in by_topic.items()],
    )


def read_txn_offset_commit(response: TxnOffsetCommitResponse) -> dict[TopicPartition, int]:
    return {
        (t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions
    }


def end_txn(
    transactional_id: str, producer_id: int, producer_epoch: int, committed: bool
) -> EndTxnRequest:
    return EndTxnRequest(
        transactional_id=transactional_id,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        committed=committed,
    )
