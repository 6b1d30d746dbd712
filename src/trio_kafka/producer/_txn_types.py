"""Values and errors of the transaction manager (see `trio_kafka.producer.transactions`).

The transaction's exception classes live in `trio_kafka.errors` (re-exported here) and
derive from the shared tree (`AbortableError`, `FatalError`, `AmbiguousError`), so a
caller acts on the base class: abort on `AbortableError`, close on `FatalError`, find
out what happened on `AmbiguousError`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import attrs

from trio_kafka.errors import (
    IllegalTransactionStateError,
    KafkaError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionOutcomeUnknownError,
    TransactionTimedOutError,
)

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
    """How the open transaction must end if it aborts; it only ever escalates (`max`)
    until the transaction is finished."""

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


__all__ = [
    "Coordinator",
    "CoordinatorType",
    "GroupMetadata",
    "IllegalTransactionStateError",
    "OffsetAndMetadata",
    "Priority",
    "TopicPartition",
    "TransactionAbortableError",
    "TransactionAbortedError",
    "TransactionOutcomeUnknownError",
    "TransactionTimedOutError",
    "TxnRequest",
    "TxnRequestKind",
    "TxnResult",
    "TxnUpdate",
    "Work",
    "bump_work",
]
