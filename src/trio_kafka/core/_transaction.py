"""The transaction of a transactional producer (KIP-98, KIP-360, KIP-890): one sans-IO
state machine, Java's TransactionManager in one class.

Theory of operation
-------------------
`TransactionManager` owns what a transactional producer knows about its transaction: the
transactional id, the producer id and epoch, the coordinators (the transaction
coordinator of our id; the group coordinator of each consumer group whose offsets we
commit), the partitions added to the transaction, and a queue of coordinator requests.
It never does I/O: the caller's methods (`init`, `begin`, `commit`, `abort`,
`send_offsets`) change the state and queue work; the driver takes requests out with
`next_request(now)` and feeds back `handle_response` or `handle_failure`.

The state is a `TxnState`, and it moves only by an event (`TxnEvent`) through one table,
`TABLE`: `(state, event) -> (next state, effects)`, applied by `process_event`, as h11's
`_state.py` does for HTTP. An event the table lacks for the current state is refused
(`IllegalTransactionStateError`). The effects (`Effect`) are everything a move does
besides the state: the caller's result in progress (`pending_result`: created by
init/commit/abort, completed or failed by the move that ends it), the transaction's
partitions and whether the coordinator may know of it (`transaction_started`), whether
it runs under transactions v2 (`transaction_v2`, decided at BEGIN), the error kept, and
the coordinator requests a move queues or drops. One fact changes between moves, in one
named method: `transaction_known`.

How an abort must end the transaction (`AbortPlan`: EndTxn; EndTxn then an epoch bump;
or the bump alone) is part of the state: the failing and aborting states come in three,
one per plan (ABORTABLE_ERROR, ABORTABLE_ERROR_THEN_BUMP, ABORTABLE_ERROR_BY_BUMP, and
ABORTING, ABORTING_THEN_BUMP, ABORTING_BY_BUMP), `TxnState.abort_plan` says which, and
ABORT keeps the plan. The plan only ever grows until the transaction ends: `escalate`
moves by NEEDS_BUMP or EPOCH_REFUSED to the state with the larger plan, and the table
has no move back (only to READY, when the transaction is over).

The life of a transaction: UNINITIALIZED -INIT-> INITIALIZING (FindCoordinator,
InitProducerId) -INITIALISED-> READY -BEGIN-> IN_TRANSACTION (partitions added as
batches become ready; offsets sent) -COMMIT or ABORT-> COMMITTING or ABORTING (EndTxn)
-ENDED-> READY. Errors:

- abortable (a batch failed, a topic is not authorised, TRANSACTION_ABORTABLE...):
  FAILED -> ABORTABLE_ERROR; `commit()` raises the error, `abort()` works and the next
  transaction may begin. After a failed batch the sequences may have gaps, so the abort
  also bumps the epoch (NEEDS_BUMP -> ABORTABLE_ERROR_THEN_BUMP, -ABORT->
  ABORTING_THEN_BUMP; KIP-360: InitProducerId with the current id and epoch, after
  EndTxn; the abort ends with INITIALISED). Transactions v2 (KIP-890) need no extra
  request: EndTxn itself bumps (ABORTING_THEN_BUMP -ENDED-> READY).
- fatal (PRODUCER_FENCED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_TXN_STATE, ...):
  FATAL -> FATAL_ERROR, from any state; every later call raises the same error; close
  the producer.
- ambiguous: an EndTxn(commit) that left and got no answer. OUTCOME_UNKNOWN: the commit
  result fails with `TransactionOutcomeUnknownError` and the manager goes COMMITTING ->
  INITIALIZING, resends the same EndTxn at the same epoch until the coordinator answers
  (Kafka answers a repeated EndTxn from the transaction's state, and a v2 coordinator
  recognises the retry), then bumps the epoch, so a late EndTxn (still in the network,
  or retried by a broker) carries a fenced epoch and can never commit a later
  transaction (KAFKA-17754, the Jepsen/Bufstream finding). Not a bump at once: Kafka's
  coordinator fences a KIP-360 bump that finds the transaction still open
  (prepareFenceProducerEpoch keeps no last epoch), which the simulator found once the
  mock broker answered as Kafka does (transactional seed 3001759). `begin()` is refused
  until that is done: await `init()` (it returns the bump's result). An EndTxn(abort)
  without answer is resent the same way.
- handed off (KIP-939's prepared transaction): HAND_OFF leaves the open transaction to
  another process, whose manager ADOPTs it instead of INIT and ends it.

INVALID_PRODUCER_EPOCH (decision, after KIP-588): from a partition leader (a failed
batch) it is `TransactionTimedOutError`, abortable: the broker aborted our transaction
after `transaction_timeout` and bumped the epoch. `abort()` then skips EndTxn (our
epoch is stale) and sends InitProducerId with the old id and epoch. Kafka's coordinator
fenced that epoch when it aborted the timed-out transaction and answers PRODUCER_FENCED
(fatal), as it does when another producer took over; the error names the timeout it saw.
From the coordinator it is the same when InitProducerId v4+ is negotiated (those
coordinators say PRODUCER_FENCED for a real fence), and fatal otherwise (older
coordinators used it for fencing), as Java does.

Requests are sent one at a time (`TxnRequestQueue`, the manager's `requests`), in Java's
priority order: FindCoordinator, then InitProducerId, then AddPartitionsToTxn /
AddOffsetsToTxn / TxnOffsetCommit, then EndTxn, then an epoch-bumping InitProducerId;
equal priorities in queue order. EndTxn and the bump wait until the producer has no
unfinished batch. An EndTxn for a transaction that added nothing is completed locally.
NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE forget the coordinator (FindCoordinator goes
first again); COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS and other retriable
codes retry after an exponential backoff. A response to anything but the request in
flight is stale and ignored. What each answer means follows Java's TxnRequestHandlers
(facts, not code), with these deliberate differences:

- InitProducerId TRANSACTION_ABORTABLE is retried (the coordinator is still finishing
  an earlier transaction of ours), not turned into an abortable error with no
  transaction to abort.
- EndTxn(abort) never ends in ABORTABLE_ERROR: when the coordinator will not abort
  (UNKNOWN_PRODUCER_ID, TRANSACTION_ABORTABLE, INVALID_PRODUCER_EPOCH after a timeout),
  an epoch-bumping InitProducerId aborts whatever is open instead.
- INVALID_PRODUCER_EPOCH from a KIP-588 coordinator (InitProducerId v4+) is the
  abortable `TransactionTimedOutError`; from older coordinators it is fatal.

Transactions v2 (KIP-890 part 2), when the driver reports `transaction.version` >= 2
and EndTxn v5+ is negotiated: partitions join the transaction with the Produce request
(no AddPartitionsToTxn), and EndTxn answers with the producer id and epoch to use next.

The request shapes per version: FindCoordinator v1-3 one `key`, v4+ `coordinator_keys`
(KIP-699); InitProducerId v3+ carries the current id and epoch (KIP-360);
AddPartitionsToTxn v0-3 the client form, v4+ the batched form Kafka reserves for
brokers (capped at 3, as Java does); EndTxn v5+ answers with the next epoch (KIP-890);
TxnOffsetCommit v3+ group membership (KIP-447).

The sequencer and the driver
----------------------------
The manager is the idempotent `Sequencer`'s hooks (`Sequencer(is_transactional=True,
hooks=manager)`): the core asks it, for every ready batch, whether it may be drained
(`may_drain`: a partition must be in the transaction first, and nothing drains while the
transaction is failing: the driver fails those batches), and tells it of every batch
sequenced and failed. It asks only of state the manager owns; the driver looks at
`needs_coordinator` after each pass of the sender to know its loop has work. The manager
owns InitProducerId (the core never asks for a producer id or an epoch bump); its
`TxnUpdate.new_producer_id` is installed with `core.set_producer_id`. A KIP-360 bump is
never done mid-transaction (`defer_bump`: the transaction becomes abortable, the abort
bumps). The driver (client/_transactions.py), in outline::

    txn = TransactionManager.from_config(config)
    core = ProducerCore(config, rng, sequencing=Sequencer(is_transactional=True, hooks=txn))
    txn.set_api_versions(info.negotiated, transaction_version=info.finalized_level(
        "transaction.version"))                      # after ApiVersions, and on changes

    # the coordinator loop, each pass:
    if (error := txn.undrained_error()) is not None: core.fail_all(error)
    request = txn.next_request(now, batches_unfinished=core.has_unfinished)
    if request is not None:   # request.coordinator: a Coordinator, or None = any node
        try: response = await send(request.message, request.version)
        except KafkaError as e:   # sent=False when it never left
            update = txn.handle_failure(request, e, now, sent=...)
        else: update = txn.handle_response(request, response, now)
        if update.new_producer_id: core.set_producer_id(*update.new_producer_id, now)
    sleep until txn.poll_delay(now), a batch completes, or the user calls something.

    # user calls: `await` = wait for TxnResult.add_done_callback, then .result()
    await txn.init(); txn.begin(); send(...); await txn.send_offsets(offsets, group)
    await txn.commit()   # or await txn.abort()
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from trio_kafka.core._backoff import ExponentialBackoff
from trio_kafka.core._batch import ProducerBatch
from trio_kafka.core._record import AmbiguousWriteError
from trio_kafka.errors import (
    ErrorCode,
    FatalBrokerError,
    FatalError,
    IllegalTransactionStateError,
    KafkaError,
    ProducerClosedError,
    ProducerFencedError,
    TopicAuthorizationError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionalIdAuthorizationError,
    TransactionOutcomeUnknownError,
    TransactionTimedOutError,
    error_for_code,
    error_info,
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

# -- values -------------------------------------------------------------------------------

TopicPartition = tuple[str, int]


class CoordinatorType(enum.IntEnum):
    """FindCoordinator's KeyType."""

    GROUP = 0
    TRANSACTION = 1


@attrs.frozen(slots=True)
class Coordinator:
    """A broker found by FindCoordinator (it may not be in the metadata yet)."""

    node_id: int
    host: str
    port: int


@attrs.frozen(slots=True)
class GroupMetadata:
    """The consumer's group membership, for TxnOffsetCommit v3+ fencing (KIP-447).

    Defaults are the "no membership" values: with them the group coordinator fences by
    transactional id only (the pre-KIP-447 behaviour).
    """

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


@attrs.frozen(slots=True)
class OffsetAndMetadata:
    """A consumed position to commit with the transaction: the next offset to read."""

    offset: int
    metadata: str | None = None
    leader_epoch: int = -1


class TxnResult:
    """The outcome of `init()`, `commit()`, `abort()` or `send_offsets()`.

    Sans-IO: the driver waits for it with `add_done_callback` (setting a trio Event) and
    then calls `result()`, which returns None or raises the error.
    """

    __slots__ = ("_callbacks", "error", "is_done", "operation")

    def __init__(self, operation: str) -> None:
        self.operation = operation
        self.is_done = False
        # The error the operation failed with; None while pending or on success.
        self.error: KafkaError | None = None
        self._callbacks: list[Callable[[TxnResult], object]] = []

    def __repr__(self) -> str:
        if not self.is_done:
            return f"<TxnResult {self.operation} pending>"
        return f"<TxnResult {self.operation} {'ok' if self.error is None else repr(self.error)}>"

    def done(self) -> bool:
        return self.is_done

    def result(self) -> None:
        """Raise the error the operation failed with (call once `done()`)."""
        if not self.is_done:
            raise RuntimeError(f"{self.operation} has not finished yet")
        if self.error is not None:
            raise self.error

    def add_done_callback(self, fn: Callable[[TxnResult], object]) -> None:
        """Call `fn(self)` when the result is set (at once if it is)."""
        if self.is_done:
            fn(self)
        else:
            self._callbacks.append(fn)

    def _set(self, error: KafkaError | None) -> bool:
        if self.is_done:
            return False
        self.is_done = True
        self.error = error
        callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn(self)
        return True

    def set_done(self) -> bool:
        return self._set(None)

    def set_error(self, error: KafkaError) -> bool:
        return self._set(error)


class TxnRequestKind(enum.Enum):
    FIND_COORDINATOR = "FindCoordinator"
    INIT_PRODUCER_ID = "InitProducerId"
    ADD_PARTITIONS = "AddPartitionsToTxn"
    ADD_OFFSETS = "AddOffsetsToTxn"
    TXN_OFFSET_COMMIT = "TxnOffsetCommit"
    END_TXN = "EndTxn"


class AbortPlan(enum.IntEnum):
    """How the open transaction must end if it aborts: what a failing or aborting
    `TxnState` says (`TxnState.abort_plan`). Ordered: it only ever grows until the
    transaction is finished (`TransactionManager.escalate`)."""

    #: EndTxn(abort) at the current epoch.
    END_TXN = 0
    #: EndTxn(abort), then an epoch bump (KIP-360: a failed batch left a sequence gap, or
    #: an unanswered abort may still arrive and must not end the next transaction).
    END_TXN_THEN_BUMP = 1
    #: No EndTxn: the coordinator no longer accepts our epoch or id, and the bump alone
    #: aborts the transaction.
    BUMP_INSTEAD = 2


class Priority(enum.IntEnum):
    """Java's order: lower goes first."""

    FIND_COORDINATOR = 0
    INIT_PRODUCER_ID = 1
    ADD_PARTITIONS_OR_OFFSETS = 2
    END_TXN = 3
    EPOCH_BUMP = 4


@attrs.define(eq=False)
class Work:
    """A queued coordinator request (a retry re-queues the same object)."""

    kind: TxnRequestKind
    priority: Priority
    result: TxnResult | None = None
    # Queue order among equal priorities; set by `_enqueue`.
    seq: int = 0
    not_before: float = 0.0
    attempts: int = 0
    # FindCoordinator: what to look up; others: whose coordinator they go to.
    key_type: CoordinatorType = CoordinatorType.TRANSACTION
    key: str = ""
    bump: bool = False  # InitProducerId: bump the current epoch
    committed: bool = False  # EndTxn
    # EndTxn resent at the same epoch after one went unanswered, to settle its outcome
    # before the epoch bump (a KIP-360 bump while the transaction may still be open is
    # fenced by Kafka's coordinator: prepareFenceProducerEpoch leaves no last epoch).
    settle: bool = False
    partitions: frozenset[TopicPartition] = frozenset()  # AddPartitionsToTxn
    # AddPartitionsToTxn sent without an answer: the coordinator may or may not hold the
    # partitions, so an abort resends it before EndTxn (as Java does), never drops it.
    unanswered: bool = False
    group: GroupMetadata | None = None  # AddOffsetsToTxn, TxnOffsetCommit
    offsets: dict[TopicPartition, OffsetAndMetadata] = attrs.field(factory=dict)


def bump_work() -> Work:
    """The epoch-bumping InitProducerId (KIP-360), queued after everything else."""
    return Work(TxnRequestKind.INIT_PRODUCER_ID, Priority.EPOCH_BUMP, bump=True)


@attrs.define(eq=False)
class TxnRequest:
    """A coordinator request to send: `message` at `version` to `coordinator` (None:
    any node, e.g. the least loaded). Give the same object back to `handle_*`."""

    kind: TxnRequestKind
    message: Any
    version: int
    coordinator: Coordinator | None
    work: Work
    producer_id: int = -1
    producer_epoch: int = -1


@attrs.frozen(slots=True)
class TxnUpdate:
    """What the driver must do after `handle_response` / `handle_failure`."""

    #: Install this (producer id, epoch) in the producer core (`set_producer_id`).
    new_producer_id: tuple[int, int] | None = None
    #: The answer was for a request no longer in flight and was ignored.
    stale: bool = False


# -- the states, the events and the one table ---------------------------------------------


class TxnState(enum.Enum):
    """Where the transaction is; a failing or aborting state also says how the abort
    ends it (`abort_plan`, module doc)."""

    UNINITIALIZED = "uninitialized"
    INITIALIZING = "initializing"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    COMMITTING = "committing"
    #: Aborting with EndTxn(abort).
    ABORTING = "aborting"
    #: Aborting with EndTxn(abort), then an epoch bump (under transactions v2 the
    #: EndTxn's own bump does).
    ABORTING_THEN_BUMP = "aborting, then bumping the epoch"
    #: Aborting with an epoch bump alone: the coordinator refuses our epoch or id.
    ABORTING_BY_BUMP = "aborting by an epoch bump"
    #: An abortable error (`commit()` raises it); the abort sends EndTxn(abort).
    ABORTABLE_ERROR = "abortable error"
    #: An abortable error whose abort must also bump the epoch (KIP-360: a failed batch
    #: left a sequence gap).
    ABORTABLE_ERROR_THEN_BUMP = "abortable error, the abort bumps the epoch"
    #: An abortable error whose abort is an epoch bump alone: the coordinator no longer
    #: accepts our epoch or id (the transaction timed out, KIP-588).
    ABORTABLE_ERROR_BY_BUMP = "abortable error, aborted by an epoch bump"
    FATAL_ERROR = "fatal error"
    #: The open transaction was handed to another process, which ends it (`adopt`, then
    #: commit or abort there): this producer sends, commits and aborts nothing more.
    HANDED_OFF = "handed off"

    @property
    def abort_plan(self) -> AbortPlan:
        """How an abort from this state ends the transaction (EndTxn from any state
        that is not failing or aborting with more)."""
        return _ABORT_PLANS.get(self, AbortPlan.END_TXN)

    @property
    def is_abortable_error(self) -> bool:
        """An abortable error: `commit()` raises it, `abort()` ends the transaction."""
        return self in _ABORTABLE_ERRORS

    @property
    def is_aborting(self) -> bool:
        return self in _ABORTING_STATES


class TxnEvent(enum.Enum):
    """What moves the state (the module doc tells the life of a transaction)."""

    INIT = "init"  # init()
    INITIALISED = "InitProducerId answered"  # the initialisation, or an abort's bump
    BEGIN = "begin"  # begin()
    ADOPT = "adopt"  # adopt(): a transaction another process handed off
    COMMIT = "commit"  # commit()
    ABORT = "abort"  # abort()
    ENDED = "ended"  # EndTxn answered (or nothing to end): the transaction is over
    OUTCOME_UNKNOWN = "commit outcome unknown"  # EndTxn(commit) got no answer
    FAILED = "failed"  # an abortable error
    # How the abort must end the transaction grows (`escalate`):
    NEEDS_BUMP = "the abort must bump the epoch"  # a sequence gap, an abort unanswered
    EPOCH_REFUSED = "the coordinator refuses our epoch"  # the abort is a bump alone
    FATAL = "fatal"  # a fatal error, or close()
    HAND_OFF = "hand off"  # hand_off()


class Effect(enum.Enum):
    """What a move does besides the state, applied by `process_event` in this order."""

    #: Partitions waiting for AddPartitionsToTxn are forgotten (an abort adds nothing).
    FORGET_NEW_PARTITIONS = enum.auto()
    #: Transactions v2 or v1 for the transaction that begins (fixed until it ends).
    DECIDE_VERSION = enum.auto()
    #: The adopted transaction is v1 (the coordinator knows its partitions).
    VERSION_1 = enum.auto()
    #: No partitions, and the coordinator knows of no transaction.
    CLEAR = enum.auto()
    #: The coordinator knows of this transaction (EndTxn must be sent).
    KNOWN = enum.auto()
    #: The event's error is kept (raised by later calls).
    KEEP_ERROR = enum.auto()
    FORGET_ERROR = enum.auto()
    #: Queued requests the failing transaction no longer needs fail with the error.
    DROP_QUEUED = enum.auto()
    #: Every queued request fails with the error (the transaction is over for good).
    FAIL_QUEUED = enum.auto()
    #: A new caller's result for the operation the event starts (`pending_result`).
    NEW_RESULT = enum.auto()
    QUEUE_INIT_PRODUCER_ID = enum.auto()
    QUEUE_END_TXN = enum.auto()
    #: The result in progress completes, or fails with the event's error.
    COMPLETE_RESULT = enum.auto()
    FAIL_RESULT = enum.auto()


S, Ev, X = TxnState, TxnEvent, Effect
_ENDED = frozenset({X.CLEAR, X.FORGET_ERROR, X.COMPLETE_RESULT})
_ABORT = frozenset({X.FORGET_NEW_PARTITIONS, X.DROP_QUEUED, X.NEW_RESULT, X.QUEUE_END_TXN})
_FAILED = frozenset({X.KEEP_ERROR, X.DROP_QUEUED, X.FAIL_RESULT})
_FATAL = frozenset({X.KEEP_ERROR, X.FAIL_QUEUED, X.FAIL_RESULT})

#: Every move of the state: (state, event) -> (next state, effects). Nothing else
#: changes the state; an event missing here for the current state is refused.
TABLE: Mapping[tuple[TxnState, TxnEvent], tuple[TxnState, frozenset[Effect]]] = {
    (S.UNINITIALIZED, Ev.INIT): (
        S.INITIALIZING,
        frozenset({X.NEW_RESULT, X.QUEUE_INIT_PRODUCER_ID}),
    ),
    (S.UNINITIALIZED, Ev.ADOPT): (
        S.IN_TRANSACTION,
        frozenset({X.VERSION_1, X.CLEAR, X.KNOWN}),
    ),
    (S.INITIALIZING, Ev.INITIALISED): (S.READY, frozenset({X.COMPLETE_RESULT})),
    (S.READY, Ev.BEGIN): (S.IN_TRANSACTION, frozenset({X.DECIDE_VERSION, X.CLEAR})),
    (S.IN_TRANSACTION, Ev.COMMIT): (
        S.COMMITTING,
        frozenset({X.NEW_RESULT, X.QUEUE_END_TXN}),
    ),
    (S.IN_TRANSACTION, Ev.ABORT): (S.ABORTING, _ABORT),
    (S.IN_TRANSACTION, Ev.FAILED): (S.ABORTABLE_ERROR, _FAILED),
    (S.IN_TRANSACTION, Ev.HAND_OFF): (S.HANDED_OFF, frozenset()),
    (S.COMMITTING, Ev.ENDED): (S.READY, _ENDED),
    (S.COMMITTING, Ev.FAILED): (S.ABORTABLE_ERROR, _FAILED),
    # Settle the unanswered EndTxn, then re-initialise with an epoch bump.
    (S.COMMITTING, Ev.OUTCOME_UNKNOWN): (
        S.INITIALIZING,
        frozenset({X.CLEAR, X.FAIL_RESULT, X.NEW_RESULT}),
    ),
    # How the abort must end only grows (`escalate`): no move back to a smaller plan.
    (S.ABORTABLE_ERROR, Ev.NEEDS_BUMP): (S.ABORTABLE_ERROR_THEN_BUMP, frozenset()),
    (S.ABORTABLE_ERROR, Ev.EPOCH_REFUSED): (S.ABORTABLE_ERROR_BY_BUMP, frozenset()),
    (S.ABORTABLE_ERROR_THEN_BUMP, Ev.EPOCH_REFUSED): (S.ABORTABLE_ERROR_BY_BUMP, frozenset()),
    (S.ABORTING, Ev.NEEDS_BUMP): (S.ABORTING_THEN_BUMP, frozenset()),
    (S.ABORTING, Ev.EPOCH_REFUSED): (S.ABORTING_BY_BUMP, frozenset()),
    (S.ABORTING_THEN_BUMP, Ev.EPOCH_REFUSED): (S.ABORTING_BY_BUMP, frozenset()),
    # The abort keeps the plan.
    (S.ABORTABLE_ERROR, Ev.ABORT): (S.ABORTING, _ABORT),
    (S.ABORTABLE_ERROR_THEN_BUMP, Ev.ABORT): (S.ABORTING_THEN_BUMP, _ABORT),
    (S.ABORTABLE_ERROR_BY_BUMP, Ev.ABORT): (S.ABORTING_BY_BUMP, _ABORT),
    (S.ABORTING, Ev.ENDED): (S.READY, _ENDED),
    # Transactions v2: the EndTxn's own epoch bump was the one the abort needed.
    (S.ABORTING_THEN_BUMP, Ev.ENDED): (S.READY, _ENDED),
    # The epoch bump an abort needed has answered: it ended the transaction.
    (S.ABORTING_THEN_BUMP, Ev.INITIALISED): (S.READY, _ENDED),
    (S.ABORTING_BY_BUMP, Ev.INITIALISED): (S.READY, _ENDED),
    **{(state, Ev.FATAL): (S.FATAL_ERROR, _FATAL) for state in S if state is not S.FATAL_ERROR},
}

#: The failing and aborting states whose abort does more than EndTxn.
_ABORT_PLANS: Mapping[TxnState, AbortPlan] = {
    S.ABORTABLE_ERROR_THEN_BUMP: AbortPlan.END_TXN_THEN_BUMP,
    S.ABORTING_THEN_BUMP: AbortPlan.END_TXN_THEN_BUMP,
    S.ABORTABLE_ERROR_BY_BUMP: AbortPlan.BUMP_INSTEAD,
    S.ABORTING_BY_BUMP: AbortPlan.BUMP_INSTEAD,
}
_ABORTABLE_ERRORS = frozenset(
    {S.ABORTABLE_ERROR, S.ABORTABLE_ERROR_THEN_BUMP, S.ABORTABLE_ERROR_BY_BUMP}
)
_ABORTING_STATES = frozenset({S.ABORTING, S.ABORTING_THEN_BUMP, S.ABORTING_BY_BUMP})
#: The event by which the abort's plan grows to each plan (`escalate`).
_ESCALATION = {AbortPlan.END_TXN_THEN_BUMP: Ev.NEEDS_BUMP, AbortPlan.BUMP_INSTEAD: Ev.EPOCH_REFUSED}

#: States whose batches are not drained: they fail with the transaction's error.
_HOLDS_BATCHES = _ABORTABLE_ERRORS | _ABORTING_STATES | {S.FATAL_ERROR}


def refusal_hint(state: TxnState, operation: str) -> str:
    """What to do instead, for a call the state does not allow (`operation` is what the
    manager says it cannot do: "init", "commit", "send()"...)."""
    match state:
        case S.UNINITIALIZED:
            return "; call init_transactions() first"
        case S.INITIALIZING:  # also after an unknown commit outcome: the epoch bump
            return "; await init_transactions() first (it returns once initialised)"
        case S.READY if operation == "init":
            return "; it is initialised already (once per producer)"
        case S.READY if operation == "abort":
            return "; no transaction is open, so there is nothing to abort"
        case S.READY:
            return (
                "; no transaction is open: call begin_transaction() first, or use "
                "`async with producer.transaction()`"
            )
        case S.IN_TRANSACTION if operation == "begin a transaction":
            return "; a transaction is open already: commit or abort it first"
        case S.COMMITTING | S.ABORTING | S.ABORTING_THEN_BUMP | S.ABORTING_BY_BUMP:
            return "; wait until the transaction has ended"
        case S.ABORTABLE_ERROR | S.ABORTABLE_ERROR_THEN_BUMP | S.ABORTABLE_ERROR_BY_BUMP:
            return "; the transaction failed: abort it"
        case _:
            return ""


#: The caller's operation a `TxnResult` made by NEW_RESULT stands for.
_OPERATION = {
    Ev.INIT: "init",
    Ev.COMMIT: "commit",
    Ev.ABORT: "abort",
    Ev.OUTCOME_UNKNOWN: "init (settling an EndTxn with unknown outcome, then an epoch bump)",
}


# -- the requests: built and read per version ---------------------------------------------


def _find_coordinator(key: str, key_type: CoordinatorType, version: int) -> FindCoordinatorRequest:
    if version >= 4:
        return FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key])
    return FindCoordinatorRequest(key=key, key_type=key_type)


def _timeout_refused(timeout_ms: int) -> FatalBrokerError:
    """InitProducerId's INVALID_TRANSACTION_TIMEOUT: the configured timeout is above
    the coordinator's transaction.max.timeout.ms (Java: InvalidTxnTimeoutException)."""
    return FatalBrokerError(
        E.INVALID_TRANSACTION_TIMEOUT,
        f"the transaction coordinator refused transaction_timeout={timeout_ms / 1000:g} s "
        f"({timeout_ms:,} ms): it is above the brokers' transaction.max.timeout.ms "
        "(900,000 ms, 15 minutes, unless set otherwise). Lower transaction_timeout, or "
        "raise transaction.max.timeout.ms on the brokers",
    )


def _read_find_coordinator(
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


def _init_producer_id(
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


def _add_partitions_to_txn(
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


def _read_add_partitions_to_txn(
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


def _add_offsets_to_txn(
    transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
) -> AddOffsetsToTxnRequest:
    return AddOffsetsToTxnRequest(
        transactional_id=transactional_id,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        group_id=group_id,
    )


def _txn_offset_commit(
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


def _read_txn_offset_commit(response: TxnOffsetCommitResponse) -> dict[TopicPartition, int]:
    return {
        (t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions
    }


def _end_txn(
    transactional_id: str, producer_id: int, producer_epoch: int, committed: bool
) -> EndTxnRequest:
    return EndTxnRequest(
        transactional_id=transactional_id,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        committed=committed,
    )


# -- the request queue --------------------------------------------------------------------

K = TxnRequestKind
#: EndTxn's last version without KIP-890's per-transaction epoch bump (v5 has it).
_END_TXN_V1_MAX = 4
_REQUEST_CLASS: dict[TxnRequestKind, Any] = {
    K.FIND_COORDINATOR: FindCoordinatorRequest,
    K.INIT_PRODUCER_ID: InitProducerIdRequest,
    K.ADD_PARTITIONS: AddPartitionsToTxnRequest,
    K.ADD_OFFSETS: AddOffsetsToTxnRequest,
    K.TXN_OFFSET_COMMIT: TxnOffsetCommitRequest,
    K.END_TXN: EndTxnRequest,
}


class TxnRequestQueue:
    """The coordinator request queue: a component its manager owns (`requests`).

    The mechanics of sending and nothing of the transaction: the queued `Work` and its
    order (priority, then queue order: `head`), the request in flight (only it may be
    answered: `answered`), the negotiated versions, the coordinators found
    (`coordinator_for`, `lookup_coordinator`) and the backoff of retries (`retry`). What
    to send and when is the manager's decision; `start` builds the request decided on,
    with the ids it is given."""

    def __init__(
        self,
        *,
        retry_backoff: float = 0.1,
        retry_backoff_max: float = 1.0,
        add_partitions_max_version: int = 3,
    ) -> None:
        # Not jittered (no random source here): one request at a time per producer.
        self.backoff = ExponentialBackoff(retry_backoff, retry_backoff_max)
        # Kafka keeps AddPartitionsToTxn v4+ for brokers; clients stop at v3 (Java).
        self.add_partitions_max_version = add_partitions_max_version
        # API key -> negotiated version (None: use our highest); cluster's transaction.version.
        self._versions: dict[int, int] | None = None
        self.transaction_version = 0
        # The transaction coordinator of our id, and the group coordinator of each group.
        self.coordinator: Coordinator | None = None
        self.group_coordinators: dict[str, Coordinator] = {}
        # Queued work, its order counter, and the request being answered.
        self._queue: list[Work] = []
        self._seq = 0
        self.in_flight: TxnRequest | None = None

    def __repr__(self) -> str:
        return (
            f"queue={[w.kind.value for w in self._queue]} "
            f"in_flight={self.in_flight.kind.value if self.in_flight else None}"
        )

    # -- versions -----------------------------------------------------------------------

    def set_api_versions(
        self, versions: Mapping[int, int], *, transaction_version: int | None = None
    ) -> None:
        """The negotiated versions (API key -> version) and the finalized
        `transaction.version` feature level (None or 0: transactions v1)."""
        self._versions = dict(versions)
        self.transaction_version = transaction_version or 0

    def version_of(self, kind: TxnRequestKind) -> int | None:
        """The version to use for `kind` (None: the broker has none we can use)."""
        cls = _REQUEST_CLASS[kind]
        top: int = cls.MAX_VERSION
        if kind is K.ADD_PARTITIONS:
            top = min(top, self.add_partitions_max_version)
        if kind is K.END_TXN and self.transaction_version < 2:
            # EndTxn v5 is transactions v2's (KIP-890), as Java's producer keeps it: Kafka
            # 4.4 with transaction.version=0 answers it UNSUPPORTED_VERSION, and with 1 it
            # bumps the epoch at every commit or abort, which fenced the next
            # transaction's v1 requests (PRODUCER_FENCED).
            top = min(top, _END_TXN_V1_MAX)
        if self._versions is None:
            return top
        found = self._versions.get(cls.API_KEY)
        return None if found is None else min(found, top)

    # -- the queue ----------------------------------------------------------------------

    def enqueue(self, work: Work) -> None:
        self._seq += 1
        work.seq = self._seq
        self._queue.append(work)

    def head(self) -> Work | None:
        """The work to send next (priority, then queue order), due or not."""
        return min(self._queue, key=lambda w: (w.priority, w.seq), default=None)

    def remove(self, work: Work) -> None:
        self._queue.remove(work)

    def is_queued(self, result: TxnResult) -> bool:
        """Whether queued work will still settle `result`."""
        return any(w.result is result for w in self._queue)

    def has_queued(self, kind: TxnRequestKind) -> bool:
        return any(w.kind is kind for w in self._queue)

    def keep_only(self, keep: Callable[[Work], bool]) -> list[Work]:
        """Drop the queued work `keep` refuses; returns what was dropped."""
        dropped = [w for w in self._queue if not keep(w)]
        self._queue = [w for w in self._queue if keep(w)]
        return dropped

    def take_all(self) -> list[Work]:
        """Empty the queue (the transaction failed fatally); returns what was queued."""
        queue, self._queue = self._queue, []
        return queue

    def retry(self, work: Work, now: float, backoff: float | None = None) -> None:
        """Queue `work` again after `backoff` (None: retry_backoff, growing)."""
        work.attempts += 1
        if backoff is None:
            backoff = self.backoff.backoff(work.attempts - 1, None)
        work.not_before = now + backoff
        self.enqueue(work)

    # -- coordinators -------------------------------------------------------------------

    def coordinator_for(self, work: Work) -> Coordinator | None:
        if work.key_type is CoordinatorType.GROUP:
            return self.group_coordinators.get(work.key)
        return self.coordinator

    def coordinator_found(self, key_type: CoordinatorType, key: str, found: Coordinator) -> None:
        if key_type is CoordinatorType.GROUP:
            self.group_coordinators[key] = found
        else:
            self.coordinator = found

    def lookup_coordinator(self, key_type: CoordinatorType, key: str) -> None:
        """Forget the coordinator and queue a FindCoordinator for it (once)."""
        if key_type is CoordinatorType.GROUP:
            self.group_coordinators.pop(key, None)
        else:
            self.coordinator = None
        for w in self._queue:
            if w.kind is K.FIND_COORDINATOR and w.key_type is key_type and w.key == key:
                return
        self.enqueue(
            Work(K.FIND_COORDINATOR, Priority.FIND_COORDINATOR, key_type=key_type, key=key)
        )

    # -- sending and answers ------------------------------------------------------------

    def start(
        self,
        work: Work,
        coordinator: Coordinator | None,
        version: int,
        ids: tuple[str, int, int],
        transaction_timeout: float,
    ) -> TxnRequest:
        """Build the request for `work` (taken off the queue) with `ids` (transactional
        id, producer id, epoch) and put it in flight."""
        tid, pid, epoch = ids
        message: Any
        match work.kind:
            case K.FIND_COORDINATOR:
                message = _find_coordinator(work.key, work.key_type, version)
            case K.INIT_PRODUCER_ID:
                if not work.bump or version < 3:
                    # Pre-KIP-360 coordinators bump the epoch of a known transactional
                    # id on any InitProducerId; they just cannot check it is us.
                    pid, epoch = -1, -1
                message = _init_producer_id(tid, transaction_timeout, pid, epoch)
            case K.ADD_PARTITIONS:
                message = _add_partitions_to_txn(tid, pid, epoch, work.partitions, version)
            case K.ADD_OFFSETS:
                assert work.group is not None
                message = _add_offsets_to_txn(tid, pid, epoch, work.group.group_id)
            case K.TXN_OFFSET_COMMIT:
                assert work.group is not None
                message = _txn_offset_commit(tid, pid, epoch, work.group, work.offsets)
            case K.END_TXN:
                message = _end_txn(tid, pid, epoch, work.committed)
        self._queue.remove(work)
        self.in_flight = TxnRequest(work.kind, message, version, coordinator, work, pid, epoch)
        return self.in_flight

    def answered(self, request: TxnRequest) -> bool:
        """`request` got its answer (or its failure): False when it is stale (not the
        request in flight), which is then ignored."""
        if request is not self.in_flight:
            return False
        self.in_flight = None
        return True


# -- the manager --------------------------------------------------------------------------


class TransactionRules:
    """The transaction manager's part of the rules (core/_rules.py gathers them
    into `Rules`)."""

    def end_txn_bumps_epoch(self, manager: TransactionManager) -> bool:
        """Does a successful EndTxn v5 answer carry the next epoch? Only under
        transactions v2; a v1 coordinator names the current one."""
        return manager.transaction_v2

    def unknown_commit_outcome(
        self, manager: TransactionManager, error: KafkaError, now: float
    ) -> None:
        """An EndTxn(commit) got no answer: settle it (resend), then re-initialise (a
        new epoch), so the late copy cannot decide the next transaction."""
        manager.reinitialise_after_unknown_commit(error, now)

    def init_when_ready(self, manager: TransactionManager) -> TxnResult | None:
        """`init()` on a manager that is READY: None refuses it (initialised already;
        after an unknown commit outcome the manager is INITIALIZING, and `init()`
        returns that re-initialisation)."""
        return None

    def send_failure_taints_transaction(self, error: KafkaError) -> bool:
        """A `send()` raised inside a transaction: the record is not in it, so the
        transaction must not commit (abortable), as Java's `send` does."""
        return True


#: Seconds before retrying a transaction's first AddPartitionsToTxn refused with
#: CONCURRENT_TRANSACTIONS (Java's ADD_PARTITIONS_RETRY_BACKOFF_MS).
ADD_PARTITIONS_RETRY_BACKOFF = 0.02
# How many times an EndTxn resent to settle an unanswered one may go unanswered in turn
# before the producer bumps the epoch instead. Tansu drops the connection at every resend
# of an EndTxn whose first copy was cut (seen in tests/chaos, 120 s of resends); on Kafka
# the bump is then fenced if the transaction is still open: fatal, never silent.
SETTLE_ATTEMPTS = 5

E = ErrorCode
_COORDINATOR_GONE = frozenset({E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE})
_EPOCH = frozenset({E.INVALID_PRODUCER_EPOCH, E.PRODUCER_FENCED})
_UNKNOWN_PRODUCER = frozenset({E.UNKNOWN_PRODUCER_ID, E.INVALID_PRODUCER_ID_MAPPING})
_FATAL_CODES = frozenset({E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, E.INVALID_TXN_STATE})
_NO_UPDATE = TxnUpdate()
#: INVALID_PRODUCER_ID_MAPPING on a batch: what Kafka's message leaves out (Java's
#: producer too makes it abortable and takes a new producer id at the abort).
_ID_EXPIRED = (
    " (the coordinator no longer maps this transactional id to the producer id: it "
    "expires after transactional.id.expiration.ms without a transaction, 7 days by "
    "default. Abort; the next transaction gets a new producer id)"
)


def _retriable(code: int) -> bool:
    return error_info(code).retriable or code == E.CONCURRENT_TRANSACTIONS


class TransactionManager:
    """The sans-IO transaction manager (see the module's theory of operation)."""

    def __init__(
        self,
        transactional_id: str,
        *,
        transaction_timeout: float = 60.0,
        retry_backoff: float = 0.1,
        retry_backoff_max: float = 1.0,
        add_partitions_max_version: int = 3,
        rules: TransactionRules | None = None,
    ) -> None:
        self.transactional_id = transactional_id
        #: The decisions where a wrong rule tears transactions (core/_rules.py).
        self.rules = TransactionRules() if rules is None else rules
        self.transaction_timeout = transaction_timeout
        # The coordinator requests: queued, in flight, their versions and coordinators.
        self.requests = TxnRequestQueue(
            retry_backoff=retry_backoff,
            retry_backoff_max=retry_backoff_max,
            add_partitions_max_version=add_partitions_max_version,
        )
        # Moved by `process_event` only, through `TABLE`.
        self.state = TxnState.UNINITIALIZED
        # Set by InitProducerId, and by EndTxn v5+ under transactions v2.
        self.producer_id = -1
        self.producer_epoch = -1
        # The error of an ABORTABLE_ERROR / FATAL_ERROR (raised by later calls): the table's
        # KEEP_ERROR and FORGET_ERROR.
        self.last_error: KafkaError | None = None
        # Decided at BEGIN for the whole transaction (DECIDE_VERSION, VERSION_1).
        self.transaction_v2 = False
        # Partitions: waiting for AddPartitionsToTxn, in it (in flight), and added.
        self.new_partitions: set[TopicPartition] = set()
        self.pending_partitions: set[TopicPartition] = set()
        self.partitions: set[TopicPartition] = set()
        # The coordinator may know of this transaction (EndTxn must be sent): CLEAR,
        # KNOWN and `transaction_known`.
        self.transaction_started = False
        # The result of init/commit/abort in progress (returned again if called again):
        # NEW_RESULT, COMPLETE_RESULT, FAIL_RESULT.
        self.pending_result: TxnResult | None = None

    @classmethod
    def from_config(cls, config: Any, rules: TransactionRules | None = None) -> TransactionManager:
        """From a `ProducerConfig` with `transactional_id` set."""
        if config.transactional_id is None:
            raise ValueError("the config has no transactional_id")
        return cls(
            config.transactional_id,
            transaction_timeout=config.transaction_timeout,
            retry_backoff=config.retry_backoff,
            retry_backoff_max=config.retry_backoff_max,
            rules=rules,
        )

    def __repr__(self) -> str:
        return (
            f"<TransactionManager {self.transactional_id!r} {self.state.name} "
            f"pid={self.producer_id} epoch={self.producer_epoch} "
            f"v{2 if self.transaction_v2 else 1} {self.requests!r}>"
        )

    # -- the one place states change ---------------------------------------------------

    def process_event(self, event: TxnEvent, error: KafkaError | None = None) -> None:
        """Move the state by `event` through `TABLE` and apply the move's effects
        (`error`: the error the effects keep or fail with)."""
        move = TABLE.get((self.state, event))
        if move is None:
            raise IllegalTransactionStateError(
                f"transactional id {self.transactional_id!r}: no move from "
                f"{self.state.name} on {event.name}",
                from_state=self.state,
                to_state=event,
            )
        self.state, effects = move
        if X.FORGET_NEW_PARTITIONS in effects:
            self.new_partitions.clear()
        if X.DECIDE_VERSION in effects:
            requests = self.requests
            self.transaction_v2 = (
                requests.transaction_version >= 2 and (requests.version_of(K.END_TXN) or 0) >= 5
            )
        if X.VERSION_1 in effects:
            self.transaction_v2 = False
        if X.CLEAR in effects:
            self.new_partitions.clear()
            self.pending_partitions.clear()
            self.partitions.clear()
            self.transaction_started = False
        if X.KNOWN in effects:
            self.transaction_started = True
        if X.KEEP_ERROR in effects:
            self.last_error = error
        if X.FORGET_ERROR in effects:
            self.last_error = None
        if X.DROP_QUEUED in effects:
            assert error is not None
            self._drop_queued(error)
        if X.FAIL_QUEUED in effects:
            assert error is not None
            for work in self.requests.take_all():
                if work.result is not None:
                    work.result.set_error(error)
        ending = self.pending_result
        if X.COMPLETE_RESULT in effects or X.FAIL_RESULT in effects:
            self.pending_result = None
        if X.NEW_RESULT in effects:
            self.pending_result = TxnResult(_OPERATION[event])
        if X.QUEUE_INIT_PRODUCER_ID in effects:
            self.requests.enqueue(Work(K.INIT_PRODUCER_ID, Priority.INIT_PRODUCER_ID))
        if X.QUEUE_END_TXN in effects:
            committed = event is Ev.COMMIT
            self.requests.enqueue(Work(K.END_TXN, Priority.END_TXN, committed=committed))
        if ending is not None:
            if X.COMPLETE_RESULT in effects:
                ending.set_done()
            elif X.FAIL_RESULT in effects:
                assert error is not None
                ending.set_error(error)

    def escalate(self, plan: AbortPlan) -> None:
        """The abort must end the transaction at least as `plan` says: a failing or
        aborting state moves to the one with that plan, unless its own is as large. No
        other state has a plan to grow (the transaction is not failing, or is over)."""
        state = self.state
        if (state.is_abortable_error or state.is_aborting) and plan > state.abort_plan:
            self.process_event(_ESCALATION[plan])

    def transaction_known(self) -> None:
        """The coordinator knows of this transaction (or may): EndTxn must be sent."""
        self.transaction_started = True

    # -- caller API ---------------------------------------------------------------------

    def _raise_if_failed(self) -> None:
        if self.state is TxnState.FATAL_ERROR or self.state.is_abortable_error:
            assert self.last_error is not None
            raise self.last_error

    def _refuse(self, operation: str) -> IllegalTransactionStateError:
        hint = refusal_hint(self.state, operation)
        return IllegalTransactionStateError(
            f"transactional id {self.transactional_id!r}: cannot {operation} in state "
            f"{self.state.name}{hint}",
            from_state=self.state,
        )

    def init(self) -> TxnResult:
        """Find the coordinator and get a producer id (Java's initTransactions).

        While INITIALIZING (also the re-initialisation after an unknown EndTxn outcome)
        it returns the result in progress."""
        if self.state is TxnState.FATAL_ERROR:
            self._raise_if_failed()
        if self.state is TxnState.INITIALIZING and self.pending_result is not None:
            return self.pending_result
        if self.state is TxnState.READY:
            again = self.rules.init_when_ready(self)
            if again is not None:
                return again
        if self.state is not TxnState.UNINITIALIZED:
            raise self._refuse("init")
        self.process_event(Ev.INIT)
        assert self.pending_result is not None
        return self.pending_result

    def begin(self) -> None:
        self._raise_if_failed()
        if self.state is not TxnState.READY:
            raise self._refuse("begin a transaction")
        self.process_event(Ev.BEGIN)

    def check_send(self) -> None:
        """Raise why a record may not be sent now: only inside a transaction."""
        if self.state is TxnState.IN_TRANSACTION:
            return
        self._raise_if_failed()
        raise self._refuse("send() outside a transaction")

    def maybe_add_partition(self, tp: TopicPartition) -> None:
        """A record for `tp` joins the transaction (call on send; cheap when known)."""
        self._raise_if_failed()
        if self.state is not TxnState.IN_TRANSACTION:
            raise self._refuse(f"send to {tp[0]}-{tp[1]}")
        self._register(tp)

    def _register(self, tp: TopicPartition) -> None:
        if tp in self.partitions or tp in self.new_partitions or tp in self.pending_partitions:
            return
        if self.transaction_v2:
            self.partitions.add(tp)  # the Produce request adds it (KIP-890)
        else:
            self.new_partitions.add(tp)

    def is_send_to_partition_allowed(self, tp: TopicPartition) -> bool:
        return self.state is not TxnState.FATAL_ERROR and tp in self.partitions

    def send_offsets(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_metadata: GroupMetadata | str,
    ) -> TxnResult:
        """Commit a consumer's positions with this transaction (AddOffsetsToTxn to the
        transaction coordinator, then TxnOffsetCommit to the group coordinator)."""
        self._raise_if_failed()
        if self.state is not TxnState.IN_TRANSACTION:
            raise self._refuse("send offsets")
        group = GroupMetadata(group_metadata) if isinstance(group_metadata, str) else group_metadata
        result = TxnResult(f"send_offsets({group.group_id})")
        self.requests.enqueue(
            Work(
                K.ADD_OFFSETS,
                Priority.ADD_PARTITIONS_OR_OFFSETS,
                result,
                group=group,
                offsets={
                    tp: om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(om)
                    for tp, om in offsets.items()
                },
            )
        )
        return result

    def commit(self) -> TxnResult:
        if self.state is TxnState.COMMITTING and self.pending_result is not None:
            return self.pending_result
        self._raise_if_failed()
        if self.state is not TxnState.IN_TRANSACTION:
            raise self._refuse("commit")
        self.process_event(Ev.COMMIT)
        assert self.pending_result is not None
        return self.pending_result

    def abort(self) -> TxnResult:
        if self.state.is_aborting and self.pending_result is not None:
            return self.pending_result
        if self.state is TxnState.FATAL_ERROR:
            self._raise_if_failed()
        if not (self.state is TxnState.IN_TRANSACTION or self.state.is_abortable_error):
            raise self._refuse("abort")
        self.process_event(Ev.ABORT, TransactionAbortedError("the transaction is being aborted"))
        assert self.pending_result is not None
        return self.pending_result

    def hand_off(self) -> tuple[int, int]:
        """Leave the open transaction, as it is, to another process that ends it:
        (producer id, epoch) for its `adopt`. The caller has flushed and every batch of
        the transaction was acknowledged (a failed one made the state an ABORTABLE_ERROR,
        raised here). Afterwards this manager sends nothing, and closing it does not
        abort (KIP-939's prepared transaction, with the coordinator's timeout as limit)."""
        self._raise_if_failed()
        if self.state is not TxnState.IN_TRANSACTION:
            raise self._refuse("hand off the transaction")
        if self.new_partitions or self.pending_partitions or self.requests.in_flight is not None:
            raise self._refuse("hand off the transaction while partitions are being added")
        if not self.transaction_started:
            raise self._refuse("hand off a transaction the coordinator does not know yet")
        self.process_event(Ev.HAND_OFF)
        return self.producer_id, self.producer_epoch

    def adopt(self, producer_id: int, producer_epoch: int) -> None:
        """Take over an open transaction another process handed off (`hand_off`), so
        that `commit()` or `abort()` ends it: instead of `init()`, which would abort it.
        The EndTxn is the v1 kind (the coordinator knows the partitions)."""
        if self.state is not TxnState.UNINITIALIZED:
            raise self._refuse("adopt a transaction")
        if producer_id < 0 or producer_epoch < 0:
            raise ValueError(
                f"adopt(producer_id={producer_id}, producer_epoch={producer_epoch}): "
                "both must be >= 0 (the handed-off transaction's)"
            )
        self._install_producer_id(producer_id, producer_epoch)
        self.process_event(Ev.ADOPT)

    def close(self) -> None:
        """Fail everything pending; later calls raise `ProducerClosedError`."""
        if self.state is not TxnState.FATAL_ERROR:
            self.set_fatal(ProducerClosedError("the transactional producer was closed"))

    def undrained_error(self) -> KafkaError | None:
        """When not None, the driver fails every batch not yet sent with it
        (`core.fail_all`): the transaction will not commit (Java's abortUndrainedBatches)."""
        state = self.state
        if state.is_abortable_error or state is TxnState.FATAL_ERROR:
            return self.last_error
        if state.is_aborting:
            return self.last_error or TransactionAbortedError("the transaction was aborted")
        return None

    @property
    def needs_coordinator(self) -> bool:
        """Ready batches wait for the coordinator loop: partitions to add with
        AddPartitionsToTxn, or batches to fail (the transaction is failing)."""
        return bool(self.new_partitions) or self.state in _HOLDS_BATCHES

    def partition_failed(
        self, tp: TopicPartition, error: KafkaError, *, sequenced: bool = True
    ) -> None:
        """A batch (or a send) of this transaction for `tp` ended without success:
        fatal if its error is, the transaction timed out on INVALID_PRODUCER_EPOCH
        (KIP-588), else abortable (with a bump when the batch had a sequence number:
        `sequenced`, the sequences may have a gap)."""
        if isinstance(error, AmbiguousWriteError):
            error = error.cause
        code = getattr(error, "code", None)
        where = f"a batch for {tp[0]}-{tp[1]}"
        if isinstance(error, FatalError):
            self.set_fatal(error)
        elif code == ErrorCode.INVALID_PRODUCER_EPOCH:
            self.make_abortable(self._timed_out(where, error), skip_end=True)
        else:
            expired = code == ErrorCode.INVALID_PRODUCER_ID_MAPPING
            self.make_abortable(
                TransactionAbortableError(
                    f"{where} failed: {error}" + (_ID_EXPIRED if expired else ""), error
                ),
                bump=sequenced,
                skip_end=expired,
            )

    # -- the idempotent Sequencer's hooks (`SequencerHooks`) ----------------------------

    def may_drain(self, tp: TopicPartition) -> bool:
        """May the ready batches of `tp` be drained? Not while the transaction is
        failing (the driver fails them), and only once `tp` is in the transaction: it
        joins now (transactions v2: at once, the Produce request adds it), or waits for
        AddPartitionsToTxn (`needs_coordinator`)."""
        if self.state in _HOLDS_BATCHES:
            return False
        if self.is_send_to_partition_allowed(tp):
            return True
        if self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
            self._register(tp)
        return self.is_send_to_partition_allowed(tp)

    def sequenced(self, tp: TopicPartition) -> None:
        """A batch for `tp` was drained into a Produce request."""
        if self.transaction_v2:
            self.transaction_known()

    def batch_failed(self, batch: ProducerBatch, error: KafkaError) -> None:
        self.partition_failed(
            (batch.topic, batch.partition), error, sequenced=batch.base_sequence >= 0
        )

    def defer_bump(self, tp: TopicPartition) -> bool:
        """The sequences of `tp` must restart under a new epoch (KIP-360): never done
        mid-transaction, so the transaction becomes abortable and the abort bumps (the
        partition stays marked for rewriting)."""
        self.make_abortable(
            TransactionAbortableError(
                f"the sequences of {tp[0]}-{tp[1]} must be rewritten under a new epoch"
            )
        )
        return True

    def producer_failed(self, error: KafkaError) -> None:
        """The producer core hit a fatal error: so does the transaction; every later
        call raises `error`."""
        self.set_fatal(error)

    # -- the coordinator requests -------------------------------------------------------

    def set_api_versions(
        self, versions: Mapping[int, int], *, transaction_version: int | None = None
    ) -> None:
        """The negotiated versions (API key -> version) and the finalized
        `transaction.version` feature level (None or 0: transactions v1)."""
        self.requests.set_api_versions(versions, transaction_version=transaction_version)

    @property
    def coordinator(self) -> Coordinator | None:
        """The transaction coordinator of our id, once found."""
        return self.requests.coordinator

    def next_request(self, now: float, *, batches_unfinished: bool = False) -> TxnRequest | None:
        """The next coordinator request to send, or None (nothing to do now).

        It takes the queue's head and decides for the transaction: EndTxn and the epoch
        bump wait until every batch is settled (`_waits_for_batches`); an EndTxn for a
        transaction the coordinator never heard of ends locally, or gives way to the
        bump an abort needs (`_end_locally`); a request whose coordinator is unknown
        first queues a FindCoordinator; an AddPartitionsToTxn takes the partitions
        waiting for one."""
        requests = self.requests
        if requests.in_flight is not None or self.state is TxnState.FATAL_ERROR:
            return None
        if (
            self.new_partitions
            and self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING)
            and not requests.has_queued(K.ADD_PARTITIONS)
        ):
            requests.enqueue(Work(K.ADD_PARTITIONS, Priority.ADD_PARTITIONS_OR_OFFSETS))
        while (work := requests.head()) is not None:
            if work.not_before > now or self._waits_for_batches(work, batches_unfinished):
                return None
            if work.kind is K.END_TXN and self._end_locally(work):
                continue
            coordinator = None
            if work.kind is not K.FIND_COORDINATOR:
                coordinator = requests.coordinator_for(work)
                if coordinator is None:
                    requests.lookup_coordinator(work.key_type, work.key or self.transactional_id)
                    continue
            version = requests.version_of(work.kind)
            if version is None or (work.kind is K.FIND_COORDINATOR and version < 1):
                self.set_fatal(
                    FatalBrokerError(
                        ErrorCode.UNSUPPORTED_VERSION,
                        f"the broker does not support {work.kind.value} at a version "
                        "a transactional producer can use",
                    )
                )
                continue
            if work.kind is K.ADD_PARTITIONS and not work.partitions:
                work.partitions = self._take_new_partitions()
                if not work.partitions:
                    requests.remove(work)
                    continue
            ids = (self.transactional_id, self.producer_id, self.producer_epoch)
            return requests.start(work, coordinator, version, ids, self.transaction_timeout)
        return None

    def _waits_for_batches(self, work: Work, batches_unfinished: bool) -> bool:
        """EndTxn and the epoch bump go only once every batch is settled (Java)."""
        ending = work.kind is K.END_TXN or (work.kind is K.INIT_PRODUCER_ID and work.bump)
        return ending and (batches_unfinished or bool(self.pending_partitions))

    def _end_locally(self, work: Work) -> bool:
        """EndTxn needs no request: nothing was added, or the bump replaces it."""
        if work.settle:
            return False  # the transaction is cleared, but the coordinator may hold it
        plan = self.state.abort_plan
        if plan is AbortPlan.BUMP_INSTEAD or (
            plan is AbortPlan.END_TXN_THEN_BUMP and not self.transaction_started
        ):
            self.requests.remove(work)
            self.requests.enqueue(bump_work())
            return True
        if self.transaction_started:
            return False
        self.requests.remove(work)
        self.finish_transaction()
        return True

    def poll_delay(self, now: float, *, batches_unfinished: bool = False) -> float | None:
        """Seconds until `next_request` may have something: 0 means call it now.

        None when only an event can change that: nothing queued, a request in flight
        (its answer wakes the driver), or EndTxn / the bump waiting for the batches (a
        batch settling wakes it). Pass the same `now` and `batches_unfinished` as to
        `next_request`: a due head is then never mistaken for a blocked one (that
        mix-up made the driver wait forever; simulations/regressions/
        transactional-lite-1100.toml)."""
        head = self.requests.head()
        if head is None or self.requests.in_flight is not None:
            return None
        if head.not_before <= now and self._waits_for_batches(head, batches_unfinished):
            return None
        return max(0.0, head.not_before - now)

    def retry_work(self, work: Work, now: float, backoff: float | None = None) -> None:
        """Queue `work` again after `backoff` (None: retry_backoff, growing), unless the
        transaction is aborting and it adds nothing the abort needs."""
        if (
            (self.state.is_aborting or self.state.is_abortable_error)
            and work.kind in (K.ADD_PARTITIONS, K.ADD_OFFSETS, K.TXN_OFFSET_COMMIT)
            and not (work.kind is K.ADD_PARTITIONS and work.unanswered)
        ):
            # An AddPartitionsToTxn that went unanswered is resent even so (Java): until
            # one is answered the coordinator's state is unknown, and Kafka answers a v1
            # EndTxn(abort) INVALID_TXN_STATE (fatal) in Empty or CompleteCommit, where a
            # lost add leaves it (chaos transactional on mock, seed 1).
            self.pending_partitions -= work.partitions
            if work.result is not None:
                work.result.set_error(TransactionAbortedError("the transaction is being aborted"))
            return
        self.requests.retry(work, now, backoff)

    def _drop_queued(self, error: KafkaError) -> None:
        """Drop queued transaction work (keep coordinator lookups, bumps and the resend
        of an unanswered AddPartitionsToTxn: see `retry_work`)."""
        dropped = self.requests.keep_only(
            lambda work: (
                work.kind is K.FIND_COORDINATOR
                or (work.kind is K.INIT_PRODUCER_ID and work.bump)
                or (work.kind is K.ADD_PARTITIONS and work.unanswered)
            )
        )
        for work in dropped:
            self.pending_partitions -= work.partitions
            if work.result is not None:
                work.result.set_error(error)

    def _take_new_partitions(self) -> frozenset[TopicPartition]:
        """The partitions waiting for AddPartitionsToTxn, now pending in one."""
        taken = frozenset(self.new_partitions)
        self.pending_partitions |= taken
        self.new_partitions.clear()
        return taken

    # -- outcomes -----------------------------------------------------------------------

    def finish_transaction(self) -> None:
        """EndTxn (or nothing to end) finished the transaction: READY, the result done."""
        self.process_event(Ev.ENDED)

    def reinitialise_after_unknown_commit(self, error: KafkaError, now: float) -> None:
        """EndTxn(commit) got no answer: resend it at the same epoch to settle it, then
        bump (INITIALIZING until then), and tell the caller the outcome is unknown
        (`Rules.unknown_commit_outcome`)."""
        self.process_event(Ev.OUTCOME_UNKNOWN, self._outcome_unknown(error))
        self.retry_work(Work(K.END_TXN, Priority.END_TXN, committed=True, settle=True), now)

    def _install_producer_id(self, producer_id: int, producer_epoch: int) -> TxnUpdate:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        return TxnUpdate(new_producer_id=(producer_id, producer_epoch))

    def _producer_id_initialised(self, producer_id: int, producer_epoch: int) -> TxnUpdate:
        """InitProducerId succeeded: the id and epoch are ours, an abort's bump is done
        (READY), or the initialisation is (READY, `init()` completes)."""
        update = self._install_producer_id(producer_id, producer_epoch)
        if self.state.is_aborting or self.state is TxnState.INITIALIZING:
            self.process_event(Ev.INITIALISED)
        return update

    def _partitions_answered(self, partitions: frozenset[TopicPartition], *, added: bool) -> None:
        """AddPartitionsToTxn for `partitions` was answered: they leave "pending" whatever
        happened (if the transaction fails, the batches for the added ones must still be
        able to finish, as in Java), and join the transaction if `added`."""
        self.pending_partitions -= partitions
        if added:
            self.partitions |= partitions
            self.transaction_known()

    def make_abortable(
        self, error: KafkaError, *, bump: bool = True, skip_end: bool = False
    ) -> None:
        """The transaction fails with `error` (abortable); its abort must bump the epoch
        after EndTxn (`bump`), or instead of it (`skip_end`). Already failing or
        aborting, the first error stands and only the plan may grow."""
        if self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
            self.process_event(Ev.FAILED, error)
        self.escalate(
            AbortPlan.BUMP_INSTEAD
            if skip_end
            else AbortPlan.END_TXN_THEN_BUMP
            if bump
            else AbortPlan.END_TXN
        )

    def set_fatal(self, error: KafkaError) -> None:
        if self.state is not TxnState.FATAL_ERROR:
            self.process_event(Ev.FATAL, error)

    # -- answers ------------------------------------------------------------------------

    def handle_response(self, request: TxnRequest, response: Any, now: float) -> TxnUpdate:
        """The answer to `request`: what it does to the transaction (one method per
        API below, each a `match` on the error code)."""
        if not self.requests.answered(request):
            return TxnUpdate(stale=True)
        if self.state is TxnState.FATAL_ERROR:
            return _NO_UPDATE
        update = _NO_UPDATE
        match request.kind:
            case K.FIND_COORDINATOR:
                self._on_find_coordinator(request, response, now)
            case K.INIT_PRODUCER_ID:
                update = self._on_init_producer_id(request, response, now)
            case K.ADD_PARTITIONS:
                self._on_add_partitions(request, response, now)
            case K.ADD_OFFSETS:
                self._on_add_offsets(request, response, now)
            case K.TXN_OFFSET_COMMIT:
                self._on_txn_offset_commit(request, response, now)
            case K.END_TXN:
                update = self._on_end_txn(request, response, now)
        self._settle_orphan(request.work)
        return update

    def _settle_orphan(self, work: Work) -> None:
        """A caller's result whose request neither succeeded nor went back in the queue
        (the transaction failed under it) fails with the transaction's error."""
        result = work.result
        if result is None or result.done() or self.requests.is_queued(result):
            return
        state = self.state
        if state.is_abortable_error or state.is_aborting or state is TxnState.FATAL_ERROR:
            result.set_error(
                self.last_error or TransactionAbortedError("the transaction was aborted")
            )

    def _fatal_code(self, code: int, during: str, message: str | None = None) -> FatalError:
        """The fatal error for `code` (one of `_FATAL_CODES`) answered to `during`'s
        request: a refused transactional id names the id and the ACL it needs."""
        if code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            return TransactionalIdAuthorizationError(self.transactional_id, during)
        error = error_for_code(code, message)
        assert isinstance(error, FatalError)
        return error

    def _unexpected(self, request: TxnRequest, code: int, message: str | None) -> None:
        self.set_fatal(
            FatalBrokerError(
                code,
                f"unexpected {error_info(code).name} in {request.kind.value} response"
                + (f": {message}" if message else ""),
            )
        )

    def _rediscover(self, work: Work, now: float) -> None:
        self.requests.lookup_coordinator(work.key_type, work.key or self.transactional_id)
        self.retry_work(work, now)

    def _on_find_coordinator(self, request: TxnRequest, response: Any, now: float) -> None:
        work = request.work
        code, message, found = _read_find_coordinator(response, work.key, request.version)
        if found is not None:
            self.requests.coordinator_found(work.key_type, work.key, found)
        elif _retriable(code):
            self.retry_work(work, now)
        elif code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            self.set_fatal(self._fatal_code(code, "FindCoordinator", message))
        elif code in (E.GROUP_AUTHORIZATION_FAILED, E.TRANSACTION_ABORTABLE):
            self.make_abortable(error_for_code(code, message), bump=False)
        else:
            self._unexpected(request, code, message)

    def _on_init_producer_id(self, request: TxnRequest, response: Any, now: float) -> TxnUpdate:
        work, code = request.work, response.error_code
        if code == E.NONE:
            return self._producer_id_initialised(response.producer_id, response.producer_epoch)
        if code in _COORDINATOR_GONE:
            self._rediscover(work, now)
        elif _retriable(code) or code == E.TRANSACTION_ABORTABLE:
            self.retry_work(work, now)
        elif code in _EPOCH:
            self.set_fatal(self._fenced(code, "InitProducerId"))
        elif code == E.UNKNOWN_SERVER_ERROR and request.message.producer_id >= 0:
            self.set_fatal(self._bump_refused(request))
        elif code in _FATAL_CODES:
            self.set_fatal(self._fatal_code(code, "InitProducerId"))
        elif code == E.CLUSTER_AUTHORIZATION_FAILED:
            self.set_fatal(error_for_code(code))
        elif code == E.INVALID_TRANSACTION_TIMEOUT:
            self.set_fatal(_timeout_refused(request.message.transaction_timeout_ms))
        else:
            self._unexpected(request, code, None)
        return _NO_UPDATE

    def _on_add_partitions(self, request: TxnRequest, response: Any, now: float) -> None:
        work = request.work
        codes = _read_add_partitions_to_txn(
            response, self.transactional_id, work.partitions, request.version
        )
        unauthorized: list[TopicPartition] = []
        failed: dict[TopicPartition, int] = {}
        for tp, code in sorted(codes.items()):
            if code == E.NONE:
                continue
            if code in _COORDINATOR_GONE:
                return self._rediscover(work, now)
            if code == E.CONCURRENT_TRANSACTIONS and not self.partitions:
                # The transaction's first add, while the previous one's markers are being
                # written: retry soon, as Java does (ADD_PARTITIONS_RETRY_BACKOFF_MS,
                # KAFKA-5477), not after retry_backoff (100 ms and growing): on Kafka
                # that would be every short transaction's cost.
                return self.retry_work(work, now, backoff=ADD_PARTITIONS_RETRY_BACKOFF)
            if _retriable(code):
                return self.retry_work(work, now)
            if code in _EPOCH:
                return self._epoch_error(code, "AddPartitionsToTxn")
            if code in _FATAL_CODES:
                return self.set_fatal(self._fatal_code(code, "AddPartitionsToTxn"))
            if code in _UNKNOWN_PRODUCER:
                return self.make_abortable(
                    error_for_code(code), skip_end=code == E.INVALID_PRODUCER_ID_MAPPING
                )
            if code == E.TRANSACTION_ABORTABLE:
                return self.make_abortable(error_for_code(code), bump=False)
            if code == E.TOPIC_AUTHORIZATION_FAILED:
                unauthorized.append(tp)
            elif code != E.OPERATION_NOT_ATTEMPTED:
                failed[tp] = code
        self._partitions_answered(work.partitions, added=not unauthorized and not failed)
        if unauthorized:
            topics = sorted({t for t, _ in unauthorized})
            self.make_abortable(
                TransactionAbortableError(
                    f"not authorized to write to topic(s) {', '.join(topics)} in a "
                    "transaction: the coordinator answered AddPartitionsToTxn with "
                    "TOPIC_AUTHORIZATION_FAILED",
                    TopicAuthorizationError(topic=topics[0]),
                ),
                bump=False,
            )
        elif failed:
            names = ", ".join(f"{t}-{p}: {error_info(c).name}" for (t, p), c in failed.items())
            self.make_abortable(
                TransactionAbortableError(f"could not add partitions to the transaction: {names}"),
                bump=False,
            )

    def _on_add_offsets(self, request: TxnRequest, response: Any, now: float) -> None:
        work, code = request.work, response.error_code
        if code == E.NONE:
            self.transaction_known()
            assert work.group is not None
            if self.state not in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
                return  # aborting: the offsets go nowhere (the result fails below)
            self.requests.enqueue(
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
            self._rediscover(work, now)
        elif _retriable(code):
            self.retry_work(work, now)
        elif code in _UNKNOWN_PRODUCER:
            self._fail_work(
                work, error_for_code(code), skip_end=code == E.INVALID_PRODUCER_ID_MAPPING
            )
        elif code in _EPOCH:
            self._epoch_error(code, "AddOffsetsToTxn")
        elif code in _FATAL_CODES:
            self.set_fatal(self._fatal_code(code, "AddOffsetsToTxn"))
        elif code in (E.GROUP_AUTHORIZATION_FAILED, E.TRANSACTION_ABORTABLE):
            self._fail_work(work, error_for_code(code), bump=False)
        else:
            self._unexpected(request, code, None)

    def _fail_work(self, work: Work, error: KafkaError, **abortable: bool) -> None:
        self.make_abortable(error, **abortable)
        if work.result is not None:
            work.result.set_error(error)

    def _on_txn_offset_commit(self, request: TxnRequest, response: Any, now: float) -> None:
        work = request.work
        codes = _read_txn_offset_commit(response)
        retry = False
        for tp, code in sorted(codes.items()):
            if code == E.NONE:
                work.offsets.pop(tp, None)
            elif code in _COORDINATOR_GONE or code == E.REQUEST_TIMED_OUT:
                if not retry:
                    self.requests.lookup_coordinator(CoordinatorType.GROUP, work.key)
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
                return self._fail_work(work, error_for_code(code), bump=False)
            elif code in _EPOCH:
                return self._epoch_error(code, "TxnOffsetCommit")
            elif code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                return self.set_fatal(self._fatal_code(code, "TxnOffsetCommit"))
            elif code == E.UNSUPPORTED_FOR_MESSAGE_FORMAT:
                return self.set_fatal(error_for_code(code))
            else:
                return self._unexpected(request, code, None)
        if work.offsets and (retry or codes):
            self.retry_work(work, now)
        elif work.result is not None:
            work.result.set_done()

    def _on_end_txn(self, request: TxnRequest, response: Any, now: float) -> TxnUpdate:
        work, code = request.work, response.error_code
        committing = work.committed
        if (
            work.settle
            and code != E.NONE
            and code not in _COORDINATOR_GONE
            and not _retriable(code)
        ):
            # The resent EndTxn(commit) of an unanswered one: anything but an answer or a
            # retry means this producer can no longer settle it (fenced, or timed out).
            self.set_fatal(self._fenced(code, "EndTxn") if code in _EPOCH else error_for_code(code))
            return _NO_UPDATE
        if code == E.NONE:
            update = _NO_UPDATE
            bumped = False
            v2 = self.rules.end_txn_bumps_epoch(self)
            if v2 and request.version >= 5 and response.producer_id >= 0:
                # Transactions v2: every EndTxn bumps the epoch (or, when it is exhausted,
                # hands out a new producer id); that bump also settles an abort's bump.
                # Only under v2: a v1 coordinator answering EndTxn v5 names the current
                # epoch, and taking that for a bump restarted a failed partition's sequences
                # at 0 under the same epoch, so the broker deduplicated new records against
                # old ones (lost writes; simulations/regressions/transactional-lite-16.toml).
                update = self._install_producer_id(response.producer_id, response.producer_epoch)
                bumped = True
            if (committing and work.settle) or (
                not committing and not bumped and self.state.abort_plan is not AbortPlan.END_TXN
            ):
                # An abort that must bump (a failed batch, or an unanswered abort), or a
                # settled unanswered commit: bump, so a late copy of an old EndTxn can never
                # end a later transaction.
                self.requests.enqueue(bump_work())
            else:
                self.finish_transaction()
            return update
        if code in _COORDINATOR_GONE:
            self._rediscover(work, now)
        elif _retriable(code):
            self.retry_work(work, now)
        elif code == E.PRODUCER_FENCED:
            self.set_fatal(self._fenced(code, "EndTxn"))
        elif code == E.INVALID_PRODUCER_EPOCH:
            self._epoch_error(code, "EndTxn", during_abort=not committing)
        elif code in _FATAL_CODES:
            self.set_fatal(self._fatal_code(code, "EndTxn"))
        elif code in _UNKNOWN_PRODUCER or code == E.TRANSACTION_ABORTABLE:
            if committing:
                self.make_abortable(
                    error_for_code(code),
                    bump=code != E.TRANSACTION_ABORTABLE,
                    skip_end=code == E.INVALID_PRODUCER_ID_MAPPING,
                )
            else:
                # The coordinator will not abort at this epoch: the bump does.
                self.escalate(AbortPlan.END_TXN_THEN_BUMP)
                self.requests.enqueue(bump_work())
        else:
            self._unexpected(request, code, None)
        return _NO_UPDATE

    def _end_txn_unknown(self, work: Work, error: KafkaError, now: float) -> None:
        """EndTxn left and no answer came back (`handle_failure` with `sent=True`)."""
        self.requests.lookup_coordinator(CoordinatorType.TRANSACTION, self.transactional_id)
        if work.settle:
            if work.attempts >= SETTLE_ATTEMPTS:
                self.requests.enqueue(bump_work())
            else:
                self.retry_work(work, now)  # the resent EndTxn went unanswered too: again, later
            return
        if not work.committed:
            # Resend the abort at the same epoch (Kafka answers a repeated abort; a v2
            # coordinator recognises the retry), then bump: the unanswered copy may still
            # arrive and must not abort the next transaction (sim transactional 3011302).
            # Not a bump at once: Kafka fences a bump that finds the transaction open
            # (sim transactional 3001759).
            self.escalate(AbortPlan.END_TXN_THEN_BUMP)
            self.retry_work(Work(K.END_TXN, Priority.END_TXN, committed=False, settle=True), now)
            return
        self.rules.unknown_commit_outcome(self, error, now)

    def handle_failure(
        self, request: TxnRequest, error: KafkaError, now: float, *, sent: bool = True
    ) -> TxnUpdate:
        """No answer: connection lost or request timeout (`sent=True`: it may have been
        processed), or the request never left (`sent=False`)."""
        if not self.requests.answered(request):
            return TxnUpdate(stale=True)
        work = request.work
        if sent and work.kind is K.END_TXN:
            self._end_txn_unknown(work, error, now)
            return _NO_UPDATE
        if sent and work.kind in (K.ADD_PARTITIONS, K.ADD_OFFSETS):
            self.transaction_known()  # it may have been applied: EndTxn must go
            work.unanswered = True
        if work.kind is not K.FIND_COORDINATOR:
            self.requests.lookup_coordinator(work.key_type, work.key or self.transactional_id)
        self.retry_work(work, now)
        return _NO_UPDATE

    def _outcome_unknown(self, error: KafkaError) -> TransactionOutcomeUnknownError:
        return TransactionOutcomeUnknownError(
            f"transactional id {self.transactional_id!r}: EndTxn(commit) with "
            f"producer id {self.producer_id} epoch {self.producer_epoch} got no "
            f"answer ({error}); the transaction may or may not be committed. The "
            "producer resends it at the same epoch, then bumps the epoch, before "
            "the next transaction",
            error,
        )

    def _timed_out(self, where: str, cause: KafkaError) -> TransactionTimedOutError:
        return TransactionTimedOutError(
            f"transactional id {self.transactional_id!r}: {where} was refused with "
            f"INVALID_PRODUCER_EPOCH (epoch {self.producer_epoch}): the coordinator aborted the "
            "transaction and bumped the epoch, because it outlived "
            f"transaction_timeout={self.transaction_timeout}s or because another producer with "
            "the same transactional id took over; abort() and retry in a new transaction (a "
            "takeover then raises ProducerFencedError)",
            cause,
        )

    def _fenced(self, code: int, what: str) -> ProducerFencedError:
        if isinstance(self.last_error, TransactionTimedOutError):
            # The same answers follow a takeover (the new instance's InitProducerId bumps
            # the epoch too): both causes are named, the takeover first, being the usual.
            why = (
                "another producer with the same transactional id took over, or the "
                "coordinator aborted a transaction that outlived "
                f"transaction_timeout={self.transaction_timeout}s and bumped the epoch (then "
                "open a new producer, and keep transactions shorter than transaction_timeout)"
            )
        else:
            why = (
                "another producer with the same transactional id took over, or the "
                "coordinator aborted a transaction that outlived "
                f"transaction_timeout={self.transaction_timeout}s"
            )
        return ProducerFencedError(
            ErrorCode.PRODUCER_FENCED,
            f"transactional id {self.transactional_id!r}, producer id {self.producer_id} "
            f"epoch {self.producer_epoch}: {what} answered {error_info(code).name}; {why}",
        )

    def _bump_refused(self, request: TxnRequest) -> ProducerFencedError:
        """UNKNOWN_SERVER_ERROR for an InitProducerId naming our id and epoch (KIP-360): the
        bump asked after the coordinator refused our epoch, the usual path of an instance
        whose transactional id another one took over. Kafka answers PRODUCER_FENCED; Tansu
        answers every bump so (docs/compatibility.md). Said as the takeover it is (logged at
        WARNING), not as a server failure at ERROR on each normal failover."""
        return ProducerFencedError(
            ErrorCode.PRODUCER_FENCED,
            f"transactional id {self.transactional_id!r}, producer id "
            f"{request.message.producer_id} epoch {request.message.producer_epoch}: the "
            "coordinator refused this producer's epoch, then its epoch bump (InitProducerId "
            "answered UNKNOWN_SERVER_ERROR, as Tansu answers any bump): another producer with "
            "the same transactional id most likely took over, and this one stops",
        )

    def _epoch_error(self, code: int, what: str, *, during_abort: bool = False) -> None:
        """INVALID_PRODUCER_EPOCH / PRODUCER_FENCED from the coordinator."""
        kip588 = (self.requests.version_of(K.INIT_PRODUCER_ID) or 0) >= 4
        if code == ErrorCode.INVALID_PRODUCER_EPOCH and kip588:
            if during_abort:
                self.escalate(AbortPlan.BUMP_INSTEAD)
                self.requests.enqueue(bump_work())
            else:
                self.make_abortable(self._timed_out(what, error_for_code(code)), skip_end=True)
        else:
            self.set_fatal(self._fenced(code, what))


__all__ = [
    "TABLE",
    "AbortPlan",
    "Coordinator",
    "CoordinatorType",
    "Effect",
    "GroupMetadata",
    "OffsetAndMetadata",
    "Priority",
    "TopicPartition",
    "TransactionManager",
    "TransactionRules",
    "TxnEvent",
    "TxnRequest",
    "TxnRequestKind",
    "TxnRequestQueue",
    "TxnResult",
    "TxnState",
    "TxnUpdate",
    "Work",
    "refusal_hint",
]
