"""The transaction state machine, stepped with explicit `now` and scripted responses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from trio_kafka.core._transaction import (
    SETTLE_ATTEMPTS,
    TABLE,
    Coordinator,
    CoordinatorType,
    GroupMetadata,
    OffsetAndMetadata,
    TransactionManager,
    TxnEvent,
    TxnRequest,
    TxnRequestKind,
    TxnState,
)
from trio_kafka.errors import (
    AbortableError,
    AmbiguousError,
    BrokerConnectionError,
    BrokerError,
    ConnectionLostError,
    ErrorCode,
    FatalError,
    IllegalTransactionStateError,
    ProducerClosedError,
    ProducerFencedError,
    RequestTimeoutError,
    TransactionAbortableError,
    TransactionOutcomeUnknownError,
    TransactionTimedOutError,
)
from trio_kafka.protocol.messages.add_offsets_to_txn import AddOffsetsToTxnResponse
from trio_kafka.protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopicResult,
)
from trio_kafka.protocol.messages.end_txn import EndTxnResponse
from trio_kafka.protocol.messages.find_coordinator import (
    Coordinator as FoundCoordinator,
)
from trio_kafka.protocol.messages.find_coordinator import (
    FindCoordinatorResponse,
)
from trio_kafka.protocol.messages.init_producer_id import InitProducerIdResponse
from trio_kafka.protocol.messages.txn_offset_commit import (
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)

K = TxnRequestKind
S = TxnState
TID = "tx-1"
PID = 4000
# FindCoordinator, InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit
V1 = {10: 4, 22: 5, 24: 5, 25: 4, 26: 4, 28: 4}
V2 = {**V1, 26: 5}


# -- scripted responses ---------------------------------------------------------------


def found(node: int = 1, key: str = TID, code: int = 0) -> FindCoordinatorResponse:
    return FindCoordinatorResponse(
        coordinators=[
            FoundCoordinator(key=key, node_id=node, host=f"b{node}", port=9092, error_code=code)
        ]
    )


def pid(epoch: int = 0, code: int = 0, producer_id: int = PID) -> InitProducerIdResponse:
    return InitProducerIdResponse(error_code=code, producer_id=producer_id, producer_epoch=epoch)


def added(request: TxnRequest, code: int = 0, **codes: int) -> AddPartitionsToTxnResponse:
    """An answer to an AddPartitionsToTxn v0-3 request: `code` for every partition
    unless `codes` names one as "topic_partition"."""
    results = [
        AddPartitionsToTxnTopicResult(
            name=t.name,
            results_by_partition=[
                AddPartitionsToTxnPartitionResult(
                    partition_index=p, partition_error_code=codes.get(f"{t.name}_{p}", code)
                )
                for p in t.partitions
            ],
        )
        for t in request.message.v3_and_below_topics
    ]
    return AddPartitionsToTxnResponse(results_by_topic_v3_and_below=results)


def ended(code: int = 0, producer_id: int = -1, epoch: int = -1) -> EndTxnResponse:
    return EndTxnResponse(error_code=code, producer_id=producer_id, producer_epoch=epoch)


def offsets_committed(request: TxnRequest, code: int = 0) -> TxnOffsetCommitResponse:
    return TxnOffsetCommitResponse(
        topics=[
            TxnOffsetCommitResponseTopic(
                name=t.name,
                partitions=[
                    TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=code
                    )
                    for p in t.partitions
                ],
            )
            for t in request.message.topics
        ]
    )


# -- helpers --------------------------------------------------------------------------


def manager(versions: dict[int, int] = V1, tv: int = 0, **kw: Any) -> TransactionManager:
    m = TransactionManager(TID, transaction_timeout=30.0, **kw)
    m.set_api_versions(versions, transaction_version=tv)
    return m


def expect(m: TransactionManager, kind: TxnRequestKind, now: float = 0.0, **kw: Any) -> TxnRequest:
    request = m.next_request(now, **kw)
    assert request is not None, f"expected {kind.value}, got nothing ({m!r})"
    assert request.kind is kind, f"expected {kind.value}, got {request.kind.value}"
    return request


def answer(m: TransactionManager, kind: TxnRequestKind, response: Any, now: float = 0.0) -> Any:
    request = expect(m, kind, now)
    return m.handle_response(request, response, now)


def ready(versions: dict[int, int] = V1, tv: int = 0, epoch: int = 0) -> TransactionManager:
    m = manager(versions, tv)
    result = m.init()
    answer(m, K.FIND_COORDINATOR, found())
    answer(m, K.INIT_PRODUCER_ID, pid(epoch))
    assert result.done() and result.error is None
    assert m.state is S.READY
    return m


def add(m: TransactionManager, *tps: tuple[str, int], now: float = 0.0) -> TxnRequest:
    for tp in tps:
        m.maybe_add_partition(tp)
    request = expect(m, K.ADD_PARTITIONS, now)
    m.handle_response(request, added(request), now)
    return request


# -- the event table -------------------------------------------------------------------

PAIRS = [(state, event) for state in TxnState for event in TxnEvent]
AN_ERROR = TransactionAbortableError("the test's error")


@pytest.mark.parametrize(("src", "event"), [p for p in PAIRS if p not in TABLE])
def test_an_event_not_in_the_table_raises_naming_the_state_and_the_event(
    src: TxnState, event: TxnEvent
) -> None:
    m = manager()
    m.state = src
    with pytest.raises(IllegalTransactionStateError) as info:
        m.process_event(event, AN_ERROR)
    assert info.value.from_state is src and info.value.to_state is event
    assert src.name in str(info.value) and event.name in str(info.value)
    assert m.state is src


@pytest.mark.parametrize(("src", "event"), list(TABLE))
def test_an_event_in_the_table_moves_to_its_next_state(src: TxnState, event: TxnEvent) -> None:
    m = manager()
    m.state = src
    m.process_event(event, AN_ERROR)
    assert m.state is TABLE[(src, event)][0]


def test_the_abort_plan_never_shrinks_until_the_transaction_is_over() -> None:
    for (src, event), (dst, _) in TABLE.items():
        if dst not in (S.READY, S.FATAL_ERROR):
            assert dst.abort_plan >= src.abort_plan, (src, event, dst)
        if event is TxnEvent.ABORT:
            assert dst.abort_plan is src.abort_plan, (src, dst)  # the abort keeps it


def test_every_move_in_the_table_is_reachable_through_the_public_api(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: set[tuple[TxnState, TxnEvent]] = set()
    original = TransactionManager.process_event

    def record(self: TransactionManager, event: TxnEvent, error: Any = None) -> None:
        seen.add((self.state, event))
        original(self, event, error)

    monkeypatch.setattr(TransactionManager, "process_event", record)
    # Happy commit and abort.
    m = ready()
    m.begin()
    add(m, ("t", 0))
    m.commit()
    answer(m, K.END_TXN, ended())
    m.begin()
    add(m, ("t", 0))
    m.abort()
    answer(m, K.END_TXN, ended())
    # Abortable error, then abort; an abortable EndTxn(commit); an unknown outcome.
    m.begin()
    m.partition_failed(("t", 0), BrokerError(ErrorCode.MESSAGE_TOO_LARGE), sequenced=False)
    m.abort()
    assert m.next_request(0.0) is None  # nothing was added: aborted locally
    m.begin()
    add(m, ("t", 0))
    m.commit()
    answer(m, K.END_TXN, ended(ErrorCode.TRANSACTION_ABORTABLE))
    m.abort()
    answer(m, K.END_TXN, ended())
    m.begin()
    add(m, ("t", 0))
    m.commit()
    m.handle_failure(expect(m, K.END_TXN), RequestTimeoutError("timeout"), 0.0)
    answer(m, K.FIND_COORDINATOR, found())
    answer(m, K.END_TXN, ended(), now=5.0)  # resent at the same epoch, after a backoff
    answer(m, K.INIT_PRODUCER_ID, pid(1), now=5.0)
    # An abort that bumps the epoch after EndTxn (a batch with a sequence failed).
    m.begin()
    add(m, ("t", 0))
    m.partition_failed(("t", 0), BrokerError(ErrorCode.MESSAGE_TOO_LARGE))
    m.abort()
    answer(m, K.END_TXN, ended())
    answer(m, K.INIT_PRODUCER_ID, pid(2))
    # How the abort must end grows, in every failing and aborting state, up to a bump
    # alone (INVALID_PRODUCER_EPOCH: the coordinator refuses our epoch, KIP-588).
    m.begin()
    add(m, ("t", 0))
    m.partition_failed(("t", 0), BrokerError(ErrorCode.INVALID_PRODUCER_EPOCH))
    m.abort()
    answer(m, K.INIT_PRODUCER_ID, pid(3))
    m.begin()
    add(m, ("t", 0))
    m.partition_failed(("t", 0), BrokerError(ErrorCode.MESSAGE_TOO_LARGE))
    m.partition_failed(("t", 0), BrokerError(ErrorCode.INVALID_PRODUCER_EPOCH))
    m.abort()
    answer(m, K.INIT_PRODUCER_ID, pid(4))
    for failed in (False, True):
        m.begin()
        add(m, ("t", 0))
        if failed:
            m.partition_failed(("t", 0), BrokerError(ErrorCode.MESSAGE_TOO_LARGE))
        m.abort()
        answer(m, K.END_TXN, ended(ErrorCode.INVALID_PRODUCER_EPOCH))
        answer(m, K.INIT_PRODUCER_ID, pid(5 + failed))
    # The coordinator will not abort at our epoch: the bump does.
    m.begin()
    add(m, ("t", 0))
    m.abort()
    answer(m, K.END_TXN, ended(ErrorCode.UNKNOWN_PRODUCER_ID))
    answer(m, K.INIT_PRODUCER_ID, pid(7))
    assert m.state is S.READY
    # Transactions v2: the abort's EndTxn bumps the epoch itself.
    v2 = ready(V2, tv=2)
    v2.begin()
    v2.maybe_add_partition(("t", 0))
    v2.sequenced(("t", 0))
    v2.partition_failed(("t", 0), BrokerError(ErrorCode.MESSAGE_TOO_LARGE))
    v2.abort()
    answer(v2, K.END_TXN, ended(producer_id=PID, epoch=1))
    assert v2.state is S.READY
    # A transaction handed off, and adopted by another manager that commits it.
    _handed_off()
    adopter = manager()
    adopter.adopt(PID, 0)
    # Closing from every state that can be closed.
    for reach in (
        _uninitialized,
        _initializing,
        _ready,
        _in_txn,
        _committing,
        _aborting,
        _aerr,
        _handed_off,
        *(_failing(plan) for plan in ("end", "then bump", "by bump")),
        *(_failing(plan, aborting=True) for plan in ("end", "then bump", "by bump")),
    ):
        reach().close()
    assert seen == set(TABLE)


def _uninitialized() -> TransactionManager:
    return manager()


def _initializing() -> TransactionManager:
    m = manager()
    m.init()
    return m


def _ready() -> TransactionManager:
    return ready()


def _in_txn() -> TransactionManager:
    m = ready()
    m.begin()
    return m


def _committing() -> TransactionManager:
    m = _in_txn()
    m.commit()
    return m


def _aborting() -> TransactionManager:
    m = _in_txn()
    m.abort()
    return m


def _aerr() -> TransactionManager:
    m = _in_txn()
    m.partition_failed(("t", 0), BrokerError(ErrorCode.MESSAGE_TOO_LARGE))
    return m


def _failing(plan: str, *, aborting: bool = False) -> Callable[[], TransactionManager]:
    """A transaction failing (or aborting) whose abort must end as `plan` says: EndTxn,
    EndTxn then an epoch bump (a batch with a sequence failed), or the bump alone (the
    coordinator refused our epoch)."""

    def reach() -> TransactionManager:
        m = _in_txn()
        add(m, ("t", 0))
        code = (
            ErrorCode.INVALID_PRODUCER_EPOCH if plan == "by bump" else ErrorCode.MESSAGE_TOO_LARGE
        )
        m.partition_failed(("t", 0), BrokerError(code), sequenced=plan != "end")
        if aborting:
            m.abort()
        assert (
            m.state
            is {
                ("end", False): S.ABORTABLE_ERROR,
                ("then bump", False): S.ABORTABLE_ERROR_THEN_BUMP,
                ("by bump", False): S.ABORTABLE_ERROR_BY_BUMP,
                ("end", True): S.ABORTING,
                ("then bump", True): S.ABORTING_THEN_BUMP,
                ("by bump", True): S.ABORTING_BY_BUMP,
            }[(plan, aborting)]
        )
        return m

    return reach


def _handed_off() -> TransactionManager:
    m = _in_txn()
    add(m, ("t", 0))
    assert m.hand_off() == (PID, 0)
    return m


# -- handing a transaction to another process (Spark: tasks write, the driver commits) --


def test_a_handed_off_transaction_is_neither_sent_to_nor_ended_by_its_writer() -> None:
    m = _handed_off()
    assert m.state is S.HANDED_OFF
    for call in (m.commit, m.abort, m.begin):
        with pytest.raises(IllegalTransactionStateError, match="HANDED_OFF"):
            call()
    with pytest.raises(IllegalTransactionStateError):
        m.maybe_add_partition(("t", 1))
    assert m.next_request(0.0) is None  # no EndTxn, ever


def test_a_transaction_is_not_handed_off_before_the_coordinator_has_its_partitions() -> None:
    m = _in_txn()
    m.maybe_add_partition(("t", 0))
    with pytest.raises(IllegalTransactionStateError, match="partitions are being added"):
        m.hand_off()
    empty = _in_txn()
    with pytest.raises(IllegalTransactionStateError, match="does not know"):
        empty.hand_off()


def test_a_failed_transaction_is_not_handed_off() -> None:
    m = _in_txn()
    add(m, ("t", 0))
    m.partition_failed(("t", 0), BrokerError(ErrorCode.MESSAGE_TOO_LARGE))
    with pytest.raises(AbortableError):
        m.hand_off()


@pytest.mark.parametrize("commit", [True, False])
def test_an_adopted_transaction_is_ended_with_the_writers_id_and_epoch(commit: bool) -> None:
    m = manager()
    m.adopt(PID, 3)
    result = m.commit() if commit else m.abort()
    answer(m, K.FIND_COORDINATOR, found())
    request = expect(m, K.END_TXN)
    assert request.message.producer_id == PID and request.message.producer_epoch == 3
    assert request.message.committed is commit
    m.handle_response(request, ended(), 0.0)
    assert result.done() and result.error is None
    assert m.state is S.READY


def test_adopting_needs_a_fresh_manager_and_a_real_id() -> None:
    with pytest.raises(IllegalTransactionStateError):
        ready().adopt(PID, 0)
    with pytest.raises(ValueError, match="producer_id=-1"):
        manager().adopt(-1, 0)


def test_an_adopted_commit_past_the_coordinators_timeout_is_fatal() -> None:
    """The coordinator aborted the transaction (timeout) and bumped the epoch."""
    m = manager()
    m.adopt(PID, 0)
    result = m.commit()
    answer(m, K.FIND_COORDINATOR, found())
    answer(m, K.END_TXN, ended(ErrorCode.PRODUCER_FENCED))
    assert isinstance(result.error, FatalError)


# -- happy paths -----------------------------------------------------------------------


def test_init_finds_the_coordinator_then_gets_a_producer_id() -> None:
    m = manager()
    result = m.init()
    assert m.init() is result  # a second call while initialising: the same result
    find = expect(m, K.FIND_COORDINATOR)
    assert find.coordinator is None  # any node
    assert find.message.coordinator_keys == [TID] and find.message.key_type == 1
    assert m.next_request(0.0) is None  # one coordinator request at a time
    m.handle_response(find, found(node=7), 0.0)
    assert m.coordinator == Coordinator(7, "b7", 9092)
    init = expect(m, K.INIT_PRODUCER_ID)
    assert init.coordinator == m.coordinator
    assert init.message.transactional_id == TID
    assert init.message.transaction_timeout_ms == 30000
    assert (init.message.producer_id, init.message.producer_epoch) == (-1, -1)
    update = m.handle_response(init, pid(3), 0.0)
    assert update.new_producer_id == (PID, 3)
    assert result.done() and result.error is None
    assert (m.state, m.producer_id, m.producer_epoch) == (S.READY, PID, 3)


def test_v1_commit_adds_partitions_and_offsets_then_ends_the_transaction() -> None:
    m = ready()
    m.begin()
    m.maybe_add_partition(("t", 1))
    m.maybe_add_partition(("t", 0))
    m.maybe_add_partition(("u", 0))
    assert not m.is_send_to_partition_allowed(("t", 0))
    request = expect(m, K.ADD_PARTITIONS)
    assert request.version == 3  # the client form, as Java
    msg = request.message
    assert (msg.v3_and_below_transactional_id, msg.v3_and_below_producer_id) == (TID, PID)
    assert [(t.name, t.partitions) for t in msg.v3_and_below_topics] == [("t", [0, 1]), ("u", [0])]
    assert not m.is_send_to_partition_allowed(("u", 0))
    m.handle_response(request, added(request), 0.0)
    allowed = [tp for tp in [("t", 0), ("u", 0), ("v", 0)] if m.is_send_to_partition_allowed(tp)]
    assert allowed == [("t", 0), ("u", 0)]

    group = GroupMetadata("g", generation_id=5, member_id="m-1", group_instance_id="i-1")
    sent = m.send_offsets({("in", 0): OffsetAndMetadata(42, "meta"), ("in", 1): 7}, group)
    add_offsets = expect(m, K.ADD_OFFSETS)
    assert add_offsets.message.group_id == "g"
    m.handle_response(add_offsets, AddOffsetsToTxnResponse(), 0.0)
    find_group = expect(m, K.FIND_COORDINATOR)
    assert find_group.message.key_type == CoordinatorType.GROUP
    assert find_group.message.coordinator_keys == ["g"]
    m.handle_response(find_group, found(node=9, key="g"), 0.0)
    commit_offsets = expect(m, K.TXN_OFFSET_COMMIT)
    assert commit_offsets.coordinator == Coordinator(9, "b9", 9092)
    msg = commit_offsets.message
    assert (msg.generation_id, msg.member_id, msg.group_instance_id) == (5, "m-1", "i-1")
    assert [(p.partition_index, p.committed_offset, p.committed_metadata)
            for p in msg.topics[0].partitions] == [(0, 42, "meta"), (1, 7, None)]  # fmt: skip
    assert not sent.done()
    m.handle_response(commit_offsets, offsets_committed(commit_offsets), 0.0)
    assert sent.done() and sent.error is None

    result = m.commit()
    assert m.commit() is result
    assert m.next_request(0.0, batches_unfinished=True) is None  # batches settle first
    end = expect(m, K.END_TXN)
    assert end.message.committed is True
    assert (end.message.producer_id, end.message.producer_epoch) == (PID, 0)
    m.handle_response(end, ended(), 0.0)
    assert result.done() and result.error is None
    assert m.state is S.READY
    # The next transaction starts empty: its partitions are added again.
    m.begin()
    assert not m.is_send_to_partition_allowed(("t", 0))
    add(m, ("t", 0))
    assert m.is_send_to_partition_allowed(("t", 0))


def test_v1_abort_ends_the_transaction_with_abort() -> None:
    m = ready()
    m.begin()
    add(m, ("t", 0))
    m.maybe_add_partition(("t", 9))  # never added: the abort forgets it
    result = m.abort()
    assert m.abort() is result
    assert m.undrained_error() is not None  # the driver fails unsent batches
    end = expect(m, K.END_TXN)
    assert end.message.committed is False
    m.handle_response(end, ended(), 0.0)
    assert result.done() and result.error is None
    assert m.state is S.READY and m.producer_epoch == 0  # no bump needed
    m.begin()
    assert m.state is S.IN_TRANSACTION


def test_an_empty_transaction_ends_without_a_request() -> None:
    m = ready()
    m.begin()
    result = m.commit()
    assert m.next_request(0.0) is None
    assert result.done() and m.state is S.READY


def test_v2_adds_partitions_with_produce_and_adopts_the_epoch_from_end_txn() -> None:
    m = ready(V2, tv=2)
    for epoch in (0, 1):
        m.begin()
        assert m.transaction_v2
        m.maybe_add_partition(("t", 0))
        assert m.is_send_to_partition_allowed(("t", 0))  # no AddPartitionsToTxn
        assert m.next_request(0.0) is None
        m.sequenced(("t", 0))
        result = m.commit() if epoch == 0 else m.abort()
        end = expect(m, K.END_TXN)
        assert end.version == 5 and end.message.producer_epoch == epoch
        update = m.handle_response(end, ended(producer_id=PID, epoch=epoch + 1), 0.0)
        assert update.new_producer_id == (PID, epoch + 1)
        assert result.done() and result.error is None
        assert (m.producer_id, m.producer_epoch, m.state) == (PID, epoch + 1, S.READY)


def test_v2_abort_after_a_failed_batch_needs_no_separate_bump() -> None:
    m = ready(V2, tv=2)
    m.begin()
    m.maybe_add_partition(("t", 0))
    m.sequenced(("t", 0))
    m.partition_failed(("t", 0), BrokerError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER))
    result = m.abort()
    m.handle_response(expect(m, K.END_TXN), ended(producer_id=PID, epoch=1), 0.0)
    assert result.done() and m.state is S.READY and m.producer_epoch == 1
    assert m.next_request(0.0) is None


def test_v2_needs_both_the_feature_and_end_txn_v5() -> None:
    m = ready(V1, tv=2)  # EndTxn v4 only
    m.begin()
    assert not m.transaction_v2
    m2 = ready(V2, tv=1)
    m2.begin()
    assert not m2.transaction_v2


# -- coordinator moves and retries -------------------------------------------------------


@pytest.mark.parametrize("code", [ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE])
def test_coordinator_moved_during_add_partitions_is_found_again(code: int) -> None:
    m = ready()
    m.begin()
    m.maybe_add_partition(("t", 0))
    first = expect(m, K.ADD_PARTITIONS)
    m.handle_response(first, added(first, code), 0.0)
    assert m.coordinator is None
    m.handle_response(expect(m, K.FIND_COORDINATOR), found(node=2), 0.0)
    assert m.next_request(0.0) is None  # the retry waits out its backoff
    assert m.poll_delay(0.0) == pytest.approx(0.1)
    again = expect(m, K.ADD_PARTITIONS, now=0.1)
    assert again.coordinator == Coordinator(2, "b2", 9092)
    m.handle_response(again, added(again), 0.1)
    assert m.is_send_to_partition_allowed(("t", 0))


def test_coordinator_moved_during_end_txn_is_found_again() -> None:
    m = ready()
    m.begin()
    add(m, ("t", 0))
    result = m.commit()
    m.handle_response(expect(m, K.END_TXN), ended(ErrorCode.NOT_COORDINATOR), 0.0)
    m.handle_response(expect(m, K.FIND_COORDINATOR), found(node=3), 0.0)
    end = expect(m, K.END_TXN, now=1.0)
    assert end.coordinator is not None and end.coordinator.node_id == 3
    m.handle_response(end, ended(), 1.0)
    assert result.done() and result.error is None


def test_poll_delay_tells_a_due_retry_from_an_end_txn_blocked_on_batches() -> None:
    # The driver sleeps forever on None (an event wakes it) and loops at once on 0: a
    # due FindCoordinator retry must never read as None (simulator seed 1100).
    m = TransactionManager(TID, retry_backoff=0.1)
    m.init()
    lookup = expect(m, K.FIND_COORDINATOR)
    m.handle_failure(lookup, BrokerConnectionError("refused"), 0.0, sent=False)
    assert m.poll_delay(0.0) == pytest.approx(0.1)
    assert m.poll_delay(5.0, batches_unfinished=True) == 0.0  # due: batches are no reason
    assert expect(m, K.FIND_COORDINATOR, now=5.0).coordinator is None

    m = ready()
    m.begin()
    add(m, ("t", 0))
    m.commit()
    assert m.next_request(0.0, batches_unfinished=True) is None
    assert m.poll_delay(0.0, batches_unfinished=True) is None  # a batch settling wakes it
    assert m.poll_delay(0.0) == 0.0


def test_concurrent_transactions_on_the_first_add_partitions_is_retried_after_20_ms() -> None:
    # The previous transaction's markers are still being written (Kafka answers
    # CONCURRENT_TRANSACTIONS until they are): Java retries the transaction's first
    # AddPartitionsToTxn after 20 ms (ADD_PARTITIONS_RETRY_BACKOFF_MS, KAFKA-5477), not
    # after retry_backoff (100 ms, then growing), which would cost every short
    # transaction on Kafka 100 ms or more.
    m = ready()
    m.begin()
    m.maybe_add_partition(("t", 0))
    now = 0.0
    for _ in range(5):
        request = expect(m, K.ADD_PARTITIONS, now)
        m.handle_response(request, added(request, ErrorCode.CONCURRENT_TRANSACTIONS), now)
        assert m.poll_delay(now) == pytest.approx(0.02)
        assert m.next_request(now + 0.019) is None
        now += 0.02
    request = expect(m, K.ADD_PARTITIONS, now)
    m.handle_response(request, added(request), now)
    assert m.is_send_to_partition_allowed(("t", 0))


def test_concurrent_transactions_on_a_later_add_partitions_backs_off_growing() -> None:
    m = ready()
    m.begin()
    add(m, ("t", 0))  # the transaction has a partition: no longer its first add
    m.maybe_add_partition(("t", 1))
    now = 0.0
    for delay in (0.1, 0.2, 0.4, 0.8, 1.0):
        request = expect(m, K.ADD_PARTITIONS, now)
        m.handle_response(request, added(request, ErrorCode.CONCURRENT_TRANSACTIONS), now)
        assert m.poll_delay(now) == pytest.approx(delay)
        assert m.next_request(now + delay - 0.01) is None
        now += delay
    request = expect(m, K.ADD_PARTITIONS, now)
    m.handle_response(request, added(request), now)
    assert m.is_send_to_partition_allowed(("t", 1))


def test_coordinator_load_in_progress_on_init_is_retried() -> None:
    m = manager()
    result = m.init()
    answer(m, K.FIND_COORDINATOR, found())
    answer(m, K.INIT_PRODUCER_ID, pid(code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS))
    assert m.coordinator is not None  # same coordinator, later
    answer(m, K.INIT_PRODUCER_ID, pid(), now=0.1)
    assert result.done() and m.state is S.READY


def test_a_request_that_never_left_is_retried_not_ambiguous() -> None:
    m = ready()
    m.begin()
    add(m, ("t", 0))
    result = m.commit()
    end = expect(m, K.END_TXN)
    m.handle_failure(end, ConnectionLostError("refused"), 0.0, sent=False)
    assert m.state is S.COMMITTING and not result.done()
    answer(m, K.FIND_COORDINATOR, found())
    answer(m, K.END_TXN, ended(), now=0.1)
    assert result.done() and result.error is None


# -- ambiguous EndTxn (KAFKA-17754) ------------------------------------------------------


def test_end_txn_without_answer_is_ambiguous_resent_at_the_same_epoch_then_bumped() -> None:
    m = ready(epoch=5)
    m.begin()
    add(m, ("t", 0))
    result = m.commit()
    lost = expect(m, K.END_TXN)
    m.handle_failure(lost, RequestTimeoutError("no answer in 30s"), 0.0)
    assert isinstance(result.error, TransactionOutcomeUnknownError)
    assert isinstance(result.error, AmbiguousError)
    with pytest.raises(TransactionOutcomeUnknownError):
        result.result()
    assert m.state is S.INITIALIZING
    with pytest.raises(IllegalTransactionStateError, match="await init"):
        m.begin()
    reinit = m.init()
    assert not reinit.done()
    answer(m, K.FIND_COORDINATOR, found())  # the connection was lost: find it again
    # Settled first, at the same epoch: Kafka fences a KIP-360 bump that arrives while
    # the transaction may still be open (prepareFenceProducerEpoch leaves no last epoch).
    assert m.next_request(0.0) is None  # after the retry backoff
    settle = expect(m, K.END_TXN, now=5.0)
    assert (settle.message.producer_epoch, settle.message.committed) == (5, True)
    assert not reinit.done()
    m.handle_response(settle, ended(), 5.0)
    bump = expect(m, K.INIT_PRODUCER_ID, now=5.0)
    assert (bump.message.producer_id, bump.message.producer_epoch) == (PID, 5)
    update = m.handle_response(bump, pid(6), 0.1)
    assert update.new_producer_id == (PID, 6)
    assert reinit.done() and reinit.error is None

    # The next transaction runs under the new epoch; the late answer to the lost
    # EndTxn cannot complete it.
    m.begin()
    add(m, ("t", 0))
    second = m.commit()
    end = expect(m, K.END_TXN)
    assert end.message.producer_epoch == 6
    assert m.handle_response(lost, ended(), 0.2).stale
    assert not second.done() and m.state is S.COMMITTING
    m.handle_response(end, ended(), 0.2)
    assert second.done() and second.error is None


def test_abort_without_answer_is_resent_at_the_same_epoch_then_bumped() -> None:
    # Not a bump at once: Kafka fences a KIP-360 InitProducerId that finds the
    # transaction open. Then a bump: the unanswered abort may still arrive, and must not
    # abort the next transaction (sim transactional 3011302: a torn transaction).
    m = ready(epoch=2)
    m.begin()
    add(m, ("t", 0))
    result = m.abort()
    m.handle_failure(expect(m, K.END_TXN), ConnectionLostError("reset"), 0.0)
    assert not result.done() and m.state is S.ABORTING_THEN_BUMP
    answer(m, K.FIND_COORDINATOR, found())
    again = expect(m, K.END_TXN, now=5.0)
    assert (again.message.producer_epoch, again.message.committed) == (2, False)
    m.handle_response(again, ended(), 5.0)
    assert not result.done()
    bump = expect(m, K.INIT_PRODUCER_ID, now=5.0)
    assert (bump.message.producer_id, bump.message.producer_epoch) == (PID, 2)
    m.handle_response(bump, pid(3), 0.0)
    assert result.done() and result.error is None
    assert (m.state, m.producer_epoch) == (S.READY, 3)


def test_add_partitions_without_answer_during_abort_is_resent_before_the_abort() -> None:
    # Java resends an unanswered AddPartitionsToTxn even while aborting; EndTxn goes only
    # once an add is answered. Dropping it and sending EndTxn(abort) at once met a
    # coordinator still in CompleteCommit (the add never arrived), and Kafka answers a
    # v1 abort there INVALID_TXN_STATE: fatal (chaos transactional on mock, seed 1).
    for abort_first in (True, False):
        m = ready()
        m.begin()
        m.maybe_add_partition(("t", 0))
        lost = expect(m, K.ADD_PARTITIONS)
        if abort_first:
            result = m.abort()
        m.handle_failure(lost, RequestTimeoutError("no answer"), 0.0)
        if not abort_first:
            result = m.abort()  # the resend is queued: the abort keeps it
        answer(m, K.FIND_COORDINATOR, found())
        again = expect(m, K.ADD_PARTITIONS, now=5.0)
        assert again.work.partitions == {("t", 0)}
        assert m.next_request(5.0) is None  # EndTxn waits for the add's answer
        m.handle_response(again, added(again), 5.0)
        end = expect(m, K.END_TXN, now=5.0)
        assert end.message.committed is False
        m.handle_response(end, ended(), 5.0)
        assert result.done() and result.error is None and m.state is S.READY


def _unanswered_commit(versions: dict[int, int] = V1) -> TransactionManager:
    """A manager at epoch 5 whose commit's EndTxn went unanswered: the outcome is
    unknown, and the next `init()` settles it."""
    m = ready(versions, epoch=5)
    m.begin()
    add(m, ("t", 0))
    m.commit()
    m.handle_failure(expect(m, K.END_TXN), RequestTimeoutError("no answer"), 0.0)
    return m


def test_resent_end_txn_without_answer_is_sent_again() -> None:
    m = _unanswered_commit()
    reinit = m.init()
    answer(m, K.FIND_COORDINATOR, found())
    m.handle_failure(expect(m, K.END_TXN, now=5.0), ConnectionLostError("reset"), 5.0)
    answer(m, K.FIND_COORDINATOR, found(), now=5.0)
    answer(m, K.END_TXN, ended(), now=20.0)
    answer(m, K.INIT_PRODUCER_ID, pid(6), now=20.0)
    assert reinit.done() and reinit.error is None and m.state is S.READY


def test_resends_that_keep_going_unanswered_give_way_to_the_bump() -> None:
    # Tansu drops the connection at every resend of an EndTxn whose first copy was cut:
    # after SETTLE_ATTEMPTS the producer bumps instead (on Kafka a bump that finds the
    # transaction open is fenced: fatal, never silent).
    m = _unanswered_commit()
    reinit = m.init()
    now = 0.0
    for _ in range(SETTLE_ATTEMPTS):
        answer(m, K.FIND_COORDINATOR, found(), now=now)
        now += 60.0
        m.handle_failure(expect(m, K.END_TXN, now=now), ConnectionLostError("reset"), now)
    answer(m, K.FIND_COORDINATOR, found(), now=now)
    bump = expect(m, K.INIT_PRODUCER_ID, now=now)
    m.handle_response(bump, pid(6), now)
    assert reinit.done() and reinit.error is None and m.state is S.READY


def test_resent_end_txn_refused_as_fenced_is_fatal() -> None:
    m = _unanswered_commit()
    reinit = m.init()
    answer(m, K.FIND_COORDINATOR, found())
    settle = expect(m, K.END_TXN, now=5.0)
    m.handle_response(settle, ended(ErrorCode.PRODUCER_FENCED), 5.0)
    assert m.state is S.FATAL_ERROR
    assert isinstance(reinit.error, ProducerFencedError)
    assert m.next_request(0.0) is None


def test_re_init_before_kip_360_sends_no_epoch() -> None:
    m = _unanswered_commit({**V1, 22: 2})
    answer(m, K.FIND_COORDINATOR, found())
    answer(m, K.END_TXN, ended(), now=5.0)
    bump = expect(m, K.INIT_PRODUCER_ID, now=5.0)
    assert (bump.message.producer_id, bump.message.producer_epoch) == (-1, -1)


# -- fatal -----------------------------------------------------------------------------


def test_producer_fenced_is_fatal_and_every_later_call_raises_it() -> None:
    m = ready()
    m.begin()
    add(m, ("t", 0))
    offsets = m.send_offsets({("in", 0): 1}, "g")
    result = m.commit()
    answer(m, K.ADD_OFFSETS, AddOffsetsToTxnResponse(error_code=ErrorCode.PRODUCER_FENCED))
    assert m.state is S.FATAL_ERROR
    error = m.last_error
    assert isinstance(error, ProducerFencedError) and isinstance(error, FatalError)
    assert offsets.error is error and result.error is error
    for call in (m.begin, m.commit, m.abort, m.init, lambda: m.maybe_add_partition(("t", 1))):
        with pytest.raises(ProducerFencedError) as info:
            call()
        assert info.value is error
    assert m.next_request(0.0) is None
    assert not m.is_send_to_partition_allowed(("t", 0))
    assert m.undrained_error() is error


def test_producer_fenced_on_end_txn_is_fatal() -> None:
    m = ready()
    m.begin()
    add(m, ("t", 0))
    result = m.commit()
    answer(m, K.END_TXN, ended(ErrorCode.PRODUCER_FENCED))
    assert isinstance(result.error, ProducerFencedError)
    with pytest.raises(ProducerFencedError):
        m.begin()


@pytest.mark.parametrize(
    "code", [ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ErrorCode.INVALID_TXN_STATE]
)
def test_authorization_and_state_errors_on_add_partitions_are_fatal(code: int) -> None:
    m = ready()
    m.begin()
    m.maybe_add_partition(("t", 0))
    request = expect(m, K.ADD_PARTITIONS)
    m.handle_response(request, added(request, code), 0.0)
    assert m.state is S.FATAL_ERROR
    assert isinstance(m.last_error, BrokerError) and m.last_error.code == code


def test_a_fatal_produce_error_is_fatal_for_the_transaction() -> None:
    m = ready()
    m.begin()
    add(m, ("t", 0))
    m.partition_failed(("t", 0), ProducerFencedError(ErrorCode.PRODUCER_FENCED))
    assert m.state is S.FATAL_ERROR


def test_close_fails_pending_results() -> None:
    m = ready()
    m.begin()
    add(m, ("t", 0))
    result = m.commit()
    m.close()
    assert isinstance(result.error, ProducerClosedError)
    with pytest.raises(ProducerClosedError):
        m.begin()


# -- abortable -------------------------------------------------------------------------


def test_topic_authorization_failed_is_abortable_and_the_next_transaction_works() -> None:
    m = ready()
    m.begin()
    add(m, ("ok", 0))
    m.maybe_add_partition(("secret", 0))
    m.maybe_add_partition(("ok", 1))
    request = expect(m, K.ADD_PARTITIONS)
    m.handle_response(
        request,
        added(
            request,
            ErrorCode.OPERATION_NOT_ATTEMPTED,
            secret_0=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ),
        0.0,
    )
    assert m.state is S.ABORTABLE_ERROR
    assert isinstance(m.last_error, AbortableError) and "secret" in str(m.last_error)
    assert m.undrained_error() is m.last_error
    with pytest.raises(AbortableError):
        m.commit()
    with pytest.raises(AbortableError):
        m.begin()
    result = m.abort()
    end = expect(m, K.END_TXN)  # ("ok", 0) was added: the coordinator must abort
    assert end.message.committed is False
    m.handle_response(end, ended(), 0.0)
    assert result.done() and result.error is None and m.state is S.READY
    m.begin()
    add(m, ("ok", 0))
    m.commit()
    answer(m, K.END_TXN, ended())
    assert m.state is S.READY


def test_abortable_error_before_anything_was_added_aborts_locally() -> None:
    m = ready()
    m.begin()
    m.maybe_add_partition(("secret", 0))
    request = expect(m, K.ADD_PARTITIONS)
    m.handle_response(request, added(request, ErrorCode.TOPIC_AUTHORIZATION_FAILED), 0.0)
    result = m.abort()
    assert m.next_request(0.0) is None
    assert result.done() and m.state is S.READY


def test_a_failed_batch_makes_the_abort_bump_the_epoch_kip_360() -> None:
    m = ready(epoch=1)
    m.begin()
    add(m, ("t", 0))
    m.partition_failed(("t", 0), BrokerError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER))
    assert m.state is S.ABORTABLE_ERROR_THEN_BUMP
    result = m.abort()
    assert m.state is S.ABORTING_THEN_BUMP
    answer(m, K.END_TXN, ended())
    assert not result.done()  # the bump is part of the abort
    assert m.next_request(0.0, batches_unfinished=True) is None
    bump = expect(m, K.INIT_PRODUCER_ID)
    assert (bump.message.producer_id, bump.message.producer_epoch) == (PID, 1)
    assert m.handle_response(bump, pid(2), 0.0).new_producer_id == (PID, 2)
    assert result.done() and m.state is S.READY and m.producer_epoch == 2


def test_v1_abort_after_a_failed_batch_bumps_even_when_end_txn_v5_names_the_epoch() -> None:
    # EndTxn v5 negotiated without transaction.version 2: the answer's producer id and
    # epoch are the current ones, not a bump; the abort must still bump (KIP-360).
    m = ready(V2, tv=0, epoch=1)
    m.begin()
    assert not m.transaction_v2
    add(m, ("t", 0))
    m.partition_failed(("t", 0), BrokerError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER))
    result = m.abort()
    update = answer(m, K.END_TXN, ended(producer_id=PID, epoch=1))
    assert update.new_producer_id is None
    assert not result.done()
    bump = expect(m, K.INIT_PRODUCER_ID)
    assert m.handle_response(bump, pid(2), 0.0).new_producer_id == (PID, 2)
    assert result.done() and m.state is S.READY and m.producer_epoch == 2


def test_a_failed_batch_during_commit_fails_the_commit() -> None:
    m = ready()
    m.begin()
    add(m, ("t", 0))
    result = m.commit()
    assert m.next_request(0.0, batches_unfinished=True) is None
    m.partition_failed(("t", 0), BrokerError(ErrorCode.MESSAGE_TOO_LARGE))
    assert isinstance(result.error, AbortableError)
    assert m.state is S.ABORTABLE_ERROR_THEN_BUMP  # the batch had a sequence number
    assert m.next_request(0.0) is None  # the EndTxn(commit) was dropped


def test_invalid_producer_epoch_on_produce_means_the_transaction_timed_out() -> None:
    m = ready(epoch=4)
    m.begin()
    add(m, ("t", 0))
    m.partition_failed(("t", 0), BrokerError(ErrorCode.INVALID_PRODUCER_EPOCH))
    assert isinstance(m.last_error, TransactionTimedOutError)
    assert "transaction_timeout" in str(m.last_error)
    result = m.abort()
    bump = expect(m, K.INIT_PRODUCER_ID)  # no EndTxn with the stale epoch
    assert (bump.message.producer_id, bump.message.producer_epoch) == (PID, 4)
    m.handle_response(bump, pid(6), 0.0)
    assert result.done() and m.state is S.READY and m.producer_epoch == 6


def test_invalid_producer_epoch_from_an_old_coordinator_is_fatal() -> None:
    m = ready({**V1, 22: 3})
    m.begin()
    m.maybe_add_partition(("t", 0))
    request = expect(m, K.ADD_PARTITIONS)
    m.handle_response(request, added(request, ErrorCode.INVALID_PRODUCER_EPOCH), 0.0)
    assert isinstance(m.last_error, ProducerFencedError)


def test_group_membership_errors_on_txn_offset_commit_are_abortable() -> None:
    m = ready()
    m.begin()
    sent = m.send_offsets({("in", 0): 1}, GroupMetadata("g", 3, "m"))
    answer(m, K.ADD_OFFSETS, AddOffsetsToTxnResponse())
    answer(m, K.FIND_COORDINATOR, found(node=9, key="g"))
    request = expect(m, K.TXN_OFFSET_COMMIT)
    m.handle_response(request, offsets_committed(request, ErrorCode.ILLEGAL_GENERATION), 0.0)
    assert isinstance(sent.error, AbortableError) and m.state is S.ABORTABLE_ERROR


def test_state_errors_for_calls_out_of_order() -> None:
    m = manager()
    with pytest.raises(IllegalTransactionStateError):
        m.begin()
    m = ready()
    with pytest.raises(IllegalTransactionStateError):
        m.commit()
    with pytest.raises(IllegalTransactionStateError):
        m.abort()
    with pytest.raises(IllegalTransactionStateError):
        m.maybe_add_partition(("t", 0))
    with pytest.raises(IllegalTransactionStateError):
        m.init()


# -- version shapes --------------------------------------------------------------------


def test_find_coordinator_before_v4_uses_the_single_key_form() -> None:
    m = manager({**V1, 10: 3})
    m.init()
    find = expect(m, K.FIND_COORDINATOR)
    assert (find.message.key, find.message.key_type, find.message.coordinator_keys) == (TID, 1, [])
    m.handle_response(find, FindCoordinatorResponse(node_id=5, host="h", port=1), 0.0)
    assert m.coordinator == Coordinator(5, "h", 1)


def test_add_partitions_v4_uses_the_batched_form_when_allowed() -> None:
    m = manager(add_partitions_max_version=5)
    m.init()
    answer(m, K.FIND_COORDINATOR, found())
    answer(m, K.INIT_PRODUCER_ID, pid())
    m.begin()
    m.maybe_add_partition(("t", 0))
    request = expect(m, K.ADD_PARTITIONS)
    assert request.version == 5
    (txn,) = request.message.transactions
    assert (txn.transactional_id, txn.producer_id, txn.verify_only) == (TID, PID, False)
    assert [(t.name, t.partitions) for t in txn.topics] == [("t", [0])]


def test_a_missing_api_is_a_fatal_error() -> None:
    m = manager({10: 4})
    result = m.init()
    answer(m, K.FIND_COORDINATOR, found())
    assert m.next_request(0.0) is None
    assert isinstance(result.error, FatalError)


def test_a_bump_refused_with_unknown_server_error_is_a_fence_not_a_server_failure() -> None:
    # Tansu's answer to any InitProducerId naming the id and epoch: on a takeover the old
    # instance's abort asks for that bump, and must stop as fenced (a WARNING), not with
    # a FatalBrokerError "unexpected UNKNOWN_SERVER_ERROR" (an ERROR each failover).
    m = ready(epoch=4)
    m.begin()
    add(m, ("t", 0))
    m.partition_failed(("t", 0), BrokerError(ErrorCode.INVALID_PRODUCER_EPOCH))
    m.abort()
    bump = expect(m, K.INIT_PRODUCER_ID)
    m.handle_response(bump, pid(-1, code=ErrorCode.UNKNOWN_SERVER_ERROR, producer_id=-1), 0.0)
    assert isinstance(m.last_error, ProducerFencedError)
    assert "took over" in str(m.last_error)


def test_unknown_server_error_for_a_new_instances_init_stays_a_server_failure() -> None:
    m = manager()
    m.init()
    answer(m, K.FIND_COORDINATOR, found())
    answer(m, K.INIT_PRODUCER_ID, pid(-1, code=ErrorCode.UNKNOWN_SERVER_ERROR, producer_id=-1))
    assert isinstance(m.last_error, FatalError)
    assert not isinstance(m.last_error, ProducerFencedError)
