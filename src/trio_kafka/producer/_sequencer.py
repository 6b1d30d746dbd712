"""Idempotence bookkeeping: producer id and epoch, a sequence per partition (KIP-98/360).

Theory of operation. A batch gets its producer id, epoch and base sequence when it is
first drained, and keeps them on every retry, so the broker can deduplicate a retry of
an attempt that landed. Each partition keeps its unfinished sequenced batches sorted by
sequence (`inflight`: sent, or waiting for a retry), its next sequence and its last
acknowledged sequence and offset.

Order under retries (Java's rules): a retried batch goes back to its queue in sequence
order; while a partition has a batch being retried, only the lowest unfinished sequence
may be sent, one request at a time, and no new batch is sequenced.

KIP-360 recovery. OUT_OF_ORDER_SEQUENCE_NUMBER for the batch right after the last
acknowledged one (a real gap) and UNKNOWN_PRODUCER_ID (the broker lost our state) do
not kill the producer: the partition is marked for rewriting and an epoch bump is
requested. Draining stops until no produce request is in flight; then the driver gets a
new epoch (InitProducerId with the current id and epoch, or a local bump) and calls
`new_producer_id`, which rewrites the marked partitions' unfinished batches from
sequence 0 under the new epoch, in their old order, and they are retried. Other
partitions finish their old-epoch batches with their old sequences (dedup still works)
and start at 0 with the new epoch once those are settled. A batch that ends without a
definite answer (expired after a request left) leaves its partition "unresolved": no
new batch is sequenced there until its in-flight batches settle, then either the
sequences line up or the epoch is bumped.

Transactional exception (KIP-360, as Java's `canRetry`): UNKNOWN_PRODUCER_ID when
retention or truncation removed everything we had acknowledged on the partition
(`last_acked_offset < log_start_offset`) means the broker forgot us for an expected
reason. An idempotent producer bumps; a transactional one may not (a bump aborts the
open transaction), so `reset_sequences` restarts the partition's unfinished batches
from sequence 0 under the same id and epoch and retries them. Unlike Java, the reset is
refused when an earlier attempt of one of those batches may have been written, another
request for the partition is still out, or the partition is unresolved: a write under
the old sequences could land, and nothing would deduplicate or order it.
Then the policy's `request_epoch_bump` path is taken instead (for a transaction:
abortable, bump after the abort).

`NoSequencing` is the policy without idempotence; `SequencingPolicy` is what the core
needs of either (both, and the phase table, in producer/_sequencing.py). A transaction does not subclass the `Sequencer`: it plugs
`SequencerHooks` into it (its `TransactionManager`), called at five named places,
and owns InitProducerId (`owns_producer_id`: the core then never asks the driver for
one).
"""

from __future__ import annotations

from trio_kafka.errors import ErrorCode, KafkaError
from trio_kafka.producer._batch import BatchState, ProducerBatch
from trio_kafka.producer._rule_context import rules_for
from trio_kafka.producer._sequencing import (
    NoSequencing,
    PartitionPhase,
    PartitionSequence,
    SequencerHooks,
    SequenceVerdict,
    SequencingPolicy,
    TopicPartition,
)

_MAX_EPOCH = 32767
_SEQUENCE_WRAP = 2**31


class SequencerRules:
    """The sequencer's part of the rules (producer/_rules.py gathers them into `Rules`)."""

    def epoch_bump(self, sequencing: SequencingPolicy) -> tuple[int, int]:
        """The id and epoch an idempotent producer bumps to: the next epoch of its own
        id (Java's local bump); (-1, -1) only when the epoch is exhausted."""
        return sequencing.next_local_epoch()

    def unknown_producer(
        self,
        sequencer: Sequencer,
        batch: ProducerBatch,
        entry: PartitionSequence,
        log_start_offset: int,
    ) -> SequenceVerdict:
        """UNKNOWN_PRODUCER_ID for a sequenced batch: retried after asking for an epoch
        bump (or a sequence reset in a transaction), or failed."""
        return sequencer.unknown_producer(batch, entry, log_start_offset)

    def drop_on_rewrite(self, batch: ProducerBatch) -> bool:
        """At an epoch bump, a batch of a partition being rewritten from sequence 0: one
        an earlier attempt of which may have landed is dropped (Ambiguous), never
        resent under the new epoch, where its old sequence no longer deduplicates."""
        return batch.maybe_written


class Sequencer:
    """Idempotent producer state (see module doc); with `hooks`, a transaction's."""

    enabled = True

    def __init__(
        self,
        *,
        is_transactional: bool = False,
        hooks: SequencerHooks | None = None,
        rules: SequencerRules | None = None,
    ) -> None:
        self.is_transactional = is_transactional
        self.hooks = hooks
        self.rules = rules_for(SequencerRules) if rules is None else rules
        # A transaction's manager runs InitProducerId itself.
        self.owns_producer_id = hooks is not None
        # Current producer id and epoch (-1: InitProducerId not done yet).
        self.producer_id = -1
        self.producer_epoch = -1
        # An epoch bump was requested and not applied; partitions to rewrite then.
        self.epoch_bump_required = False
        self.partitions_to_rewrite: set[TopicPartition] = set()
        self.partitions: dict[TopicPartition, PartitionSequence] = {}
        # Non-None once the producer cannot go on (fenced, unauthorised).
        self.fatal_error: KafkaError | None = None

    def __repr__(self) -> str:
        return (
            f"<Sequencer pid={self.producer_id} epoch={self.producer_epoch} "
            f"bump={self.epoch_bump_required} partitions={len(self.partitions)}>"
        )

    def entry(self, tp: TopicPartition) -> PartitionSequence:
        e = self.partitions.get(tp)
        if e is None:
            e = self.partitions[tp] = PartitionSequence(self.producer_id, self.producer_epoch)
        return e

    # -- drain -----------------------------------------------------------------------

    def phase(self, e: PartitionSequence) -> PartitionPhase:
        """The phase of partition `e` (see `PartitionPhase`)."""
        if e.inflight and (e.producer_id, e.producer_epoch) != (
            self.producer_id,
            self.producer_epoch,
        ):
            return PartitionPhase.OLD_EPOCH
        if e.unresolved_next is not None:
            return PartitionPhase.UNRESOLVED
        if e.retrying:
            return PartitionPhase.RETRYING
        return PartitionPhase.SEQUENCING

    def drain_blocked(self, batch: ProducerBatch) -> bool:
        """May `batch` (its partition's first queued) not be sent now? (The table in
        `PartitionPhase`.)"""
        hooks = self.hooks
        if hooks is not None and not hooks.may_drain((batch.topic, batch.partition)):
            return True
        if self.producer_id < 0 or self.epoch_bump_required or self.fatal_error is not None:
            return True
        e = self.entry((batch.topic, batch.partition))
        if batch.base_sequence < 0:  # a new batch
            return self.phase(e) is not PartitionPhase.SEQUENCING
        if batch.base_sequence != e.first_sequence():
            return True  # a retry waits until every lower sequence is settled
        # One request at a time while retrying.
        return bool(e.retrying) and any(b.state is BatchState.IN_FLIGHT for b in e.inflight)

    def assign(self, batch: ProducerBatch) -> None:
        """Give a batch drained for the first time its id, epoch and sequence."""
        if batch.base_sequence >= 0:
            return
        e = self.entry((batch.topic, batch.partition))
        if (
            e.producer_id != self.producer_id or e.producer_epoch != self.producer_epoch
        ) and not e.inflight:
            e.producer_id = self.producer_id
            e.producer_epoch = self.producer_epoch
            e.next_sequence = 0
            e.last_acked_sequence = -1
        batch.producer_id = self.producer_id
        batch.producer_epoch = self.producer_epoch
        batch.base_sequence = e.next_sequence
        batch.is_transactional = self.is_transactional
        e.next_sequence = (e.next_sequence + len(batch.records)) % _SEQUENCE_WRAP
        e.inflight.append(batch)  # sequences grow: appending keeps the order
        if self.hooks is not None:
            self.hooks.sequenced((batch.topic, batch.partition))

    # -- outcomes --------------------------------------------------------------------

    def on_success(self, batch: ProducerBatch) -> None:
        if batch.base_sequence < 0:
            return
        e = self.entry((batch.topic, batch.partition))
        if batch.producer_id == e.producer_id and batch.producer_epoch == e.producer_epoch:
            e.last_acked_sequence = max(e.last_acked_sequence, batch.last_sequence)
            if batch.base_offset >= 0:
                e.last_acked_offset = max(
                    e.last_acked_offset, batch.base_offset + len(batch.records) - 1
                )
        e.remove(batch)

    def on_retry(self, batch: ProducerBatch) -> None:
        if batch.base_sequence >= 0:
            self.entry((batch.topic, batch.partition)).retrying.add(batch)

    def on_split(self, batch: ProducerBatch, pieces: list[ProducerBatch]) -> None:
        """`batch` was refused as too large and cut into `pieces` (MESSAGE_TOO_LARGE):
        they take its place and its sequences (as Java's split keeps the producer id
        and epoch and numbers the pieces from the batch's base sequence: the refused
        batch appended nothing, so the range is free), and go out as retries do, one
        request at a time, lowest sequence first, before any new batch."""
        if batch.base_sequence < 0:
            return
        e = self.entry((batch.topic, batch.partition))
        if batch in e.inflight:
            at = e.inflight.index(batch)
            e.inflight[at : at + 1] = pieces
        e.retrying.discard(batch)
        e.retrying.update(pieces)

    def on_final(self, batch: ProducerBatch, *, gap: bool, error: KafkaError | None = None) -> None:
        """A batch ended without success; the core calls this before finishing it.

        `gap`: it definitely left a hole in the sequences (so later ones will be
        rejected): rewrite the partition under a new epoch. Otherwise (it may have
        landed) the partition becomes unresolved until its other batches settle.
        `error` is what the batch fails with (None only from callers older than it).
        """
        tp = (batch.topic, batch.partition)
        if self.hooks is not None:
            # First the batch's own error (after a fatal error, the cause is that): the
            # first error is the one the caller sees; then the sequencing, which may ask
            # for a bump (the transaction is abortable by then).
            reported = self.fatal_error or error
            self.hooks.batch_failed(
                batch, reported or KafkaError(f"a batch for {tp[0]}-{tp[1]} failed")
            )
        if batch.base_sequence < 0:
            return
        e = self.entry(tp)
        e.remove(batch)
        if gap:
            self.request_epoch_bump(tp)
        else:
            nxt = batch.last_sequence + 1
            e.unresolved_next = nxt if e.unresolved_next is None else max(e.unresolved_next, nxt)

    def request_epoch_bump(self, tp: TopicPartition) -> None:
        """`tp`'s sequences must restart from 0 under a new epoch (KIP-360); in a
        transaction the bump waits for the abort (`hooks.defer_bump`)."""
        self.partitions_to_rewrite.add(tp)
        if self.hooks is None or not self.hooks.defer_bump(tp):
            self.epoch_bump_required = True

    def on_fatal(self, error: KafkaError) -> None:
        """The core hit a fatal error: nothing more is drained."""
        if self.fatal_error is None:
            self.fatal_error = error
        if self.hooks is not None:
            self.hooks.producer_failed(error)

    def reset_sequences(self, tp: TopicPartition, *, failed: ProducerBatch | None = None) -> bool:
        """Restart `tp`'s unfinished batches from sequence 0 under the current id and
        epoch, in their order, without a bump (Java's `startSequencesAtBeginning`).

        `failed` is the batch whose answer asked for it (its request is back). Refused
        (False, nothing changed) when that could duplicate or mis-sequence a write: an
        earlier attempt of one of the batches may have been written; another request
        for the partition is still out (its old sequence may yet land: brokers accept
        any first sequence from a producer they do not know); the partition is
        unresolved; or it belongs to an older epoch (the epoch change rewrites it).
        """
        e = self.entry(tp)
        if (
            e.unresolved_next is not None
            or any(b.state is BatchState.IN_FLIGHT and b is not failed for b in e.inflight)
            or tp in self.partitions_to_rewrite
            or (e.producer_id, e.producer_epoch) != (self.producer_id, self.producer_epoch)
            or any(batch.maybe_written for batch in e.inflight)
        ):
            return False
        sequence = 0
        for batch in e.inflight:
            batch.base_sequence = sequence
            batch.sequence_reset = True
            sequence += len(batch.records)
        e.next_sequence = sequence
        e.last_acked_sequence = -1
        return True

    def unknown_producer(
        self, batch: ProducerBatch, e: PartitionSequence, log_start_offset: int
    ) -> SequenceVerdict:
        """UNKNOWN_PRODUCER_ID for `batch` (sequenced, of the partition `e`): retried
        after asking for an epoch bump (or, in a transaction whose writes retention
        removed, after restarting the partition's sequences in place); failed in a
        transaction that cannot bump (it becomes abortable)."""
        tp = (batch.topic, batch.partition)
        if log_start_offset == -1 or batch.sequence_reset:
            return SequenceVerdict.RETRY
        if e.last_acked_offset < log_start_offset:
            # Retention removed our last write: expected to lose producer state.
            # A transaction restarts the partition's sequences rather than bump
            # (a bump would abort it), when that cannot duplicate a write.
            if not (self.is_transactional and self.reset_sequences(tp, failed=batch)):
                self.request_epoch_bump(tp)
            return SequenceVerdict.RETRY
        if not self.is_transactional:
            self.request_epoch_bump(tp)
            return SequenceVerdict.RETRY
        return SequenceVerdict.FAIL

    def _is_next(self, e: PartitionSequence, sequence: int) -> bool:
        return sequence - e.last_acked_sequence == 1

    def on_sequence_error(
        self, batch: ProducerBatch, code: int, log_start_offset: int
    ) -> SequenceVerdict:
        """Java's `TransactionManager.canRetry` for the idempotence errors: what the
        error means for `batch`, after recording what it says of the partition (an
        epoch bump requested, or its sequences reset)."""
        if batch.base_sequence < 0:
            return SequenceVerdict.BY_ERROR_TABLE
        tp = (batch.topic, batch.partition)
        e = self.entry(tp)
        if code == ErrorCode.UNKNOWN_PRODUCER_ID:
            return self.rules.unknown_producer(self, batch, e, log_start_offset)
        if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
            if e.unresolved_next is None and (
                batch.sequence_reset or not self._is_next(e, batch.base_sequence)
            ):
                return SequenceVerdict.RETRY  # an earlier batch failed; this one follows it
            if not self.is_transactional:
                if e.unresolved_next is None or e.unresolved_next == batch.base_sequence:
                    self.request_epoch_bump(tp)  # a real gap in the broker's log
                return SequenceVerdict.RETRY
            return SequenceVerdict.FAIL
        return SequenceVerdict.BY_ERROR_TABLE

    def resolve_sequences(self) -> None:
        """Java's `maybeResolveSequences`: settle partitions left unresolved."""
        for tp, e in self.partitions.items():
            if e.unresolved_next is None or e.inflight:
                continue
            if not self._is_next(e, e.next_sequence):
                self.request_epoch_bump(tp)
            e.unresolved_next = None

    # -- epoch -----------------------------------------------------------------------

    def next_local_epoch(self) -> tuple[int, int]:
        """The id and epoch of a client-side bump; (-1, -1) when the epoch is exhausted
        (then a fresh InitProducerId is needed)."""
        if self.producer_epoch >= _MAX_EPOCH:
            return -1, -1
        return self.producer_id, self.producer_epoch + 1

    def new_producer_id(self, producer_id: int, producer_epoch: int) -> list[ProducerBatch]:
        """Install an id and epoch (first InitProducerId, or an epoch bump).

        Returns the batches that must now end as Ambiguous: an earlier attempt of theirs
        may have landed, and re-sequencing them under the new epoch would defeat the
        broker's deduplication (a duplicate). Every other unfinished batch of a
        partition marked for rewriting gets a new sequence from 0, in its old order.
        """
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        dropped: list[ProducerBatch] = []
        if producer_id < 0:
            return dropped
        for tp in self.partitions_to_rewrite:
            e = self.entry(tp)
            sequence = 0
            keep = []
            for batch in e.inflight:
                # A request still out could land under the old epoch after the rewrite
                # (the bump waits for none in flight: seed 10816290 broke that).
                assert batch.state is not BatchState.IN_FLIGHT, f"rewritten in flight: {batch}"
                if self.rules.drop_on_rewrite(batch):
                    dropped.append(batch)
                    e.retrying.discard(batch)
                    continue
                keep.append(batch)
                batch.producer_id = producer_id
                batch.producer_epoch = producer_epoch
                batch.base_sequence = sequence
                batch.sequence_reset = True
                sequence += len(batch.records)
            e.inflight = keep
            e.producer_id = producer_id
            e.producer_epoch = producer_epoch
            e.next_sequence = sequence
            e.last_acked_sequence = -1
            e.last_acked_offset = -1
            e.unresolved_next = None
        self.partitions_to_rewrite.clear()
        self.epoch_bump_required = False
        return dropped


__all__ = [  # (the policy's vocabulary is re-exported: its home is producer/_sequencing.py)
    "NoSequencing",
    "PartitionPhase",
    "PartitionSequence",
    "SequenceVerdict",
    "Sequencer",
    "SequencerHooks",
    "SequencerRules",
    "SequencingPolicy",
    "TopicPartition",
]
