"""What a transaction sends next: the manager's choice of coordinator request.

`next_request` takes the queue's head (`_txn_queue.TxnRequestQueue`: priority order,
backoff) and decides for the transaction: EndTxn and the epoch bump wait until every
batch is settled (`waits_for_batches`); an EndTxn for a transaction the coordinator
never heard of ends locally, or gives way to the bump an abort needs (`end_locally`);
a request whose coordinator is unknown first queues a FindCoordinator; an
AddPartitionsToTxn takes the partitions waiting for one. `retry_work` and
`drop_queued` decide what an aborting transaction still sends. Each sees the manager as
`TxnActions` (producer/_txn_actions.py) and acts through its public actions.
"""

from __future__ import annotations

from trio_kafka.errors import ErrorCode, FatalBrokerError, KafkaError
from trio_kafka.producer._txn_actions import TxnActions
from trio_kafka.producer._txn_state import TxnState
from trio_kafka.producer._txn_types import (
    AbortPlan,
    Priority,
    TransactionAbortedError,
    TxnRequest,
    TxnRequestKind,
    Work,
    bump_work,
)

K = TxnRequestKind


def next_request(m: TxnActions, now: float, batches_unfinished: bool) -> TxnRequest | None:
    """The next coordinator request to send, or None (nothing to do now)."""
    requests = m.requests
    if requests.in_flight is not None or m.state is TxnState.FATAL_ERROR:
        return None
    if (
        m.new_partitions
        and m.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING)
        and not requests.has_queued(K.ADD_PARTITIONS)
    ):
        requests.enqueue(Work(K.ADD_PARTITIONS, Priority.ADD_PARTITIONS_OR_OFFSETS))
    while (work := requests.head()) is not None:
        if work.not_before > now or waits_for_batches(m, work, batches_unfinished):
            return None
        if work.kind is K.END_TXN and end_locally(m, work):
            continue
        coordinator = None
        if work.kind is not K.FIND_COORDINATOR:
            coordinator = requests.coordinator_for(work)
            if coordinator is None:
                requests.lookup_coordinator(work.key_type, work.key or m.transactional_id)
                continue
        version = requests.version_of(work.kind)
        if version is None or (work.kind is K.FIND_COORDINATOR and version < 1):
            m.set_fatal(
                FatalBrokerError(
                    ErrorCode.UNSUPPORTED_VERSION,
                    f"the broker does not support {work.kind.value} at a version "
                    "a transactional producer can use",
                )
            )
            continue
        if work.kind is K.ADD_PARTITIONS and not work.partitions:
            work.partitions = m.take_new_partitions()
            if not work.partitions:
                requests.remove(work)
                continue
        ids = (m.transactional_id, m.producer_id, m.producer_epoch)
        return requests.start(work, coordinator, version, ids, m.transaction_timeout)
    return None


def waits_for_batches(m: TxnActions, work: Work, batches_unfinished: bool) -> bool:
    """EndTxn and the epoch bump go only once every batch is settled (Java)."""
    ending = work.kind is K.END_TXN or (work.kind is K.INIT_PRODUCER_ID and work.bump)
    return ending and (batches_unfinished or bool(m.pending_partitions))


def end_locally(m: TxnActions, work: Work) -> bool:
    """EndTxn needs no request: nothing was added, or the bump replaces it."""
    if work.settle:
        return False  # the transaction is cleared, but the coordinator may hold it
    plan = m.abort_plan
    if plan is AbortPlan.BUMP_INSTEAD or (
        plan is AbortPlan.END_TXN_THEN_BUMP and not m.transaction_started
    ):
        m.requests.remove(work)
        m.requests.enqueue(bump_work())
        return True
    if m.transaction_started:
        return False
    m.requests.remove(work)
    m.finish_transaction()
    return True


def poll_delay(m: TxnActions, now: float, batches_unfinished: bool) -> float | None:
    """Seconds until `next_request` may have something: 0 means call it now.

    None when only an event can change that: nothing queued, a request in flight
    (its answer wakes the driver), or EndTxn / the bump waiting for the batches (a
    batch settling wakes it). Pass the same `now` and `batches_unfinished` as to
    `next_request`: a due head is then never mistaken for a blocked one (that
    mix-up made the driver wait forever; simulations/regressions/
    transactional-lite-1100.toml)."""
    head = m.requests.head()
    if head is None or m.requests.in_flight is not None:
        return None
    if head.not_before <= now and waits_for_batches(m, head, batches_unfinished):
        return None
    return max(0.0, head.not_before - now)


def retry_work(m: TxnActions, work: Work, now: float, backoff: float | None = None) -> None:
    """Queue `work` again after `backoff` (None: retry_backoff, growing), unless the
    transaction is aborting and it adds nothing the abort needs."""
    if (
        m.state in (TxnState.ABORTING, TxnState.ABORTABLE_ERROR)
        and work.kind in (K.ADD_PARTITIONS, K.ADD_OFFSETS, K.TXN_OFFSET_COMMIT)
        and not (work.kind is K.ADD_PARTITIONS and work.unanswered)
    ):
        # An AddPartitionsToTxn that went unanswered is resent even so (Java): until
        # one is answered the coordinator's state is unknown, and Kafka answers a v1
        # EndTxn(abort) INVALID_TXN_STATE (fatal) in Empty or CompleteCommit, where a
        # lost add leaves it (chaos transactional on mock, seed 1).
        m.pending_partitions -= work.partitions
        if work.result is not None:
            work.result.set_error(TransactionAbortedError("the transaction is being aborted"))
        return
    m.requests.retry(work, now, backoff)


def drop_queued(m: TxnActions, error: KafkaError) -> None:
    """Drop queued transaction work (keep coordinator lookups, bumps and the resend
    of an unanswered AddPartitionsToTxn: see `retry_work`)."""
    dropped = m.requests.keep_only(
        lambda work: (
            work.kind is K.FIND_COORDINATOR
            or (work.kind is K.INIT_PRODUCER_ID and work.bump)
            or (work.kind is K.ADD_PARTITIONS and work.unanswered)
        )
    )
    for work in dropped:
        m.pending_partitions -= work.partitions
        if work.result is not None:
            work.result.set_error(error)
