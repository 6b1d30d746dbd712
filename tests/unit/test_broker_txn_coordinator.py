"""The transaction coordinator's state machine: every allowed and refused transition."""

from __future__ import annotations

import itertools

import pytest

from trio_kafka.broker._txn import (
    _ALLOWED,
    EXHAUSTED_EPOCH,
    IllegalTransitionError,
    TransactionCoordinator,
    TransactionState,
    TxnMetadata,
)
from trio_kafka.errors import ErrorCode

S = TransactionState
E = ErrorCode
NOW = 1_000_000
TP = ("t", 0)


def coordinator() -> TransactionCoordinator:
    ids = itertools.count(100)
    return TransactionCoordinator(next_producer_id=lambda: next(ids))


def started(tc: TransactionCoordinator, txn: str = "tx") -> tuple[int, int]:
    r = tc.init_producer_id(txn, 60_000, NOW)
    assert r.error is E.NONE
    return r.producer_id, r.producer_epoch


def ongoing(tc: TransactionCoordinator, txn: str = "tx") -> tuple[int, int]:
    pid, epoch = started(tc, txn)
    assert tc.add_partitions(txn, pid, epoch, [TP], NOW) is E.NONE
    return pid, epoch


def state(tc: TransactionCoordinator, txn: str = "tx") -> TransactionState:
    return tc.txns[txn].state


# -- the transition table ------------------------------------------------------------


@pytest.mark.parametrize("new", list(TransactionState))
@pytest.mark.parametrize("old", list(TransactionState))
def test_transition_table_is_enforced(old: TransactionState, new: TransactionState) -> None:
    meta = TxnMetadata("x", 1, 0, 1000, old, 0)
    if old in _ALLOWED[new]:
        meta.transition(new, 5)
        assert meta.state is new
        assert meta.last_update_ms == 5
    else:
        with pytest.raises(IllegalTransitionError):
            meta.transition(new, 5)


# -- InitProducerId --------------------------------------------------------------------


def test_idempotent_init_gets_a_fresh_producer_id_each_time() -> None:
    tc = coordinator()
    a = tc.init_producer_id(None, 0, NOW)
    b = tc.init_producer_id(None, 0, NOW, producer_id=a.producer_id, producer_epoch=0)
    assert (a.error, a.producer_epoch, b.producer_epoch) == (E.NONE, 0, 0)
    assert a.producer_id != b.producer_id


def test_transactional_init_creates_empty_state_at_epoch_zero() -> None:
    tc = coordinator()
    assert started(tc) == (100, 0)
    assert state(tc) is S.EMPTY


def test_second_init_bumps_the_epoch_and_fences_the_first_instance() -> None:
    tc = coordinator()
    pid, epoch = started(tc)
    pid2, epoch2 = started(tc)
    assert (pid2, epoch2) == (pid, epoch + 1)
    assert tc.add_partitions("tx", pid, epoch, [TP], NOW) is E.PRODUCER_FENCED
    assert tc.end_txn("tx", pid, epoch, True, NOW).error is E.PRODUCER_FENCED


@pytest.mark.parametrize("timeout", [0, -1, 900_001])
def test_bad_transaction_timeout_is_refused(timeout: int) -> None:
    tc = coordinator()
    assert tc.init_producer_id("tx", timeout, NOW).error is E.INVALID_TRANSACTION_TIMEOUT


def test_init_during_an_ongoing_transaction_aborts_it_with_a_bumped_epoch() -> None:
    tc = coordinator()
    pid, epoch = ongoing(tc)
    r = tc.init_producer_id("tx", 60_000, NOW)
    assert r.error is E.CONCURRENT_TRANSACTIONS
    assert r.markers is not None
    assert (r.markers.commit, r.markers.producer_epoch, r.markers.partitions) == (False, 1, (TP,))
    assert state(tc) is S.PREPARE_ABORT
    assert tc.init_producer_id("tx", 60_000, NOW).error is E.CONCURRENT_TRANSACTIONS
    tc.complete("tx", NOW)
    retry = tc.init_producer_id("tx", 60_000, NOW)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (E.NONE, pid, epoch + 2)


def test_kip360_init_with_current_producer_id_and_epoch_bumps() -> None:
    tc = coordinator()
    pid, epoch = started(tc)
    r = tc.init_producer_id("tx", 60_000, NOW, producer_id=pid, producer_epoch=epoch)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.NONE, pid, epoch + 1)


def test_kip360_retry_with_the_previous_epoch_returns_the_current_one() -> None:
    tc = coordinator()
    pid, epoch = started(tc)
    tc.init_producer_id("tx", 60_000, NOW, producer_id=pid, producer_epoch=epoch)
    r = tc.init_producer_id("tx", 60_000, NOW, producer_id=pid, producer_epoch=epoch)
    assert (r.error, r.producer_epoch) == (E.NONE, epoch + 1)


def test_kip360_init_with_a_stale_epoch_is_fenced() -> None:
    tc = coordinator()
    pid, _ = started(tc)
    started(tc)
    started(tc)
    r = tc.init_producer_id("tx", 60_000, NOW, producer_id=pid, producer_epoch=0)
    assert r.error is E.PRODUCER_FENCED
    other = tc.init_producer_id("tx", 60_000, NOW, producer_id=999, producer_epoch=2)
    assert other.error is E.PRODUCER_FENCED


def test_kip360_init_with_the_epoch_a_new_instance_replaced_is_fenced() -> None:
    # Kafka's prepareIncrementProducerEpoch: an InitProducerId without producer id (a new
    # instance) sets the last epoch to -1, so the old instance's KIP-360 bump that names
    # the replaced epoch is fenced, not taken for a retry (sim transactional seed
    # 3001759: the old instance was handed the new one's epoch and its records were
    # deduplicated against the new instance's batches: acknowledged, never written).
    tc = coordinator()
    pid, epoch = started(tc)
    assert started(tc) == (pid, epoch + 1)
    r = tc.init_producer_id("tx", 60_000, NOW, producer_id=pid, producer_epoch=epoch)
    assert r.error is E.PRODUCER_FENCED


def test_kip360_init_with_the_epoch_a_fence_replaced_is_fenced() -> None:
    # prepareFenceProducerEpoch (a new instance arriving during a transaction) also
    # leaves no last epoch to retry with.
    tc = coordinator()
    pid, epoch = ongoing(tc)
    assert tc.init_producer_id("tx", 60_000, NOW).error is E.CONCURRENT_TRANSACTIONS
    tc.complete("tx", NOW)
    r = tc.init_producer_id("tx", 60_000, NOW, producer_id=pid, producer_epoch=epoch)
    assert r.error is E.PRODUCER_FENCED


def test_kip360_init_with_a_stale_epoch_during_a_transaction_fences_it_as_kafka_does() -> None:
    # Kafka checks only the producer id before the state: in Ongoing it fences the open
    # transaction (abort under a bumped epoch); the stale instance's retry is then fenced.
    tc = coordinator()
    pid, epoch = started(tc)
    tc.init_producer_id("tx", 60_000, NOW, producer_id=pid, producer_epoch=epoch)
    assert tc.add_partitions("tx", pid, epoch + 1, [TP], NOW) is E.NONE
    r = tc.init_producer_id("tx", 60_000, NOW, producer_id=pid, producer_epoch=epoch)
    assert r.error is E.CONCURRENT_TRANSACTIONS
    tc.complete("tx", NOW)
    again = tc.init_producer_id("tx", 60_000, NOW, producer_id=pid, producer_epoch=epoch)
    assert again.error is E.PRODUCER_FENCED


def test_epoch_exhaustion_allocates_a_new_producer_id() -> None:
    tc = coordinator()
    pid, _ = started(tc)
    tc.txns["tx"].producer_epoch = EXHAUSTED_EPOCH
    r = tc.init_producer_id("tx", 60_000, NOW)
    assert (r.error, r.producer_epoch) == (E.NONE, 0)
    assert r.producer_id != pid


# -- AddPartitionsToTxn / AddOffsetsToTxn -------------------------------------------


def test_add_partitions_opens_the_transaction() -> None:
    tc = coordinator()
    ongoing(tc)
    assert state(tc) is S.ONGOING
    assert tc.txns["tx"].partitions == {TP}


def test_add_partitions_refusals() -> None:
    tc = coordinator()
    pid, epoch = started(tc)
    assert tc.add_partitions("nope", pid, epoch, [TP], NOW) is E.INVALID_PRODUCER_ID_MAPPING
    assert tc.add_partitions("tx", pid + 1, epoch, [TP], NOW) is E.INVALID_PRODUCER_ID_MAPPING
    assert tc.add_partitions("tx", pid, epoch + 1, [TP], NOW) is E.PRODUCER_FENCED
    tc.add_partitions("tx", pid, epoch, [TP], NOW)
    tc.end_txn("tx", pid, epoch, True, NOW)
    assert tc.add_partitions("tx", pid, epoch, [("t", 1)], NOW) is E.CONCURRENT_TRANSACTIONS
    assert tc.add_group("tx", pid, epoch, "g", NOW) is E.CONCURRENT_TRANSACTIONS


def test_add_after_complete_starts_a_new_transaction() -> None:
    tc = coordinator()
    pid, epoch = ongoing(tc)
    tc.end_txn("tx", pid, epoch, True, NOW)
    tc.complete("tx", NOW)
    assert tc.add_partitions("tx", pid, epoch, [("t", 1)], NOW + 5) is E.NONE
    assert tc.txns["tx"].partitions == {("t", 1)}
    assert tc.txns["tx"].start_ms == NOW + 5


def test_txn_offset_commit_needs_the_group_in_the_transaction() -> None:
    tc = coordinator()
    pid, epoch = ongoing(tc)
    assert tc.check_offset_commit("tx", pid, epoch, "g") is E.INVALID_TXN_STATE
    assert tc.add_group("tx", pid, epoch, "g", NOW) is E.NONE
    assert tc.check_offset_commit("tx", pid, epoch, "g") is E.NONE
    assert tc.check_offset_commit("tx", pid, epoch + 1, "g") is E.PRODUCER_FENCED


def test_verify_partition() -> None:
    tc = coordinator()
    pid, epoch = ongoing(tc)
    assert tc.verify_partition("tx", pid, epoch, TP) is E.NONE
    assert tc.verify_partition("tx", pid, epoch, ("t", 9)) is E.INVALID_TXN_STATE
    assert tc.verify_partition("tx", pid + 1, epoch, TP) is E.INVALID_PRODUCER_ID_MAPPING
    assert tc.verify_partition(None, pid, epoch, TP) is E.NONE


# -- EndTxn (v1) -------------------------------------------------------------------------


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_prepares_then_completes(commit: bool) -> None:
    tc = coordinator()
    pid, epoch = ongoing(tc)
    tc.add_group("tx", pid, epoch, "g", NOW)
    r = tc.end_txn("tx", pid, epoch, commit, NOW)
    assert r.error is E.NONE
    assert r.markers is not None
    assert (r.markers.commit, r.markers.producer_epoch) == (commit, epoch)
    assert r.markers.partitions == (TP,)
    assert r.markers.groups == ("g",)
    assert state(tc) is (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT)
    tc.complete("tx", NOW)
    assert state(tc) is (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT)
    assert tc.txns["tx"].partitions == set()


@pytest.mark.parametrize(
    ("setup", "commit", "expected"),
    [
        ("empty", True, E.INVALID_TXN_STATE),
        ("empty", False, E.INVALID_TXN_STATE),
        ("prepare_commit", True, E.CONCURRENT_TRANSACTIONS),
        ("prepare_commit", False, E.INVALID_TXN_STATE),
        ("prepare_abort", False, E.CONCURRENT_TRANSACTIONS),
        ("prepare_abort", True, E.INVALID_TXN_STATE),
        ("complete_commit", True, E.NONE),
        ("complete_commit", False, E.INVALID_TXN_STATE),
        ("complete_abort", False, E.NONE),
        ("complete_abort", True, E.INVALID_TXN_STATE),
    ],
)
def test_end_txn_in_each_state(setup: str, commit: bool, expected: ErrorCode) -> None:
    tc = coordinator()
    pid, epoch = started(tc)
    if setup != "empty":
        tc.add_partitions("tx", pid, epoch, [TP], NOW)
        tc.end_txn("tx", pid, epoch, setup.endswith("commit"), NOW)
        if setup.startswith("complete"):
            tc.complete("tx", NOW)
    before = state(tc)
    r = tc.end_txn("tx", pid, epoch, commit, NOW)
    assert r.error is expected
    assert r.markers is None
    assert state(tc) is before


def test_end_txn_refusals() -> None:
    tc = coordinator()
    pid, epoch = ongoing(tc)
    assert tc.end_txn("nope", pid, epoch, True, NOW).error is E.INVALID_PRODUCER_ID_MAPPING
    assert tc.end_txn("tx", pid + 1, epoch, True, NOW).error is E.INVALID_PRODUCER_ID_MAPPING
    assert tc.end_txn("tx", pid, epoch + 1, True, NOW).error is E.PRODUCER_FENCED


def test_complete_outside_prepare_is_a_bug() -> None:
    tc = coordinator()
    ongoing(tc)
    with pytest.raises(IllegalTransitionError):
        tc.complete("tx", NOW)


# -- EndTxn (v2, KIP-890) --------------------------------------------------------------


def test_v2_end_txn_bumps_the_epoch_and_marks_with_the_new_one() -> None:
    tc = coordinator()
    pid, epoch = ongoing(tc)
    r = tc.end_txn("tx", pid, epoch, True, NOW, v2=True)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.NONE, pid, epoch + 1)
    assert r.markers is not None
    assert r.markers.producer_epoch == epoch + 1
    tc.complete("tx", NOW)
    assert tc.add_partitions("tx", pid, epoch, [TP], NOW) is E.PRODUCER_FENCED
    assert tc.add_partitions("tx", pid, epoch + 1, [TP], NOW) is E.NONE


def test_v2_retried_end_txn_is_answered_with_the_current_epoch() -> None:
    tc = coordinator()
    pid, epoch = ongoing(tc)
    tc.end_txn("tx", pid, epoch, False, NOW, v2=True)
    assert tc.end_txn("tx", pid, epoch, False, NOW, v2=True).error is E.CONCURRENT_TRANSACTIONS
    tc.complete("tx", NOW)
    r = tc.end_txn("tx", pid, epoch, False, NOW, v2=True)
    assert (r.error, r.producer_epoch) == (E.NONE, epoch + 1)
    assert tc.end_txn("tx", pid, epoch, True, NOW, v2=True).error is E.PRODUCER_FENCED


def test_v2_abort_of_an_empty_transaction_bumps_the_epoch() -> None:
    tc = coordinator()
    pid, epoch = started(tc)
    r = tc.end_txn("tx", pid, epoch, False, NOW, v2=True)
    assert (r.error, r.producer_epoch) == (E.NONE, epoch + 1)
    assert r.markers is not None
    assert r.markers.partitions == ()
    tc.complete("tx", NOW)
    assert state(tc) is S.COMPLETE_ABORT
    assert tc.end_txn("tx", pid, epoch + 1, True, NOW, v2=True).error is E.INVALID_TXN_STATE


def test_v2_epoch_exhaustion_rotates_the_producer_id_but_marks_with_the_old() -> None:
    tc = coordinator()
    pid, _ = ongoing(tc)
    tc.txns["tx"].producer_epoch = EXHAUSTED_EPOCH
    r = tc.end_txn("tx", pid, EXHAUSTED_EPOCH, True, NOW, v2=True)
    assert r.error is E.NONE
    assert r.producer_id != pid
    assert r.producer_epoch == 0
    assert r.markers is not None
    assert (r.markers.producer_id, r.markers.producer_epoch) == (pid, EXHAUSTED_EPOCH + 1)


# -- time ----------------------------------------------------------------------------


def test_timeout_aborts_and_fences_a_hanging_transaction() -> None:
    tc = coordinator()
    pid, epoch = ongoing(tc)
    assert tc.next_deadline_ms() == NOW + 60_000
    assert tc.expire(NOW + 59_999) == []
    (job,) = tc.expire(NOW + 60_000)
    assert (job.commit, job.producer_id, job.producer_epoch) == (False, pid, epoch + 1)
    assert state(tc) is S.PREPARE_ABORT
    tc.complete("tx", NOW + 60_000)
    assert tc.end_txn("tx", pid, epoch, True, NOW).error is E.PRODUCER_FENCED
    assert tc.add_partitions("tx", pid, epoch, [TP], NOW) is E.PRODUCER_FENCED


def test_idle_transactional_id_expires_to_dead_and_is_forgotten() -> None:
    tc = coordinator()
    tc.id_expiration_ms = 1000
    pid, _ = started(tc)
    tc.expire(NOW + 1000)
    assert "tx" not in tc.txns
    r = tc.init_producer_id("tx", 60_000, NOW)
    assert r.producer_id != pid
