"""The coordinator request queue of a transaction: a component its manager owns.

Theory of operation: the manager's calls and the response handlers queue `Work`; the
driver takes one `TxnRequest` at a time with `TransactionManager.next_request(now)`.
Requests go in Java's priority order (FindCoordinator, InitProducerId,
AddPartitionsToTxn / AddOffsetsToTxn / TxnOffsetCommit, EndTxn, an epoch-bumping
InitProducerId), equal priorities in queue order (`head`); retries wait an exponential
backoff (`retry`). Only the request in flight may be answered (`answered`): anything
else is stale.

The queue owns the mechanics of sending and nothing of the transaction: the queued work
and its order, the request in flight, the negotiated versions, the coordinators found
(`coordinator_for`, `lookup_coordinator`) and the backoff. What to send and when (an
EndTxn with nothing to end, the partitions an AddPartitionsToTxn carries, what an abort
drops) is decided for the manager in producer/_txn_outgoing.py; `start` builds the
request decided on, with the ids it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from trio_kafka.producer import _txn_requests as build
from trio_kafka.producer._backoff import ExponentialBackoff
from trio_kafka.producer._txn_types import (
    Coordinator,
    CoordinatorType,
    Priority,
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
    """See the module doc. Owned by `TransactionManager` (its `requests`)."""

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
                message = build.find_coordinator(work.key, work.key_type, version)
            case K.INIT_PRODUCER_ID:
                if not work.bump or version < 3:
                    # Pre-KIP-360 coordinators bump the epoch of a known transactional
                    # id on any InitProducerId; they just cannot check it is us.
                    pid, epoch = -1, -1
                message = build.init_producer_id(tid, transaction_timeout, pid, epoch)
            case K.ADD_PARTITIONS:
                message = build.add_partitions_to_txn(tid, pid, epoch, work.partitions, version)
            case K.ADD_OFFSETS:
                assert work.group is not None
                message = build.add_offsets_to_txn(tid, pid, epoch, work.group.group_id)
            case K.TXN_OFFSET_COMMIT:
                assert work.group is not None
                message = build.txn_offset_commit(tid, pid, epoch, work.group, work.offsets)
            case K.END_TXN:
                message = build.end_txn(tid, pid, epoch, work.committed)
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


__all__ = ["TxnRequestQueue"]
