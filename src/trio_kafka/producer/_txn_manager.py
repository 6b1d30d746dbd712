"""`TransactionManager`, the sans-IO transaction state machine, and its part of the rules.

The theory of operation, and the driver's recipe, are in `trio_kafka.producer.transactions`
(the public module, which re-exports this). The manager owns the transaction's state and
every move of it (`transition`, checked against `_txn_state.ALLOWED`); its request queue
is a component (`requests`, producer/_txn_queue.py); what each coordinator answer means
is decided in producer/_txn_handlers.py, through the manager's public actions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import trio_kafka.producer._txn_handlers as handlers
import trio_kafka.producer._txn_outgoing as outgoing
from trio_kafka.errors import (
    KafkaError,
    ProducerClosedError,
)
from trio_kafka.producer._rule_context import rules_for
from trio_kafka.producer._txn_queue import TxnRequestQueue
from trio_kafka.producer._txn_state import ALLOWED, TxnState, refusal_hint
from trio_kafka.producer._txn_types import (
    AbortPlan,
    Coordinator,
    GroupMetadata,
    IllegalTransactionStateError,
    OffsetAndMetadata,
    Priority,
    TopicPartition,
    TransactionAbortableError,
    TransactionAbortedError,
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
        #: The decisions where a wrong rule tears transactions (producer/_rules.py).
        self.rules = rules_for(TransactionRules) if rules is None else rules
        self.transaction_timeout = transaction_timeout
        # The coordinator requests: queued, in flight, their versions and coordinators.
        self.requests = TxnRequestQueue(
            retry_backoff=retry_backoff,
            retry_backoff_max=retry_backoff_max,
            add_partitions_max_version=add_partitions_max_version,
        )
        self.state = TxnState.UNINITIALIZED
        # Set by InitProducerId, and by EndTxn v5+ under transactions v2.
        self.producer_id = -1
        self.producer_epoch = -1
        # The error of ABORTABLE_ERROR / FATAL_ERROR (raised by later calls).
        self.last_error: KafkaError | None = None
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
            f"v{2 if self.transaction_v2 else 1} {self.requests!r}>"
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
        """EndTxn(commit) got no answer: resend it at the same epoch to settle it, then
        bump (INITIALIZING until then), and tell the caller the outcome is unknown
        (`Rules.unknown_commit_outcome`)."""
        pending = self.pending_result
        self.transition(TxnState.INITIALIZING)
        self.clear_transaction()
        self.pending_result = TxnResult(
            "init (settling an EndTxn with unknown outcome, then an epoch bump)"
        )
        self.retry_work(Work(K.END_TXN, Priority.END_TXN, committed=True, settle=True), now)
        if pending is not None:
            pending.set_error(handlers.outcome_unknown(self, error))

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
        self.transition(TxnState.INITIALIZING)
        self.pending_result = TxnResult("init")
        self.requests.enqueue(Work(K.INIT_PRODUCER_ID, Priority.INIT_PRODUCER_ID))
        return self.pending_result

    def begin(self) -> None:
        self._raise_if_failed()
        if self.state is not TxnState.READY:
            raise self._refuse("begin a transaction")
        requests = self.requests
        self.transaction_v2 = (
            requests.transaction_version >= 2 and (requests.version_of(K.END_TXN) or 0) >= 5
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
        self.transition(TxnState.COMMITTING)
        self.pending_result = TxnResult("commit")
        self.requests.enqueue(Work(K.END_TXN, Priority.END_TXN, committed=True))
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
        outgoing.drop_queued(self, TransactionAbortedError("the transaction is being aborted"))
        self.pending_result = TxnResult("abort")
        self.requests.enqueue(Work(K.END_TXN, Priority.END_TXN, committed=False))
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
        if self.new_partitions or self.pending_partitions or self.requests.in_flight is not None:
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
        """A batch of this transaction ended without success (the policy calls this;
        `_txn_handlers.batch_failed` decides). `sequenced`: it had a sequence number, so
        the abort must bump the epoch."""
        handlers.batch_failed(self, tp, error, sequenced)

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
        if not self.requests.answered(request):
            return TxnUpdate(stale=True)
        return handlers.handle_response(self, request, response, now)

    def handle_failure(
        self, request: TxnRequest, error: KafkaError, now: float, *, sent: bool = True
    ) -> TxnUpdate:
        """No answer: connection lost or request timeout (`sent=True`: it may have been
        processed), or the request never left (`sent=False`)."""
        if not self.requests.answered(request):
            return TxnUpdate(stale=True)
        return handlers.handle_failure(self, request, error, now, sent)

    # -- the coordinator requests: what to send next (producer/_txn_outgoing.py) ---------

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
        """The next coordinator request to send, or None (nothing to do now)."""
        return outgoing.next_request(self, now, batches_unfinished)

    def poll_delay(self, now: float, *, batches_unfinished: bool = False) -> float | None:
        """Seconds until `next_request` may have something (see `_txn_outgoing`)."""
        return outgoing.poll_delay(self, now, batches_unfinished)

    def retry_work(self, work: Work, now: float, backoff: float | None = None) -> None:
        """Queue `work` again after `backoff` (None: retry_backoff, growing), unless the
        transaction is aborting and it adds nothing the abort needs."""
        outgoing.retry_work(self, work, now, backoff)

    def take_new_partitions(self) -> frozenset[TopicPartition]:
        """The partitions waiting for AddPartitionsToTxn, now pending in one."""
        taken = frozenset(self.new_partitions)
        self.pending_partitions |= taken
        self.new_partitions.clear()
        return taken

    def release_pending(self, partitions: frozenset[TopicPartition]) -> None:
        """An AddPartitionsToTxn for `partitions` was dropped: they are pending no more."""
        self.pending_partitions -= partitions

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

    def producer_id_initialised(self, producer_id: int, producer_epoch: int) -> TxnUpdate:
        """InitProducerId succeeded: the id and epoch are ours, an abort's bump is done
        (READY), or the initialisation is (READY, `init()` completes)."""
        update = self.install_producer_id(producer_id, producer_epoch)
        self.abort_plan = AbortPlan.END_TXN
        if self.state is TxnState.ABORTING:
            self.finish_transaction()
        elif self.state is TxnState.INITIALIZING:
            self.transition(TxnState.READY)
            pending, self.pending_result = self.pending_result, None
            if pending is not None:
                pending.set_done()
        return update

    def end_txn_bumped(self, producer_id: int, producer_epoch: int) -> TxnUpdate:
        """Transactions v2: EndTxn answered with the next epoch (or a new id), which
        also settles any bump an abort needed."""
        update = self.install_producer_id(producer_id, producer_epoch)
        self.abort_plan = AbortPlan.END_TXN
        return update

    def end_txn_bumps_epoch(self) -> bool:
        """Does a successful EndTxn v5 answer carry the next epoch? (`Rules`.)"""
        return self.rules.end_txn_bumps_epoch(self)

    def commit_outcome_unknown(self, error: KafkaError, now: float) -> None:
        """An EndTxn(commit) left and got no answer (`Rules.unknown_commit_outcome`)."""
        self.rules.unknown_commit_outcome(self, error, now)

    def transaction_known(self) -> None:
        """The coordinator knows of this transaction (or may): EndTxn must be sent."""
        self.transaction_started = True

    def partitions_answered(self, partitions: frozenset[TopicPartition], *, added: bool) -> None:
        """AddPartitionsToTxn for `partitions` was answered: they leave "pending" whatever
        happened (if the transaction fails, the batches for the added ones must still be
        able to finish, as in Java), and join the transaction if `added`."""
        self.pending_partitions -= partitions
        if added:
            self.partitions |= partitions
            self.transaction_started = True

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
        outgoing.drop_queued(self, error)
        if pending is not None:
            self.pending_result = None
            pending.set_error(error)

    def set_fatal(self, error: KafkaError) -> None:
        if self.state is TxnState.FATAL_ERROR:
            return
        self.transition(TxnState.FATAL_ERROR)
        self.last_error = error
        queue = self.requests.take_all()
        pending, self.pending_result = self.pending_result, None
        for work in queue:
            if work.result is not None:
                work.result.set_error(error)
        if pending is not None:
            pending.set_error(error)


__all__ = ["TransactionManager", "TransactionRules"]
