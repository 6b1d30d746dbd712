"""`TransactionalSequencer`: the idempotent `Sequencer` with the transaction's rules.

The seam between the producer core and the transaction manager. The core asks its
sequencing policy, for every ready batch, whether it may be drained; this policy adds
the transaction's rule (a partition must be in the transaction first: KIP-98's
AddPartitionsToTxn, or under transactions v2 simply "a transaction is open") and tells
the manager about every partition it meets, so a driver need not call
`maybe_add_partition` on each send (it may, to start AddPartitionsToTxn during linger).

The manager owns InitProducerId (`owns_producer_id`): the core never asks the driver
for a producer id or an epoch bump; the manager's `TxnUpdate.new_producer_id` is
installed with `core.set_producer_id`.

A batch that fails in a transaction makes the transaction abortable (or fatal, when the
error or the core's state is fatal): `on_final` carries the error and reports it to the
manager at once. A fatal error of the core (`on_fatal`) makes the manager fatal too.

KIP-360 under a transaction: an epoch bump is never done mid-transaction (InitProducerId
with the current epoch would abort it). `request_epoch_bump` remembers the partition;
the manager makes the transaction abortable and bumps after the abort, and the core's
`set_producer_id` then rewrites the partition from sequence 0. UNKNOWN_PRODUCER_ID after
retention removed our writes needs no bump when it is safe: the base `Sequencer`
restarts that partition's sequences in place (`reset_sequences`) and the transaction
goes on.
"""

from __future__ import annotations

from trio_kafka.errors import KafkaError
from trio_kafka.producer._batch import ProducerBatch
from trio_kafka.producer._sequencer import Sequencer, TopicPartition
from trio_kafka.producer.transactions import TransactionManager


class TransactionalSequencer(Sequencer):
    """The sequencing policy of a transactional producer (see module doc)."""

    owns_producer_id = True

    def __init__(self, manager: TransactionManager) -> None:
        super().__init__(is_transactional=True)
        self.txn = manager

    def __repr__(self) -> str:
        return f"<TransactionalSequencer {super().__repr__()} {self.txn!r}>"

    def drain_blocked(self, batch: ProducerBatch) -> bool:
        tp = (batch.topic, batch.partition)
        if not self.txn.is_send_to_partition_allowed(tp):
            self.txn.register_ready_partition(tp)
            return True
        return super().drain_blocked(batch)

    def assign(self, batch: ProducerBatch) -> None:
        super().assign(batch)
        self.txn.partition_sent((batch.topic, batch.partition))

    def on_final(self, batch: ProducerBatch, *, gap: bool, error: KafkaError | None = None) -> None:
        tp = (batch.topic, batch.partition)
        reported = self.fatal_error or error  # after a fatal error, the cause is that
        # First the batch's own error (the first error is the one the caller sees), then
        # the sequencing, which may ask for a bump (the transaction is abortable by then).
        self.txn.batch_failed(
            tp,
            reported or KafkaError(f"a batch for {tp[0]}-{tp[1]} failed"),
            sequenced=batch.base_sequence >= 0,
        )
        super().on_final(batch, gap=gap, error=error)

    def request_epoch_bump(self, tp: TopicPartition) -> None:
        # No bump mid-transaction: remember the partition; the abort bumps.
        self.partitions_to_rewrite.add(tp)
        self.txn.epoch_bump_needed(tp)

    def on_fatal(self, error: KafkaError) -> None:
        super().on_fatal(error)
        self.txn.producer_failed(error)
