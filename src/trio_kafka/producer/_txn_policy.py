"""`TransactionalSequencer`: the idempotent `Sequencer` with the transaction's rules.

The seam between the producer core and the transaction manager. The core asks its
sequencing policy, for every ready batch, whether it may be drained; this policy adds
the transaction's rule (a partition must be in the transaction first: KIP-98's
AddPartitionsToTxn, or under transactions v2 simply "a transaction is open") and tells
the manager about every partition it meets, so a driver need not call
`maybe_add_partition` on each send (it may, to start AddPartitionsToTxn during linger).

A batch that fails in a transaction makes the transaction abortable (or fatal, when the
core saw a fatal error): the manager learns it through a done hook on the batch, since
`on_final` is told only whether the sequences have a gap, not the error.

KIP-360 under a transaction: an epoch bump is never done mid-transaction (InitProducerId
with the current epoch would abort it). A partition whose sequences need rewriting is
remembered; the manager makes the transaction abortable and bumps after the abort,
and the core's `set_producer_id` then rewrites the partition from sequence 0.
"""

from __future__ import annotations

from trio_kafka.errors import KafkaError
from trio_kafka.producer._batch import ProducerBatch
from trio_kafka.producer._sequencer import Sequencer, TopicPartition
from trio_kafka.producer.transactions import TransactionManager


class TransactionalSequencer(Sequencer):
    """The sequencing policy of a transactional producer (see module doc)."""

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

    def on_final(self, batch: ProducerBatch, *, gap: bool) -> None:
        super().on_final(batch, gap=gap)
        tp = (batch.topic, batch.partition)
        txn = self.txn
        sequenced = batch.base_sequence >= 0

        def report(b: ProducerBatch) -> None:
            error = b.error if isinstance(b.error, KafkaError) else None
            if self.fatal_error is not None:
                error = self.fatal_error
            txn.batch_failed(
                tp,
                error or KafkaError(f"a batch for {tp[0]}-{tp[1]} failed"),
                sequenced=sequenced,
            )

        batch.add_done_hook(report)

    def request_epoch_bump(self, tp: TopicPartition) -> None:
        # No bump mid-transaction: remember the partition; the abort bumps.
        self.partitions_to_rewrite.add(tp)
        self.txn.epoch_bump_needed(tp)
