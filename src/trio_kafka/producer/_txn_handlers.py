"""What each coordinator answer does to the transaction (Java's TxnRequestHandlers).

One function per API, each a `match` on the error code. The decisions follow Java's
`TransactionManager` (facts, not code), with these deliberate differences:

- InitProducerId TRANSACTION_ABORTABLE is retried (the coordinator is still finishing
  an earlier transaction of ours), not turned into an abortable error with no
  transaction to abort.
- EndTxn(abort) never ends in ABORTABLE_ERROR: when the coordinator will not abort
  (UNKNOWN_PRODUCER_ID, TRANSACTION_ABORTABLE, INVALID_PRODUCER_EPOCH after a timeout),
  an epoch-bumping InitProducerId aborts whatever is open instead.
- INVALID_PRODUCER_EPOCH from a KIP-588 coordinator (InitProducerId v4+) is the
  abortable `TransactionTimedOutError`; from older coordinators it is fatal.
"""

from __future__ import annotations

from typing import Any

from trio_kafka.errors import (
    ErrorCode,
    FatalBrokerError,
    FatalError,
    KafkaError,
    ProducerFencedError,
    error_for_code,
    error_info,
)
from trio_kafka.producer import _txn_requests as read
from trio_kafka.producer._record import AmbiguousWriteError
from trio_kafka.producer._txn_actions import TxnActions
from trio_kafka.producer._txn_state import TxnState
from trio_kafka.producer._txn_types import (
    AbortPlan,
    CoordinatorType,
    Priority,
    TopicPartition,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionOutcomeUnknownError,
    TransactionTimedOutError,
    TxnRequest,
    TxnRequestKind,
    TxnUpdate,
    Work,
    bump_work,
)

K = TxnRequestKind
E = ErrorCode
_COORDINATOR_GONE = frozenset({E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE})
_EPOCH = frozenset({E.INVALID_PRODUCER_EPOCH, E.PRODUCER_FENCED})
_UNKNOWN_PRODUCER = frozenset({E.UNKNOWN_PRODUCER_ID, E.INVALID_PRODUCER_ID_MAPPING})
_FATAL = frozenset({E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, E.INVALID_TXN_STATE})
_NO_UPDATE = TxnUpdate()


def handle_response(m: TxnActions, request: TxnRequest, response: Any, now: float) -> TxnUpdate:
    if m.state is TxnState.FATAL_ERROR:
        return _NO_UPDATE
    update = _NO_UPDATE
    match request.kind:
        case K.FIND_COORDINATOR:
            _find_coordinator(m, request, response, now)
        case K.INIT_PRODUCER_ID:
            update = _init_producer_id(m, request, response, now)
        case K.ADD_PARTITIONS:
            _add_partitions(m, request, response, now)
        case K.ADD_OFFSETS:
            _add_offsets(m, request, response, now)
        case K.TXN_OFFSET_COMMIT:
            _txn_offset_commit(m, request, response, now)
        case K.END_TXN:
            update = _end_txn(m, request, response, now)
    _settle_orphan(m, request.work)
    return update


def _settle_orphan(m: TxnActions, work: Work) -> None:
    """A caller's result whose request neither succeeded nor went back in the queue
    (the transaction failed under it) fails with the transaction's error."""
    result = work.result
    if result is None or result.done() or m.requests.is_queued(result):
        return
    if m.state in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR, TxnState.ABORTING):
        result.set_error(m.last_error or TransactionAbortedError("the transaction was aborted"))


#: Seconds before retrying a transaction's first AddPartitionsToTxn refused with
#: CONCURRENT_TRANSACTIONS (Java's ADD_PARTITIONS_RETRY_BACKOFF_MS).
ADD_PARTITIONS_RETRY_BACKOFF = 0.02


def _retriable(code: int) -> bool:
    return error_info(code).retriable or code == E.CONCURRENT_TRANSACTIONS


def _unexpected(m: TxnActions, request: TxnRequest, code: int, message: str | None) -> None:
    m.set_fatal(
        FatalBrokerError(
            code,
            f"unexpected {error_info(code).name} in {request.kind.value} response"
            + (f": {message}" if message else ""),
        )
    )


def _rediscover(m: TxnActions, work: Work, now: float) -> None:
    m.requests.lookup_coordinator(work.key_type, work.key or m.transactional_id)
    m.retry_work(work, now)


def _find_coordinator(m: TxnActions, request: TxnRequest, response: Any, now: float) -> None:
    work = request.work
    code, message, found = read.read_find_coordinator(response, work.key, request.version)
    if found is not None:
        m.requests.coordinator_found(work.key_type, work.key, found)
    elif _retriable(code):
        m.retry_work(work, now)
    elif code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        m.set_fatal(error_for_code(code, message))
    elif code in (E.GROUP_AUTHORIZATION_FAILED, E.TRANSACTION_ABORTABLE):
        m.make_abortable(error_for_code(code, message), bump=False)
    else:
        _unexpected(m, request, code, message)


def _init_producer_id(m: TxnActions, request: TxnRequest, response: Any, now: float) -> TxnUpdate:
    work, code = request.work, response.error_code
    if code == E.NONE:
        return m.producer_id_initialised(response.producer_id, response.producer_epoch)
    if code in _COORDINATOR_GONE:
        _rediscover(m, work, now)
    elif _retriable(code) or code == E.TRANSACTION_ABORTABLE:
        m.retry_work(work, now)
    elif code in _EPOCH:
        m.set_fatal(fenced(m, code, "InitProducerId"))
    elif code == E.UNKNOWN_SERVER_ERROR and request.message.producer_id >= 0:
        m.set_fatal(bump_refused(m, request))
    elif code in _FATAL or code == E.CLUSTER_AUTHORIZATION_FAILED:
        m.set_fatal(error_for_code(code))
    else:
        _unexpected(m, request, code, None)
    return _NO_UPDATE


def _add_partitions(m: TxnActions, request: TxnRequest, response: Any, now: float) -> None:
    work = request.work
    codes = read.read_add_partitions_to_txn(
        response, m.transactional_id, work.partitions, request.version
    )
    unauthorized: list[TopicPartition] = []
    failed: dict[TopicPartition, int] = {}
    for tp, code in sorted(codes.items()):
        if code == E.NONE:
            continue
        if code in _COORDINATOR_GONE:
            return _rediscover(m, work, now)
        if code == E.CONCURRENT_TRANSACTIONS and not m.partitions:
            # The transaction's first add, while the previous one's markers are being
            # written: retry soon, as Java does (ADD_PARTITIONS_RETRY_BACKOFF_MS,
            # KAFKA-5477), not after retry_backoff (100 ms and growing): on Kafka
            # that would be every short transaction's cost.
            return m.retry_work(work, now, backoff=ADD_PARTITIONS_RETRY_BACKOFF)
        if _retriable(code):
            return m.retry_work(work, now)
        if code in _EPOCH:
            return epoch_error(m, code, "AddPartitionsToTxn")
        if code in _FATAL:
            return m.set_fatal(error_for_code(code))
        if code in _UNKNOWN_PRODUCER:
            return m.make_abortable(
                error_for_code(code), skip_end=code == E.INVALID_PRODUCER_ID_MAPPING
            )
        if code == E.TRANSACTION_ABORTABLE:
            return m.make_abortable(error_for_code(code), bump=False)
        if code == E.TOPIC_AUTHORIZATION_FAILED:
            unauthorized.append(tp)
        elif code != E.OPERATION_NOT_ATTEMPTED:
            failed[tp] = code
    m.partitions_answered(work.partitions, added=not unauthorized and not failed)
    if unauthorized:
        topics = sorted({t for t, _ in unauthorized})
        m.make_abortable(
            TransactionAbortableError(
                f"not authorised to write to topic(s) {', '.join(topics)} in a transaction",
                error_for_code(E.TOPIC_AUTHORIZATION_FAILED),
            ),
            bump=False,
        )
    elif failed:
        names = ", ".join(f"{t}-{p}: {error_info(c).name}" for (t, p), c in failed.items())
        m.make_abortable(
            TransactionAbortableError(f"could not add partitions to the transaction: {names}"),
            bump=False,
        )


def _add_offsets(m: TxnActions, request: TxnRequest, response: Any, now: float) -> None:
    work, code = request.work, response.error_code
    if code == E.NONE:
        m.transaction_known()
        assert work.group is not None
        if m.state not in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
            return  # aborting: the offsets go nowhere (the result fails below)
        m.requests.enqueue(
            Work(
                K.TXN_OFFSET_COMMIT,
                Priority.ADD_PARTITIONS_OR_OFFSETS,
                work.result,
                key_type=CoordinatorType.GROUP,
                key=work.group.group_id,
                group=work.group,
                offsets=dict(work.offsets),
            )
        )
    elif code in _COORDINATOR_GONE:
        _rediscover(m, work, now)
    elif _retriable(code):
        m.retry_work(work, now)
    elif code in _UNKNOWN_PRODUCER:
        _fail(m, work, error_for_code(code), skip_end=code == E.INVALID_PRODUCER_ID_MAPPING)
    elif code in _EPOCH:
        epoch_error(m, code, "AddOffsetsToTxn")
    elif code in _FATAL:
        m.set_fatal(error_for_code(code))
    elif code in (E.GROUP_AUTHORIZATION_FAILED, E.TRANSACTION_ABORTABLE):
        _fail(m, work, error_for_code(code), bump=False)
    else:
        _unexpected(m, request, code, None)


def _fail(m: TxnActions, work: Work, error: KafkaError, **abortable: bool) -> None:
    m.make_abortable(error, **abortable)
    if work.result is not None:
        work.result.set_error(error)


def _txn_offset_commit(m: TxnActions, request: TxnRequest, response: Any, now: float) -> None:
    work = request.work
    codes = read.read_txn_offset_commit(response)
    retry = False
    for tp, code in sorted(codes.items()):
        if code == E.NONE:
            work.offsets.pop(tp, None)
        elif code in _COORDINATOR_GONE or code == E.REQUEST_TIMED_OUT:
            if not retry:
                m.requests.lookup_coordinator(CoordinatorType.GROUP, work.key)
            retry = True
        elif _retriable(code):
            retry = True
        elif code in (
            E.GROUP_AUTHORIZATION_FAILED,
            E.FENCED_INSTANCE_ID,
            E.TRANSACTION_ABORTABLE,
            E.UNKNOWN_MEMBER_ID,
            E.ILLEGAL_GENERATION,
        ):
            return _fail(m, work, error_for_code(code), bump=False)
        elif code in _EPOCH:
            return epoch_error(m, code, "TxnOffsetCommit")
        elif code in (E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, E.UNSUPPORTED_FOR_MESSAGE_FORMAT):
            return m.set_fatal(error_for_code(code))
        else:
            return _unexpected(m, request, code, None)
    if work.offsets and (retry or codes):
        m.retry_work(work, now)
    elif work.result is not None:
        work.result.set_done()


def _end_txn(m: TxnActions, request: TxnRequest, response: Any, now: float) -> TxnUpdate:
    work, code = request.work, response.error_code
    committing = work.committed
    if work.settle and code != E.NONE and code not in _COORDINATOR_GONE and not _retriable(code):
        # The resent EndTxn(commit) of an unanswered one: anything but an answer or a
        # retry means this producer can no longer settle it (fenced, or timed out).
        m.set_fatal(fenced(m, code, "EndTxn") if code in _EPOCH else error_for_code(code))
        return _NO_UPDATE
    if code == E.NONE:
        update = _NO_UPDATE
        v2 = m.end_txn_bumps_epoch()
        if v2 and request.version >= 5 and response.producer_id >= 0:
            # Transactions v2: every EndTxn bumps the epoch (or, when it is exhausted,
            # hands out a new producer id); that bump also settles an abort's bump.
            # Only under v2: a v1 coordinator answering EndTxn v5 names the current
            # epoch, and taking that for a bump restarted a failed partition's sequences
            # at 0 under the same epoch, so the broker deduplicated new records against
            # old ones (lost writes; simulations/regressions/transactional-lite-16.toml).
            update = m.end_txn_bumped(response.producer_id, response.producer_epoch)
        if (committing and work.settle) or (
            not committing and m.abort_plan is not AbortPlan.END_TXN
        ):
            # An abort that must bump (a failed batch, or an unanswered abort), or a
            # settled unanswered commit: bump, so a late copy of an old EndTxn can never
            # end a later transaction.
            m.requests.enqueue(bump_work())
        else:
            m.finish_transaction()
        return update
    if code in _COORDINATOR_GONE:
        _rediscover(m, work, now)
    elif _retriable(code):
        m.retry_work(work, now)
    elif code == E.PRODUCER_FENCED:
        m.set_fatal(fenced(m, code, "EndTxn"))
    elif code == E.INVALID_PRODUCER_EPOCH:
        epoch_error(m, code, "EndTxn", during_abort=not committing)
    elif code in _FATAL:
        m.set_fatal(error_for_code(code))
    elif code in _UNKNOWN_PRODUCER or code == E.TRANSACTION_ABORTABLE:
        if committing:
            m.make_abortable(
                error_for_code(code),
                bump=code != E.TRANSACTION_ABORTABLE,
                skip_end=code == E.INVALID_PRODUCER_ID_MAPPING,
            )
        else:
            m.requests.enqueue(bump_work())
    else:
        _unexpected(m, request, code, None)
    return _NO_UPDATE


# How many times an EndTxn resent to settle an unanswered one may go unanswered in turn
# before the producer bumps the epoch instead. Tansu drops the connection at every resend
# of an EndTxn whose first copy was cut (seen in tests/chaos, 120 s of resends); on Kafka
# the bump is then fenced if the transaction is still open: fatal, never silent.
SETTLE_ATTEMPTS = 5


def end_txn_unknown(m: TxnActions, work: Work, error: KafkaError, now: float) -> None:
    """EndTxn left and no answer came back (`handle_failure` with `sent=True`)."""
    m.requests.lookup_coordinator(CoordinatorType.TRANSACTION, m.transactional_id)
    if work.settle:
        if work.attempts >= SETTLE_ATTEMPTS:
            m.requests.enqueue(bump_work())
        else:
            m.retry_work(work, now)  # the resent EndTxn went unanswered too: again, later
        return
    if not work.committed:
        # Resend the abort at the same epoch (Kafka answers a repeated abort; a v2
        # coordinator recognises the retry), then bump: the unanswered copy may still
        # arrive and must not abort the next transaction (sim transactional 3011302).
        # Not a bump at once: Kafka fences a bump that finds the transaction open
        # (sim transactional 3001759).
        m.escalate(AbortPlan.END_TXN_THEN_BUMP)
        m.retry_work(Work(K.END_TXN, Priority.END_TXN, committed=False, settle=True), now)
        return
    m.commit_outcome_unknown(error, now)


def handle_failure(
    m: TxnActions, request: TxnRequest, error: KafkaError, now: float, sent: bool
) -> TxnUpdate:
    """No answer: connection lost or request timeout (`sent`: it may have been
    processed), or the request never left."""
    work = request.work
    if sent and work.kind is K.END_TXN:
        end_txn_unknown(m, work, error, now)
        return _NO_UPDATE
    if sent and work.kind in (K.ADD_PARTITIONS, K.ADD_OFFSETS):
        m.transaction_known()  # it may have been applied: EndTxn must go
        work.unanswered = True
    if work.kind is not K.FIND_COORDINATOR:
        m.requests.lookup_coordinator(work.key_type, work.key or m.transactional_id)
    m.retry_work(work, now)
    return _NO_UPDATE


def batch_failed(m: TxnActions, tp: TopicPartition, error: KafkaError, sequenced: bool) -> None:
    """A batch of the transaction ended without success: fatal if its error is, the
    transaction timed out on INVALID_PRODUCER_EPOCH (KIP-588), else abortable (with a
    bump when the batch had a sequence number: the sequences may have a gap)."""
    if isinstance(error, AmbiguousWriteError):
        error = error.cause
    code = getattr(error, "code", None)
    where = f"a batch for {tp[0]}-{tp[1]}"
    if isinstance(error, FatalError):
        m.set_fatal(error)
    elif code == ErrorCode.INVALID_PRODUCER_EPOCH:
        m.make_abortable(timed_out(m, where, error), skip_end=True)
    else:
        m.make_abortable(
            TransactionAbortableError(f"{where} failed: {error}", error),
            bump=sequenced,
            skip_end=code == ErrorCode.INVALID_PRODUCER_ID_MAPPING,
        )


def outcome_unknown(m: TxnActions, error: KafkaError) -> TransactionOutcomeUnknownError:
    return TransactionOutcomeUnknownError(
        f"transactional id {m.transactional_id!r}: EndTxn(commit) with "
        f"producer id {m.producer_id} epoch {m.producer_epoch} got no "
        f"answer ({error}); the transaction may or may not be committed. The "
        "producer resends it at the same epoch, then bumps the epoch, before "
        "the next transaction",
        error,
    )


def timed_out(m: TxnActions, where: str, cause: KafkaError) -> TransactionTimedOutError:
    return TransactionTimedOutError(
        f"transactional id {m.transactional_id!r}: {where} was refused with "
        f"INVALID_PRODUCER_EPOCH (epoch {m.producer_epoch}): the coordinator aborted the "
        "transaction and bumped the epoch, because it outlived "
        f"transaction_timeout={m.transaction_timeout}s or because another producer with "
        "the same transactional id took over; abort() and retry in a new transaction (a "
        "takeover then raises ProducerFencedError)",
        cause,
    )


def fenced(m: TxnActions, code: int, what: str) -> ProducerFencedError:
    if isinstance(m.last_error, TransactionTimedOutError):
        # The same answers follow a takeover (the new instance's InitProducerId bumps
        # the epoch too): both causes are named, the takeover first, being the usual.
        why = (
            "another producer with the same transactional id took over, or the "
            "coordinator aborted a transaction that outlived "
            f"transaction_timeout={m.transaction_timeout}s and bumped the epoch (then "
            "open a new producer, and keep transactions shorter than transaction_timeout)"
        )
    else:
        why = (
            "another producer with the same transactional id took over, or the "
            "coordinator aborted a transaction that outlived "
            f"transaction_timeout={m.transaction_timeout}s"
        )
    return ProducerFencedError(
        ErrorCode.PRODUCER_FENCED,
        f"transactional id {m.transactional_id!r}, producer id {m.producer_id} "
        f"epoch {m.producer_epoch}: {what} answered {error_info(code).name}; {why}",
    )


def bump_refused(m: TxnActions, request: TxnRequest) -> ProducerFencedError:
    """UNKNOWN_SERVER_ERROR for an InitProducerId naming our id and epoch (KIP-360): the
    bump asked after the coordinator refused our epoch, the usual path of an instance
    whose transactional id another one took over. Kafka answers PRODUCER_FENCED; Tansu
    answers every bump so (docs/compatibility.md). Said as the takeover it is (logged at
    WARNING), not as a server failure at ERROR on each normal failover."""
    return ProducerFencedError(
        ErrorCode.PRODUCER_FENCED,
        f"transactional id {m.transactional_id!r}, producer id "
        f"{request.message.producer_id} epoch {request.message.producer_epoch}: the "
        "coordinator refused this producer's epoch, then its epoch bump (InitProducerId "
        "answered UNKNOWN_SERVER_ERROR, as Tansu answers any bump): another producer with "
        "the same transactional id most likely took over, and this one stops",
    )


def epoch_error(m: TxnActions, code: int, what: str, *, during_abort: bool = False) -> None:
    """INVALID_PRODUCER_EPOCH / PRODUCER_FENCED from the coordinator."""
    kip588 = (m.requests.version_of(K.INIT_PRODUCER_ID) or 0) >= 4
    if code == ErrorCode.INVALID_PRODUCER_EPOCH and kip588:
        if during_abort:
            m.escalate(AbortPlan.BUMP_INSTEAD)
            m.requests.enqueue(bump_work())
        else:
            m.make_abortable(timed_out(m, what, error_for_code(code)), skip_end=True)
    else:
        m.set_fatal(fenced(m, code, what))
