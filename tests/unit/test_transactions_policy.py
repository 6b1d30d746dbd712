"""The transaction manager as the `Sequencer`'s hooks, plugged into the real
`ProducerCore`: partitions join the transaction before their batches drain, and failed
batches make it abortable."""

from __future__ import annotations

import random

from trio_kafka.core import ClusterView, ProducerConfig, ProducerCore, Sequencer
from trio_kafka.core._core import PartitionResponse
from trio_kafka.core._transaction import TransactionManager, TxnRequestKind, TxnState
from trio_kafka.errors import ErrorCode, KafkaError
from trio_kafka.protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopicResult,
)
from trio_kafka.protocol.messages.end_txn import EndTxnResponse
from trio_kafka.protocol.messages.find_coordinator import Coordinator, FindCoordinatorResponse
from trio_kafka.protocol.messages.init_producer_id import InitProducerIdResponse

K = TxnRequestKind


def setup() -> tuple[TransactionManager, ProducerCore]:
    config = ProducerConfig(transactional_id="tx", linger=0.0)
    txn = TransactionManager.from_config(config)
    core = ProducerCore(
        config, random.Random(0), sequencing=Sequencer(is_transactional=True, hooks=txn)
    )
    core.update_metadata(ClusterView.from_leaders({"t": [1, 2]}))
    txn.init()
    for response in (
        FindCoordinatorResponse(coordinators=[Coordinator(key="tx", node_id=1, host="h", port=1)]),
        InitProducerIdResponse(producer_id=77, producer_epoch=3),
    ):
        request = txn.next_request(0.0)
        assert request is not None
        update = txn.handle_response(request, response, 0.0)
        if update.new_producer_id:
            core.set_producer_id(*update.new_producer_id, 0.0)
    return txn, core


def add_partitions(txn: TransactionManager, code: int = 0) -> None:
    request = txn.next_request(0.0)
    assert request is not None and request.kind is K.ADD_PARTITIONS
    topics = request.message.v3_and_below_topics
    txn.handle_response(
        request,
        AddPartitionsToTxnResponse(
            results_by_topic_v3_and_below=[
                AddPartitionsToTxnTopicResult(
                    name=t.name,
                    results_by_partition=[
                        AddPartitionsToTxnPartitionResult(
                            partition_index=p, partition_error_code=code
                        )
                        for p in t.partitions
                    ],
                )
                for t in topics
            ]
        ),
        0.0,
    )


def test_a_batch_drains_only_after_its_partition_joined_the_transaction() -> None:
    txn, core = setup()
    txn.begin()
    core.append("t", b"v", partition=0, now=0.0)
    assert core.drain(0.0, [1, 2]) == {}  # blocked: the partition is not added yet
    assert ("t", 0) in txn.new_partitions  # the policy registered it
    add_partitions(txn)
    drained = core.drain(0.0, [1, 2])
    (batch,) = drained[1]
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 3, 0)
    assert batch.is_transactional
    core.handle_response(1, [batch], {("t", 0): PartitionResponse(base_offset=10)}, 0.0)
    txn.commit()
    request = txn.next_request(0.0, batches_unfinished=core.has_unfinished)
    assert request is not None and request.kind is K.END_TXN
    txn.handle_response(request, EndTxnResponse(), 0.0)
    assert txn.state is TxnState.READY


def test_a_failed_batch_makes_the_transaction_abortable_and_the_abort_bumps() -> None:
    txn, core = setup()
    txn.begin()
    core.append("t", b"v", partition=0, now=0.0)
    core.drain(0.0, [1])
    add_partitions(txn)
    (batch,) = core.drain(0.0, [1])[1]
    core.handle_response(
        1,
        [batch],
        {("t", 0): PartitionResponse(error_code=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)},
        0.0,
    )
    assert txn.state is TxnState.ABORTABLE_ERROR_THEN_BUMP
    core.append("t", b"w", partition=1, now=0.0)
    error = txn.undrained_error()
    assert error is not None
    assert core.fail_all(error) == 1  # the driver fails what was never sent
    result = txn.abort()
    request = txn.next_request(0.0, batches_unfinished=core.has_unfinished)
    assert request is not None and request.kind is K.END_TXN
    txn.handle_response(request, EndTxnResponse(), 0.0)
    bump = txn.next_request(0.0)
    assert bump is not None and bump.kind is K.INIT_PRODUCER_ID
    assert (bump.message.producer_id, bump.message.producer_epoch) == (77, 3)
    update = txn.handle_response(
        bump, InitProducerIdResponse(producer_id=77, producer_epoch=4), 0.0
    )
    assert update.new_producer_id == (77, 4)
    core.set_producer_id(77, 4, 0.0)
    assert result.done() and result.error is None
    # The next transaction's first batch starts at sequence 0 under the new epoch.
    txn.begin()
    core.append("t", b"x", partition=0, now=0.0)
    core.drain(0.0, [1])
    add_partitions(txn)
    (batch,) = core.drain(0.0, [1])[1]
    assert (batch.producer_epoch, batch.base_sequence) == (4, 0)


def test_a_failing_transaction_holds_its_batches_back_from_draining() -> None:
    txn, core = setup()
    txn.begin()
    core.append("t", b"v", partition=0, now=0.0)
    core.drain(0.0, [1])
    add_partitions(txn)
    txn.partition_failed(("t", 1), KafkaError("a send failed"), sequenced=False)
    assert txn.state is TxnState.ABORTABLE_ERROR
    # The partition is in the transaction, but the manager holds its batch: the driver
    # fails it with the transaction's error instead (`undrained_error`).
    assert core.drain(0.0, [1, 2]) == {}
    assert txn.needs_coordinator


def test_a_batch_waiting_for_its_partition_tells_the_driver_the_coordinator_is_needed() -> None:
    txn, core = setup()
    txn.begin()
    assert not txn.needs_coordinator
    core.append("t", b"v", partition=0, now=0.0)
    core.ready(0.0)  # the sender's pass: the partition waits for AddPartitionsToTxn
    assert txn.needs_coordinator
    add_partitions(txn)
    assert not txn.needs_coordinator
