"""The transaction manager as the `Sequencer`'s hooks: errors reach the manager through
`on_final` / `on_fatal`, InitProducerId stays the manager's, a KIP-360 bump is deferred
to the abort, and UNKNOWN_PRODUCER_ID after retention restarts sequences in place when
that is safe."""

from __future__ import annotations

import random
from typing import Any

from trio_kafka.core import (
    ClusterView,
    ProducerBatch,
    ProducerConfig,
    ProducerCore,
    Sequencer,
    TransactionManager,
    TxnState,
)
from trio_kafka.core._core import PartitionResponse
from trio_kafka.core._transaction import AbortPlan, TxnRequestKind
from trio_kafka.errors import (
    BrokerError,
    ConnectionLostError,
    ErrorCode,
    FatalError,
    KafkaError,
    TransactionAbortableError,
)
from trio_kafka.protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopicResult,
)
from trio_kafka.protocol.messages.find_coordinator import Coordinator, FindCoordinatorResponse
from trio_kafka.protocol.messages.init_producer_id import InitProducerIdResponse

K = TxnRequestKind
VALUE = b"v" * 100
TP = ("t", 0)


def make() -> tuple[TransactionManager, ProducerCore, Sequencer]:
    config = ProducerConfig(transactional_id="tx", linger=0.0, batch_size=100)
    txn = TransactionManager.from_config(config)
    policy = Sequencer(is_transactional=True, hooks=txn)
    core = ProducerCore(config, random.Random(0), sequencing=policy)
    core.update_metadata(ClusterView.from_leaders({"t": [1]}))
    return txn, core, policy


def initialised() -> tuple[TransactionManager, ProducerCore, Sequencer]:
    txn, core, policy = make()
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
    return txn, core, policy


def in_transaction(records: int) -> tuple[TransactionManager, ProducerCore]:
    """A transaction with `records` one-record batches for t-0, the partition added."""
    txn, core, _ = initialised()
    txn.begin()
    for _ in range(records):
        core.append("t", VALUE, partition=0, now=0.0)
    assert drain(core) == []  # registers the partition
    request = txn.next_request(0.0)
    assert request is not None and request.kind is K.ADD_PARTITIONS
    txn.handle_response(
        request,
        AddPartitionsToTxnResponse(
            results_by_topic_v3_and_below=[
                AddPartitionsToTxnTopicResult(
                    name="t",
                    results_by_partition=[AddPartitionsToTxnPartitionResult(partition_index=0)],
                )
            ]
        ),
        0.0,
    )
    return txn, core


def drain(core: ProducerCore, now: float = 0.0) -> list[ProducerBatch]:
    return core.drain(now, [1]).get(1, [])


def answer(core: ProducerCore, batch: ProducerBatch, now: float, **fields: Any) -> None:
    core.handle_response(1, [batch], {TP: PartitionResponse(**fields)}, now)


# -- owns_producer_id ------------------------------------------------------------------


def test_the_driver_is_never_asked_for_init_producer_id_before_the_manager_inits() -> None:
    txn, core, policy = make()
    assert policy.owns_producer_id and policy.producer_id < 0
    assert not core.needs_producer_id
    assert txn.state is TxnState.UNINITIALIZED


def test_a_sequence_gap_in_a_transaction_is_no_epoch_bump_for_the_driver() -> None:
    txn, core = in_transaction(2)
    b0 = drain(core)[0]
    answer(core, b0, 0.0, base_offset=0)
    b1 = drain(core)[0]
    answer(core, b1, 0.0, error_code=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert txn.state is TxnState.ABORTABLE_ERROR_THEN_BUMP
    assert txn.state.abort_plan is AbortPlan.END_TXN_THEN_BUMP
    assert not core.epoch_bump_due  # the abort bumps, through the manager


# -- on_final, on_fatal ------------------------------------------------------------------


def test_a_failed_batch_reports_its_own_error_before_it_finishes() -> None:
    txn, core = in_transaction(1)
    (batch,) = drain(core)
    states: list[TxnState] = []
    batch.add_done_hook(lambda _b: states.append(txn.state))
    answer(core, batch, 0.0, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    # The manager knew when the batch finished (and that the abort bumps: it had a sequence).
    assert states == [TxnState.ABORTABLE_ERROR_THEN_BUMP]
    error = txn.last_error
    assert isinstance(error, TransactionAbortableError)
    assert isinstance(error.cause, BrokerError)
    assert error.cause.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert error.cause is batch.error


def test_on_final_without_an_error_still_makes_the_transaction_abortable() -> None:
    txn, core = in_transaction(1)
    (batch,) = drain(core)
    policy = core.sequencing
    assert isinstance(policy, Sequencer) and policy.hooks is not None
    policy.on_final(batch, gap=False)  # an older caller that passes no error
    assert txn.state is TxnState.ABORTABLE_ERROR_THEN_BUMP
    assert isinstance(txn.last_error, TransactionAbortableError)


def test_a_fatal_produce_error_makes_the_manager_fatal_through_on_fatal() -> None:
    txn, core = in_transaction(1)
    (batch,) = drain(core)
    answer(core, batch, 0.0, error_code=ErrorCode.PRODUCER_FENCED)
    assert isinstance(core.fatal_error, FatalError)
    assert txn.state is TxnState.FATAL_ERROR
    assert txn.last_error is core.fatal_error


def test_on_fatal_alone_makes_the_manager_fatal() -> None:
    txn, core = in_transaction(1)
    fatal = FatalError("broken")
    core.sequencing.on_fatal(fatal)
    assert txn.state is TxnState.FATAL_ERROR and txn.last_error is fatal
    assert txn.undrained_error() is fatal


def test_batches_failing_after_a_fatal_error_report_the_fatal_error() -> None:
    txn, core = in_transaction(2)
    (b0,) = drain(core)
    answer(core, b0, 0.0, error_code=ErrorCode.PRODUCER_FENCED)
    core.fail_all(KafkaError("closing"))
    assert txn.last_error is core.fatal_error


# -- reset_sequences (UNKNOWN_PRODUCER_ID after retention) --------------------------------


def test_unknown_producer_after_retention_restarts_the_sequences_without_a_bump() -> None:
    txn, core = in_transaction(3)
    b0 = drain(core)[0]
    answer(core, b0, 0.0, base_offset=5)  # our last acknowledged write: offset 5
    b1 = drain(core)[0]
    assert b1.base_sequence == 1
    # Retention moved the log start past offset 5 and the broker forgot us.
    answer(core, b1, 0.1, error_code=ErrorCode.UNKNOWN_PRODUCER_ID, log_start_offset=20)
    assert txn.state is TxnState.IN_TRANSACTION  # no abort
    assert not core.sequencing.epoch_bump_required
    assert txn.state.abort_plan is AbortPlan.END_TXN
    retry = drain(core, 1.0)[0]
    assert retry is b1
    assert (retry.producer_id, retry.producer_epoch, retry.base_sequence) == (77, 3, 0)
    assert retry.sequence_reset
    answer(core, retry, 1.0, base_offset=20)
    b2 = drain(core, 1.0)[0]
    assert (b2.producer_epoch, b2.base_sequence) == (3, 1)  # the new run goes on
    answer(core, b2, 1.0, base_offset=21)
    assert txn.state is TxnState.IN_TRANSACTION
    assert not core.has_unfinished


def test_no_reset_while_another_request_for_the_partition_is_out() -> None:
    txn, core = in_transaction(3)
    answer(core, drain(core)[0], 0.0, base_offset=5)  # our last acknowledged write
    b0, b1 = drain(core)[0], drain(core)[0]  # both in flight
    answer(core, b0, 0.1, error_code=ErrorCode.UNKNOWN_PRODUCER_ID, log_start_offset=20)
    # b1's old sequence may still land: the safe path (abortable, bump after abort).
    assert b1.base_sequence == 2 and not b1.sequence_reset
    assert txn.state is TxnState.ABORTABLE_ERROR_THEN_BUMP
    assert txn.state.abort_plan is AbortPlan.END_TXN_THEN_BUMP


def test_no_reset_when_an_earlier_attempt_may_have_been_written() -> None:
    txn, core = in_transaction(1)
    (batch,) = drain(core)
    core.handle_request_failure(1, [batch], ConnectionLostError("reset"), 0.1)
    assert batch.maybe_written
    retry = drain(core, 1.0)
    assert retry == [batch]
    answer(core, batch, 1.0, error_code=ErrorCode.UNKNOWN_PRODUCER_ID, log_start_offset=20)
    assert batch.base_sequence == 0 and not batch.sequence_reset
    assert txn.state is TxnState.ABORTABLE_ERROR_THEN_BUMP


def test_unknown_producer_without_retention_is_abortable_in_a_transaction() -> None:
    txn, core = in_transaction(2)
    b0 = drain(core)[0]
    answer(core, b0, 0.0, base_offset=30)
    b1 = drain(core)[0]
    # Our write at 30 is still in the log: losing our state is not expected.
    answer(core, b1, 0.1, error_code=ErrorCode.UNKNOWN_PRODUCER_ID, log_start_offset=20)
    assert txn.state is TxnState.ABORTABLE_ERROR_THEN_BUMP
    assert b1.done
