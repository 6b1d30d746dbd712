"""The coordinator request queue of `TransactionManager` (a base class it inherits).

Theory of operation: the manager's calls and the response handlers queue `Work`; the
driver takes one `TxnRequest` at a time with `next_request(now)`. Requests go in Java's
priority order (FindCoordinator, InitProducerId, AddPartitionsToTxn / AddOffsetsToTxn /
TxnOffsetCommit, EndTxn, an epoch-bumping InitProducerId), equal priorities in queue
order; EndTxn and the bump wait until no batch is unfinished; a request whose
coordinator is unknown first queues a FindCoordinator; retries wait an exponential
backoff. Only `_in_flight` may be answered: anything else is stale.

The state this reads and writes is the manager's (declared below, set in
`TransactionManager.__init__`); the queue's own is `_queue`, `_seq` and `_in_flight`.
The response handlers (`_txn_handlers`) act on the manager only through its public
actions (`enqueue`, `retry_work`, `lookup_coordinator`, `bump_work`, `transition`,
`make_abortable`, `set_fatal`, `finish_transaction`, `install_producer_id`...), never
its private members.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trio_kafka.errors import ErrorCode, FatalBrokerError, KafkaError
from trio_kafka.producer import _txn_requests as build
from trio_kafka.producer._txn_state import TxnState
from trio_kafka.producer._txn_types import (
    AbortPlan,
    Coordinator,
    CoordinatorType,
    Priority,
    TopicPartition,
    TransactionAbortedError,
    TxnRequest,
    TxnRequestKind,
    TxnResult,
    Work,
)
from trio_kafka.protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest
from trio_kafka.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from trio_kafka.protocol.messages.end_txn import EndTxnRequest
from trio_kafka.protocol.messages.find_coordinator import FindCoordinatorRequest
from trio_kafka.protocol.messages.init_producer_id import InitProducerIdRequest
from trio_kafka.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest

K = TxnRequestKind
_REQUEST_CLASS: dict[TxnRequestKind, Any] = {
    K.FIND_COORDINATOR: FindCoordinatorRequest,
    K.INIT_PRODUCER_ID: InitProducerIdRequest,
    K.ADD_PARTITIONS: AddPartitionsToTxnRequest,
    K.ADD_OFFSETS: AddOffsetsToTxnRequest,
    K.TXN_OFFSET_COMMIT: TxnOffsetCommitRequest,
    K.END_TXN: EndTxnRequest,
}


class TxnRequestQueue:
    """The request queue half of `TransactionManager` (see module doc)."""

    # The manager's state, read and written here (owned by `TransactionManager`).
    transactional_id: str
    transaction_timeout: float
    retry_backoff: float
    retry_backoff_max: float
    add_partitions_max_version: int
    state: TxnState
    producer_id: int
    producer_epoch: int
    coordinator: Coordinator | None
    group_coordinators: dict[str, Coordinator]
    _versions: dict[int, int] | None
    transaction_version: int
    new_partitions: set[TopicPartition]
    pending_partitions: set[TopicPartition]
    transaction_started: bool
    abort_plan: AbortPlan
    pending_result: TxnResult | None
    # The queue's own: queued work, its order counter, the request being answered.
    _queue: list[Work]
    _seq: int
    _in_flight: TxnRequest | None

    def set_fatal(self, error: KafkaError) -> None:
        raise NotImplementedError  # the manager's

    def finish_transaction(self) -> None:
        raise NotImplementedError  # the manager's

    # -- driver inputs ------------------------------------------------------------------

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
        if self._versions is None:
            return top
        found = self._versions.get(cls.API_KEY)
        return None if found is None else min(found, top)

    # -- the request queue ------------------------------------------------------------

    def enqueue(self, work: Work) -> None:
        self._seq += 1
        work.seq = self._seq
        self._queue.append(work)

    def is_queued(self, result: TxnResult) -> bool:
        """Whether queued work will still settle `result`."""
        return any(w.result is result for w in self._queue)

    def _head(self) -> Work | None:
        return min(self._queue, key=lambda w: (w.priority, w.seq), default=None)

    def poll_delay(self, now: float, *, batches_unfinished: bool = False) -> float | None:
        """Seconds until `next_request` may have something: 0 means call it now.

        None when only an event can change that: nothing queued, a request in flight
        (its answer wakes the driver), or EndTxn / the bump waiting for the batches (a
        batch settling wakes it). Pass the same `now` and `batches_unfinished` as to
        `next_request`: a due head is then never mistaken for a blocked one (that
        mix-up made the driver wait forever; simulations/regressions/
        transactional-lite-1100.toml)."""
        head = self._head()
        if head is None or self._in_flight is not None:
            return None
        if head.not_before <= now and self._waits_for_batches(head, batches_unfinished):
            return None
        return max(0.0, head.not_before - now)

    def _waits_for_batches(self, work: Work, batches_unfinished: bool) -> bool:
        """EndTxn and the epoch bump go only once every batch is settled (Java)."""
        ending = work.kind is K.END_TXN or (work.kind is K.INIT_PRODUCER_ID and work.bump)
        return ending and (batches_unfinished or bool(self.pending_partitions))

    def next_request(self, now: float, *, batches_unfinished: bool = False) -> TxnRequest | None:
        """The next coordinator request to send, or None (nothing to do now)."""
        if self._in_flight is not None or self.state is TxnState.FATAL_ERROR:
            return None
        if (
            self.new_partitions
            and self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING)
            and not any(w.kind is K.ADD_PARTITIONS for w in self._queue)
        ):
            self.enqueue(Work(K.ADD_PARTITIONS, Priority.ADD_PARTITIONS_OR_OFFSETS))
        while (work := self._head()) is not None:
            if work.not_before > now:
                return None
            if self._waits_for_batches(work, batches_unfinished):
                return None
            if work.kind is K.END_TXN and self._end_locally(work):
                continue
            if work.kind is not K.FIND_COORDINATOR:
                coordinator = self._coordinator_for(work)
                if coordinator is None:
                    self.lookup_coordinator(work.key_type, work.key or self.transactional_id)
                    continue
            else:
                coordinator = None
            request = self._build(work, coordinator)
            if request is None:
                continue  # the build failed fatally or found nothing to send
            self._queue.remove(work)
            self._in_flight = request
            return request
        return None

    def _coordinator_for(self, work: Work) -> Coordinator | None:
        if work.key_type is CoordinatorType.GROUP:
            return self.group_coordinators.get(work.key)
        return self.coordinator

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

    def _end_locally(self, work: Work) -> bool:
        """EndTxn needs no request: nothing was added, or the bump replaces it."""
        if work.settle:
            return False  # the transaction is cleared, but the coordinator may hold it
        plan = self.abort_plan
        if plan is AbortPlan.BUMP_INSTEAD or (
            plan is AbortPlan.END_TXN_THEN_BUMP and not self.transaction_started
        ):
            self._queue.remove(work)
            self.enqueue(self.bump_work())
            return True
        if self.transaction_started:
            return False
        self._queue.remove(work)
        self.finish_transaction()
        return True

    def bump_work(self) -> Work:
        return Work(K.INIT_PRODUCER_ID, Priority.EPOCH_BUMP, bump=True)

    def _build(self, work: Work, coordinator: Coordinator | None) -> TxnRequest | None:
        version = self.version_of(work.kind)
        if version is None or (work.kind is K.FIND_COORDINATOR and version < 1):
            self.set_fatal(
                FatalBrokerError(
                    ErrorCode.UNSUPPORTED_VERSION,
                    f"the broker does not support {work.kind.value} at a version "
                    "a transactional producer can use",
                )
            )
            return None
        tid, pid, epoch = self.transactional_id, self.producer_id, self.producer_epoch
        message: Any
        match work.kind:
            case K.FIND_COORDINATOR:
                message = build.find_coordinator(work.key, work.key_type, version)
            case K.INIT_PRODUCER_ID:
                if not work.bump or version < 3:
                    # Pre-KIP-360 coordinators bump the epoch of a known transactional
                    # id on any InitProducerId; they just cannot check it is us.
                    pid, epoch = -1, -1
                message = build.init_producer_id(tid, self.transaction_timeout, pid, epoch)
            case K.ADD_PARTITIONS:
                if not work.partitions:
                    work.partitions = frozenset(self.new_partitions)
                    self.pending_partitions |= work.partitions
                    self.new_partitions.clear()
                if not work.partitions:
                    self._queue.remove(work)
                    return None
                message = build.add_partitions_to_txn(tid, pid, epoch, work.partitions, version)
            case K.ADD_OFFSETS:
                assert work.group is not None
                message = build.add_offsets_to_txn(tid, pid, epoch, work.group.group_id)
            case K.TXN_OFFSET_COMMIT:
                assert work.group is not None
                message = build.txn_offset_commit(tid, pid, epoch, work.group, work.offsets)
            case K.END_TXN:
                message = build.end_txn(tid, pid, epoch, work.committed)
        return TxnRequest(work.kind, message, version, coordinator, work, pid, epoch)

    def _backoff(self, attempts: int) -> float:
        return min(
            self.retry_backoff * (1 << min(max(attempts - 1, 0), 30)), self.retry_backoff_max
        )

    def retry_work(self, work: Work, now: float, backoff: float | None = None) -> None:
        """Queue `work` again after `backoff` (None: retry_backoff, growing)."""
        if (
            self.state in (TxnState.ABORTING, TxnState.ABORTABLE_ERROR)
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
        work.attempts += 1
        work.not_before = now + (self._backoff(work.attempts) if backoff is None else backoff)
        self.enqueue(work)

    def _drop_queued(self, error: KafkaError) -> None:
        """Drop queued transaction work (keep coordinator lookups, bumps and the resend
        of an unanswered AddPartitionsToTxn: see `_retry`)."""
        keep: list[Work] = []
        for work in self._queue:
            if (
                work.kind is K.FIND_COORDINATOR
                or (work.kind is K.INIT_PRODUCER_ID and work.bump)
                or (work.kind is K.ADD_PARTITIONS and work.unanswered)
            ):
                keep.append(work)
            else:
                self.pending_partitions -= work.partitions
                if work.result is not None:
                    work.result.set_error(error)
        self._queue = keep


__all__ = ["TxnRequestQueue"]
