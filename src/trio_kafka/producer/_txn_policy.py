"""`TransactionHooks`: the transaction's rules, plugged into the idempotent `Sequencer`.

The seam between the producer core and the transaction manager. The core asks its
sequencing policy, for every ready batch, whether it may be drained; this policy adds
the transaction's rule (`may_drain`: a partition must be in the transaction first: KIP-98's
AddPartitionsToTxn, or under transactions v2 simply "a transaction is open") and tells
the manager about every partition it meets, so a driver need not call
`maybe_add_partition` on each send (it may, to start AddPartitionsToTxn during linger).

The manager owns InitProducerId (`owns_producer_id`): the core never asks the driver
for a producer id or an epoch bump; the manager's `TxnUpdate.new_producer_id` is
installed with `core.set_producer_id`. `TransactionalSequencer(manager)` builds the
combination.

A batch that fails in a transaction makes the transaction abortable (or fatal, when the
error or the core's state is fatal): `batch_failed` reports it to the manager at once.
A fatal error of the core (`producer_failed`) makes the manager fatal too.

KIP-360 under a transaction: an epoch bump is never done mid-transaction (InitProducerId
with the current epoch would abort it). `defer_bump` keeps the partition marked;
the manager makes the transaction abortable and bumps after the abort, and the core's
`set_producer_id` then rewrites the partition from sequence 0. UNKNOWN_PRODUCER_ID after
retention removed our writes needs no bump when it is safe: the base `Sequencer`
restarts that partition's sequences in place (`reset_sequences`) and the transaction
goes on.
"""

from __future__ import annotations

from collections.abc import Callable

from trio_kafka.errors import KafkaError
from trio_kafka.producer._batch import ProducerBatch
from trio_kafka.producer._sequencer import Sequencer, TopicPartition
from trio_kafka.producer.transactions import TransactionManager


class TransactionHooks:
    """The `SequencerHooks` of a transaction (see module doc).

    `hold(manager) -> bool`, when given, is asked first on every drain: True holds every
    batch back (the trio driver's: the transaction is failing, and its loop fails them).
    `blocked()` is called when a ready batch waits for its partition to join the
    transaction (the driver wakes its coordinator loop to send AddPartitionsToTxn).
    """

    def __init__(
        self,
        manager: TransactionManager,
        *,
        hold: Callable[[], bool] | None = None,
        blocked: Callable[[], None] | None = None,
    ) -> None:
        self.txn = manager
        self._hold = hold
        self._blocked = blocked

    def __repr__(self) -> str:
        return f"<TransactionHooks {self.txn!r}>"

    def may_drain(self, tp: TopicPartition) -> bool:
        if self._hold is not None and self._hold():
            return False
        txn = self.txn
        if txn.is_send_to_partition_allowed(tp):
            return True
        txn.register_ready_partition(tp)
        # Transactions v2 allow it at once (the Produce request adds it); v1 must wait
        # for AddPartitionsToTxn, which the coordinator loop sends.
        if txn.is_send_to_partition_allowed(tp):
            return True
        if self._blocked is not None and txn.new_partitions:
            self._blocked()
        return False

    def sequenced(self, tp: TopicPartition) -> None:
        self.txn.partition_sent(tp)

    def batch_failed(self, batch: ProducerBatch, error: KafkaError) -> None:
        self.txn.batch_failed(
            (batch.topic, batch.partition), error, sequenced=batch.base_sequence >= 0
        )

    def defer_bump(self, tp: TopicPartition) -> bool:
        # No bump mid-transaction: the partition stays marked; the abort bumps.
        self.txn.epoch_bump_needed(tp)
        return True

    def producer_failed(self, error: KafkaError) -> None:
        self.txn.producer_failed(error)


def TransactionalSequencer(
    manager: TransactionManager,
    *,
    hold: Callable[[], bool] | None = None,
    blocked: Callable[[], None] | None = None,
) -> Sequencer:
    """The idempotent `Sequencer` with a transaction's hooks."""
    return Sequencer(
        is_transactional=True, hooks=TransactionHooks(manager, hold=hold, blocked=blocked)
    )
