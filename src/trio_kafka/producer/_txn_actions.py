"""The seam between the transaction manager and the modules that decide for it.

`_txn_handlers.py` (what each coordinator answer means) and `_txn_outgoing.py` (what to
send next) see the manager as `TxnActions`: the facts they read and the named actions
they decide on. They never touch its private members, and they do not import the
manager's module (which imports them).
"""

from __future__ import annotations

from typing import Protocol

from trio_kafka.errors import KafkaError
from trio_kafka.producer._txn_queue import TxnRequestQueue
from trio_kafka.producer._txn_state import TxnState
from trio_kafka.producer._txn_types import AbortPlan, TopicPartition, TxnUpdate, Work


class TxnActions(Protocol):
    """What the response handlers and the request choice read of the transaction
    manager, and the actions they decide on: all public, and the manager applies them
    (`_txn_manager.TransactionManager` is the one implementation)."""

    transactional_id: str
    transaction_timeout: float
    state: TxnState
    producer_id: int
    producer_epoch: int
    last_error: KafkaError | None
    partitions: set[TopicPartition]
    new_partitions: set[TopicPartition]
    pending_partitions: set[TopicPartition]
    transaction_started: bool
    abort_plan: AbortPlan
    requests: TxnRequestQueue

    def retry_work(self, work: Work, now: float, backoff: float | None = None) -> None: ...
    def escalate(self, plan: AbortPlan) -> None: ...
    def make_abortable(
        self, error: KafkaError, *, bump: bool = True, skip_end: bool = False
    ) -> None: ...
    def set_fatal(self, error: KafkaError) -> None: ...
    def finish_transaction(self) -> None: ...
    def producer_id_initialised(self, producer_id: int, producer_epoch: int) -> TxnUpdate: ...
    def end_txn_bumped(self, producer_id: int, producer_epoch: int) -> TxnUpdate: ...
    def end_txn_bumps_epoch(self) -> bool: ...
    def commit_outcome_unknown(self, error: KafkaError, now: float) -> None: ...
    def transaction_known(self) -> None: ...
    def take_new_partitions(self) -> frozenset[TopicPartition]: ...
    def release_pending(self, partitions: frozenset[TopicPartition]) -> None: ...
    def partitions_answered(
        self, partitions: frozenset[TopicPartition], *, added: bool
    ) -> None: ...


__all__ = ["TxnActions"]
