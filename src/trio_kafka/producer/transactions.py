"""The transaction state machine of a transactional producer (KIP-98, sans-IO).

Theory of operation
-------------------
`TransactionManager` owns what a transactional producer knows about its transaction: the
transactional id, the producer id and epoch, the coordinators (the transaction
coordinator of our id; the group coordinator of each consumer group whose offsets we
commit), the partitions added to the transaction, and a queue of coordinator requests.
It never does I/O: the caller's methods (`init`, `begin`, `commit`, `abort`,
`send_offsets`) change the state and queue work; the driver takes requests out with
`next_request(now)` and feeds back `handle_response` or `handle_failure`.

States are `TxnState`; every move goes through `transition`, checked against one
table, `ALLOWED`. The life of a transaction: UNINITIALIZED -> INITIALIZING (FindCoordinator,
InitProducerId) -> READY -> IN_TRANSACTION (partitions added as batches become ready;
offsets sent) -> COMMITTING or ABORTING (EndTxn) -> READY. Errors:

- abortable (a batch failed, a topic is not authorised, TRANSACTION_ABORTABLE...):
  ABORTABLE_ERROR; `commit()` raises the error, `abort()` works and the next
  transaction may begin. After a failed batch the sequences may have gaps, so the abort
  also bumps the epoch (KIP-360: InitProducerId with the current id and epoch, after
  EndTxn). Transactions v2 (KIP-890) need no extra request: EndTxn itself bumps.
- fatal (PRODUCER_FENCED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_TXN_STATE, ...):
  FATAL_ERROR; every later call raises the same error; close the producer.
- ambiguous: an EndTxn(commit) that left and got no answer. The commit result fails with
  `TransactionOutcomeUnknownError` and the manager goes COMMITTING -> INITIALIZING,
  resends the same EndTxn at the same epoch until the coordinator answers (Kafka answers
  a repeated EndTxn from the transaction's state, and a v2 coordinator recognises the
  retry), then bumps the epoch, so a late EndTxn (still in the network, or retried by a
  broker) carries a fenced epoch and can never commit a later transaction (KAFKA-17754,
  the Jepsen/Bufstream finding). Not a bump at once: Kafka's coordinator fences a KIP-360
  bump that finds the transaction still open (prepareFenceProducerEpoch keeps no last
  epoch), which the simulator found once the mock broker answered as Kafka does
  (transactional seed 3001759). `begin()` is refused until that is done: await `init()`
  (it returns the bump's result). An EndTxn(abort) without answer is resent the same way.

INVALID_PRODUCER_EPOCH (decision, after KIP-588): from a partition leader (a failed
batch) it is `TransactionTimedOutError`, abortable: the broker aborted our transaction
after `transaction_timeout` and bumped the epoch. `abort()` then skips EndTxn (our
epoch is stale) and sends InitProducerId with the old id and epoch. Kafka's coordinator
fenced that epoch when it aborted the timed-out transaction and answers PRODUCER_FENCED
(fatal), as it does when another producer took over; the error names the timeout it saw.
From the coordinator it is the same when InitProducerId v4+ is negotiated (those
coordinators say PRODUCER_FENCED for a real fence), and fatal otherwise (older
coordinators used it for fencing), as Java does.

Requests are sent one at a time, in Java's priority order: FindCoordinator, then
InitProducerId, then AddPartitionsToTxn / AddOffsetsToTxn / TxnOffsetCommit, then EndTxn,
then an epoch-bumping InitProducerId; equal priorities in queue order. EndTxn and the
bump wait until the producer has no unfinished batch. An EndTxn for a transaction that
added nothing is completed locally. NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE forget
the coordinator (FindCoordinator goes first again); COORDINATOR_LOAD_IN_PROGRESS,
CONCURRENT_TRANSACTIONS and other retriable codes retry after an exponential backoff.
A response to anything but the request in flight is stale and ignored.

Transactions v2 (KIP-890 part 2), when the driver reports `transaction.version` >= 2
and EndTxn v5+ is negotiated: partitions join the transaction with the Produce request
(no AddPartitionsToTxn), and EndTxn answers with the producer id and epoch to use next.

The driver (client/)
--------------------
::

    txn = TransactionManager.from_config(config)
    core = ProducerCore(config, rng, sequencing=TransactionalSequencer(txn))
    txn.set_api_versions(info.negotiated, transaction_version=info.finalized_level(
        "transaction.version"))                      # after ApiVersions, and on changes

    # the coordinator loop, in the sender task, each pass:
    if (error := txn.undrained_error()) is not None: core.fail_all(error)
    request = txn.next_request(now, batches_unfinished=core.has_unfinished)
    if request is not None:   # request.coordinator: a Coordinator, or None = any node
        node = request.coordinator.node_id if request.coordinator else least_loaded
        try: response = await selector.request(node, request.message,
                                                version=request.version)
        except KafkaError as e:   # sent=False when it never left (BrokerConnectionError)
            update = txn.handle_failure(request, e, now, sent=...)
        else: update = txn.handle_response(request, response, now)
        if update.new_producer_id: core.set_producer_id(*update.new_producer_id, now)
    sleep until txn.poll_delay(now), a batch completes, or the user calls something.

    # user calls: `await` = wait for TxnResult.add_done_callback, then .result()
    await txn.init(); txn.begin(); send(...); await txn.send_offsets(offsets, group)
    await txn.commit()   # or await txn.abort()

With a `TransactionalSequencer` the core's `needs_producer_id` and `epoch_bump_due` are
always False (`owns_producer_id`): the manager owns InitProducerId, so the idempotent
producer's InitProducerId step of the sender loop never runs behind its back. The
request queue is `_txn_queue.TxnRequestQueue`, the response handlers `_txn_handlers`.
The request builders and readers (`find_coordinator`, `init_producer_id`,
`add_partitions_to_txn`, ...) are exported here too, for code that talks to a
coordinator without a manager (the Spark writer's per-task transactions).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from trio_kafka.errors import (
    ErrorCode,
    FatalError,
    KafkaError,
    ProducerClosedError,
)
from trio_kafka.producer import _txn_handlers
from trio_kafka.producer._record import AmbiguousWriteError
from trio_kafka.producer._rule_context import rules_for
from trio_kafka.producer._txn_queue import TxnRequestQueue
from trio_kafka.producer._txn_requests import (
    add_partitions_to_txn,
    find_coordinator,
    init_producer_id,
    read_add_partitions_to_txn,
    read_find_coordinator,
)
from trio_kafka.producer._txn_state import ALLOWED, TxnState
from trio_kafka.producer._txn_types import (
    AbortPlan,
    Coordinator,
    CoordinatorType,
    GroupMetadata,
    IllegalTransactionStateError,
    OffsetAndMetadata,
    Priority,
    TopicPartition,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionOutcomeUnknownError,
    TransactionTimedOutError,
    TxnRequest,
    TxnRequestKind,
    TxnResult,
    TxnUpdate,
    Work,
)

K = TxnRequestKind


class TransactionRules:
    """The transaction manager's part of the rules (producer/_rules.py gathers them
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


class TransactionManager(TxnRequestQueue):
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
        #: The decisions where a wrong rule tears transactions (producer/_rules.py).
        self.rules = rules_for(TransactionRules) if rules is None else rules
        self.transaction_timeout = transaction_timeout
        self.retry_backoff = retry_backoff
        self.retry_backoff_max = retry_backoff_max
        # Kafka keeps AddPartitionsToTxn v4+ for brokers; clients stop at v3 (Java).
        self.add_partitions_max_version = add_partitions_max_version
        self.state = TxnState.UNINITIALIZED
        # Set by InitProducerId, and by EndTxn v5+ under transactions v2.
        self.producer_id = -1
        self.producer_epoch = -1
        # The error of ABORTABLE_ERROR / FATAL_ERROR (raised by later calls).
        self.last_error: KafkaError | None = None
        self.coordinator: Coordinator | None = None
        self.group_coordinators: dict[str, Coordinator] = {}
        # API key -> negotiated version (None: use our highest); cluster's transaction.version.
        self._versions: dict[int, int] | None = None
        self.transaction_version = 0
        # Decided at `begin()` for the whole transaction.
        self.transaction_v2 = False
        # Partitions: waiting for AddPartitionsToTxn, in it (in flight), and added.
        self.new_partitions: set[TopicPartition] = set()
        self.pending_partitions: set[TopicPartition] = set()
        self.partitions: set[TopicPartition] = set()
        # The coordinator may know of this transaction (EndTxn must be sent).
        self.transaction_started = False
        # How an abort must end the transaction (escalates; reset when it is finished).
        self.abort_plan = AbortPlan.END_TXN
        # The result of init/commit/abort in progress (returned again if called again).
        self.pending_result: TxnResult | None = None
        self._queue: list[Work] = []
        self._seq = 0
        self._in_flight: TxnRequest | None = None

    @classmethod
    def from_config(cls, config: Any) -> TransactionManager:
        """From a `ProducerConfig` with `transactional_id` set."""
        if config.transactional_id is None:
            raise ValueError("the config has no transactional_id")
        return cls(
            config.transactional_id,
            transaction_timeout=config.transaction_timeout,
            retry_backoff=config.retry_backoff,
            retry_backoff_max=config.retry_backoff_max,
        )

    def __repr__(self) -> str:
        return (
            f"<TransactionManager {self.transactional_id!r} {self.state.name} "
            f"pid={self.producer_id} epoch={self.producer_epoch} "
            f"v{2 if self.transaction_v2 else 1} queue={[w.kind.value for w in self._queue]} "
            f"in_flight={self._in_flight.kind.value if self._in_flight else None}>"
        )

    # -- the one place states change ---------------------------------------------------

    def transition(self, to: TxnState) -> None:
        if to not in ALLOWED[self.state]:
            raise IllegalTransactionStateError(
                f"transactional id {self.transactional_id!r}: no transition from "
                f"{self.state.name} to {to.name}",
                from_state=self.state,
                to_state=to,
            )
        self.state = to

    # -- caller API ---------------------------------------------------------------------

    def _raise_if_failed(self) -> None:
        if self.state in (TxnState.FATAL_ERROR, TxnState.ABORTABLE_ERROR):
            assert self.last_error is not None
            raise self.last_error

    def reinitialise_after_unknown_commit(self, error: KafkaError, now: float) -> None:
        """EndTxn(commit) got no answer: settle it, then bump, before the next
        transaction (`Rules.unknown_commit_outcome`)."""
        _txn_handlers.reinitialise_after_unknown_commit(self, error, now)

    def _refuse(self, operation: str) -> IllegalTransactionStateError:
        hint = ""
        if self.state is TxnState.INITIALIZING:
            hint = "; await init() first"
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
        self.transition(TxnState.INITIALIZING)
        self.pending_result = TxnResult("init")
        self.enqueue(Work(K.INIT_PRODUCER_ID, Priority.INIT_PRODUCER_ID))
        return self.pending_result

    def begin(self) -> None:
        self._raise_if_failed()
        if self.state is not TxnState.READY:
            raise self._refuse("begin a transaction")
        self.transaction_v2 = (
            self.transaction_version >= 2 and (self.version_of(K.END_TXN) or 0) >= 5
        )
        self.clear_transaction()
        self.transition(TxnState.IN_TRANSACTION)

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

    def register_ready_partition(self, tp: TopicPartition) -> None:
        """A batch for `tp` is ready (the policy calls this when draining is blocked on
        it): add the partition, if a transaction is open to take it."""
        if self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
            self._register(tp)

    def is_send_to_partition_allowed(self, tp: TopicPartition) -> bool:
        return self.state is not TxnState.FATAL_ERROR and tp in self.partitions

    def partitions_ready_to_send(self, tps: Iterable[TopicPartition]) -> list[TopicPartition]:
        return [tp for tp in tps if self.is_send_to_partition_allowed(tp)]

    def partition_sent(self, tp: TopicPartition) -> None:
        """A batch for `tp` was drained into a Produce request."""
        if self.transaction_v2:
            self.transaction_started = True

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
        self.enqueue(
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
        self.transition(TxnState.COMMITTING)
        self.pending_result = TxnResult("commit")
        self.enqueue(Work(K.END_TXN, Priority.END_TXN, committed=True))
        return self.pending_result

    def abort(self) -> TxnResult:
        if self.state is TxnState.ABORTING and self.pending_result is not None:
            return self.pending_result
        if self.state is TxnState.FATAL_ERROR:
            self._raise_if_failed()
        if self.state not in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR):
            raise self._refuse("abort")
        self.transition(TxnState.ABORTING)
        self.new_partitions.clear()
        self._drop_queued(TransactionAbortedError("the transaction is being aborted"))
        self.pending_result = TxnResult("abort")
        self.enqueue(Work(K.END_TXN, Priority.END_TXN, committed=False))
        return self.pending_result

    def hand_off(self) -> tuple[int, int]:
        """Leave the open transaction, as it is, to another process that ends it:
        (producer id, epoch) for its `adopt`. The caller has flushed and every batch of
        the transaction was acknowledged (a failed one made the state ABORTABLE_ERROR,
        raised here). Afterwards this manager sends nothing, and closing it does not
        abort (KIP-939's prepared transaction, with the coordinator's timeout as limit)."""
        self._raise_if_failed()
        if self.state is not TxnState.IN_TRANSACTION:
            raise self._refuse("hand off the transaction")
        if self.new_partitions or self.pending_partitions or self._in_flight is not None:
            raise self._refuse("hand off the transaction while partitions are being added")
        if not self.transaction_started:
            raise self._refuse("hand off a transaction the coordinator does not know yet")
        self.transition(TxnState.HANDED_OFF)
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
        self.install_producer_id(producer_id, producer_epoch)
        self.transaction_v2 = False
        self.clear_transaction()
        self.transaction_started = True
        self.transition(TxnState.IN_TRANSACTION)

    def close(self) -> None:
        """Fail everything pending; later calls raise `ProducerClosedError`."""
        if self.state is not TxnState.FATAL_ERROR:
            self.set_fatal(ProducerClosedError("the transactional producer was closed"))

    def undrained_error(self) -> KafkaError | None:
        """When not None, the driver fails every batch not yet sent with it
        (`core.fail_all`): the transaction will not commit (Java's abortUndrainedBatches)."""
        match self.state:
            case TxnState.ABORTABLE_ERROR | TxnState.FATAL_ERROR:
                return self.last_error
            case TxnState.ABORTING:
                return self.last_error or TransactionAbortedError("the transaction was aborted")
            case _:
                return None

    def batch_failed(
        self, tp: TopicPartition, error: KafkaError, *, sequenced: bool = True
    ) -> None:
        """A batch of this transaction ended without success (the policy calls this).

        `sequenced`: it had a sequence number, so the abort must bump the epoch."""
        if isinstance(error, AmbiguousWriteError):
            error = error.cause
        code = getattr(error, "code", None)
        where = f"a batch for {tp[0]}-{tp[1]}"
        if isinstance(error, FatalError):
            self.set_fatal(error)
        elif code == ErrorCode.INVALID_PRODUCER_EPOCH:
            self.make_abortable(_txn_handlers.timed_out(self, where, error), skip_end=True)
        else:
            self.make_abortable(
                TransactionAbortableError(f"{where} failed: {error}", error),
                bump=sequenced,
                skip_end=code == ErrorCode.INVALID_PRODUCER_ID_MAPPING,
            )

    def producer_failed(self, error: KafkaError) -> None:
        """The producer core hit a fatal error (the policy's `on_fatal`): so does the
        transaction; every later call raises `error`."""
        self.set_fatal(error)

    def epoch_bump_needed(self, tp: TopicPartition) -> None:
        """The sequences of `tp` must restart under a new epoch (KIP-360): never done
        mid-transaction, so the transaction becomes abortable and the abort bumps."""
        self.make_abortable(
            TransactionAbortableError(
                f"the sequences of {tp[0]}-{tp[1]} must be rewritten under a new epoch"
            )
        )

    # -- answers ------------------------------------------------------------------------

    def handle_response(self, request: TxnRequest, response: Any, now: float) -> TxnUpdate:
        if request is not self._in_flight:
            return TxnUpdate(stale=True)
        self._in_flight = None
        return _txn_handlers.handle_response(self, request, response, now)

    def handle_failure(
        self, request: TxnRequest, error: KafkaError, now: float, *, sent: bool = True
    ) -> TxnUpdate:
        """No answer: connection lost or request timeout (`sent=True`: it may have been
        processed), or the request never left (`sent=False`)."""
        if request is not self._in_flight:
            return TxnUpdate(stale=True)
        self._in_flight = None
        work = request.work
        if sent and work.kind is K.END_TXN:
            _txn_handlers.end_txn_unknown(self, work, error, now)
            return TxnUpdate()
        if sent and work.kind in (K.ADD_PARTITIONS, K.ADD_OFFSETS):
            self.transaction_started = True  # it may have been applied: EndTxn must go
            work.unanswered = True
        if work.kind is not K.FIND_COORDINATOR:
            self.lookup_coordinator(work.key_type, work.key or self.transactional_id)
        self.retry_work(work, now)
        return TxnUpdate()

    # -- outcomes, used by the handlers -------------------------------------------------

    def clear_transaction(self) -> None:
        self.new_partitions.clear()
        self.pending_partitions.clear()
        self.partitions.clear()
        self.transaction_started = False

    def escalate(self, plan: AbortPlan) -> None:
        """The abort must end the transaction at least as `plan` says."""
        self.abort_plan = max(self.abort_plan, plan)

    def finish_transaction(self) -> None:
        """EndTxn (or the abort's bump) succeeded: READY, and the result is done."""
        self.clear_transaction()
        self.abort_plan = AbortPlan.END_TXN
        self.last_error = None
        self.transition(TxnState.READY)
        pending, self.pending_result = self.pending_result, None
        if pending is not None:
            pending.set_done()

    def install_producer_id(self, producer_id: int, producer_epoch: int) -> TxnUpdate:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        return TxnUpdate(new_producer_id=(producer_id, producer_epoch))

    def make_abortable(
        self, error: KafkaError, *, bump: bool = True, skip_end: bool = False
    ) -> None:
        if self.state is TxnState.FATAL_ERROR:
            return
        self.escalate(
            AbortPlan.BUMP_INSTEAD
            if skip_end
            else AbortPlan.END_TXN_THEN_BUMP
            if bump
            else AbortPlan.END_TXN
        )
        if self.state not in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
            return  # already failing or aborting: the first error stands
        pending = self.pending_result if self.state is TxnState.COMMITTING else None
        self.transition(TxnState.ABORTABLE_ERROR)
        self.last_error = error
        self._drop_queued(error)
        if pending is not None:
            self.pending_result = None
            pending.set_error(error)

    def set_fatal(self, error: KafkaError) -> None:
        if self.state is TxnState.FATAL_ERROR:
            return
        self.transition(TxnState.FATAL_ERROR)
        self.last_error = error
        queue, self._queue = self._queue, []
        pending, self.pending_result = self.pending_result, None
        for work in queue:
            if work.result is not None:
                work.result.set_error(error)
        if pending is not None:
            pending.set_error(error)


__all__ = [
    "ALLOWED",
    "Coordinator",
    "CoordinatorType",
    "GroupMetadata",
    "IllegalTransactionStateError",
    "OffsetAndMetadata",
    "Priority",
    "TransactionAbortableError",
    "TransactionAbortedError",
    "TransactionManager",
    "TransactionOutcomeUnknownError",
    "TransactionTimedOutError",
    "TxnRequest",
    "TxnRequestKind",
    "TxnResult",
    "TxnState",
    "TxnUpdate",
    "add_partitions_to_txn",
    "find_coordinator",
    "init_producer_id",
    "read_add_partitions_to_txn",
    "read_find_coordinator",
]
