"""Idempotence: producer id and epoch, a sequence per partition, and each partition's
phase (KIP-98/360).

Theory of operation. A batch gets its producer id, epoch and base sequence when it is
first drained (`assign`, which calls `ProducerBatch.sequenced`), and keeps them on every
retry, so the broker can deduplicate a retry of an attempt that landed. Each partition
keeps (`PartitionSequence`) its unfinished sequenced batches sorted by sequence
(`inflight`: sent, or waiting for a retry), its next sequence, its last acknowledged
sequence and offset, and its *phase* (`PartitionPhase`, stored; the table of what each
phase lets through is in its docstring, and the moves between phases are one table,
`_PHASE_MOVES`, applied by `PartitionSequence.move`).

Order under retries (Java's rules): a retried batch goes back to its queue in sequence
order; while a partition has a batch being retried (RETRYING), only the lowest
unfinished sequence may be sent, one request at a time, and no new batch is sequenced.

KIP-360 recovery. OUT_OF_ORDER_SEQUENCE_NUMBER for the batch right after the last
acknowledged one (a real gap) and UNKNOWN_PRODUCER_ID (the broker lost our state) do
not kill the producer: the partition is marked for rewriting and an epoch bump is
requested. Draining stops until no produce request is in flight; then the driver gets a
new epoch (InitProducerId with the current id and epoch, or a local bump) and calls
`new_producer_id`, which rewrites the marked partitions' unfinished batches from
sequence 0 under the new epoch, in their old order, and they are retried. Other
partitions (OLD_EPOCH) finish their old-epoch batches with their old sequences (dedup
still works) and start at 0 with the new epoch once those are settled. A batch that
ends without a definite answer (expired after a request left) leaves its partition
UNRESOLVED: no new batch is sequenced there until its in-flight batches settle, then
either the sequences line up or the epoch is bumped.

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

`SequencingPolicy` is the seam the core uses: it asks whether a ready batch may be
drained, has it number each drained batch, and tells it every outcome; `SequenceVerdict`
is what an idempotence error means for the batch it answered. `NoSequencing` is the
policy without idempotence; `Sequencer` the idempotent one. A transaction does not
subclass the `Sequencer`: it plugs `SequencerHooks` into it (its `TransactionManager`,
core/_transaction.py),
called at five named places, and owns InitProducerId (`owns_producer_id`: the core then
never asks the driver for one).
"""

from __future__ import annotations

import enum
from typing import Protocol

from trio_kafka.core._batch import BatchState, ProducerBatch
from trio_kafka.errors import ErrorCode, KafkaError

TopicPartition = tuple[str, int]


class PartitionPhase(enum.Enum):
    """Where one partition's sequences stand (`PartitionSequence.phase`, moved by
    `PhaseEvent`s through `_PHASE_MOVES`).

    | phase | new batches | retried batches | left when |
    | --- | --- | --- | --- |
    | SEQUENCING | take the next sequences, pipelined once one is acknowledged | (none) | a batch is retried, ends ambiguous, or the epoch moves on |
    | RETRYING | held | lowest sequence first, one request at a time | the retried batches settle |
    | UNRESOLVED | held | lowest sequence first | its other batches settle: the sequences line up (SEQUENCING) or the epoch is bumped |
    | OLD_EPOCH | held | lowest sequence first | its old-epoch batches settle: it restarts at sequence 0 |

    Above all of them: nothing is drained without a producer id, while an epoch bump is
    due (every partition waits; the partitions with a gap are then rewritten from 0) or
    after a fatal error, and a transaction's hooks may hold a partition back.

    A partition's first batch under a producer id (a new partition, a new id, or after a
    sequence reset because the broker lost our state) goes alone: no second one is
    sequenced until one is acknowledged (`PartitionSequence.awaiting_first_ack`; an
    epoch bump keeps the broker's state, so transactions v2, which bump at every
    commit, pay it once per partition). Kafka stores
    any first sequence from a producer it holds no state for on the partition, so if the
    first request were refused (NOT_LEADER_OR_FOLLOWER right after the topic's creation)
    and the second landed, the first could never land after it (franz-go's `okOnSink`
    gate, its issue 223; Java's producer has no such rule).
    """

    SEQUENCING = "sequencing"
    RETRYING = "retrying"
    UNRESOLVED = "unresolved"
    OLD_EPOCH = "old_epoch"


class PhaseEvent(enum.Enum):
    """What happens to a partition's sequences (`PartitionSequence.move`)."""

    RETRIED = "retried"  # a sequenced batch goes back for a retry (or is split in pieces)
    ENDED_UNKNOWN = "ended_unknown"  # a batch ended without a definite answer
    SETTLED = "settled"  # a batch left the partition's unfinished ones
    RESOLVED = "resolved"  # `resolve_sequences` settled an unresolved partition
    EPOCH_MOVED = "epoch_moved"  # a new id or epoch, with batches left under the old one
    REWRITTEN = "rewritten"  # renumbered from 0 under the new epoch (`new_producer_id`)


_S, _R, _U, _O = (
    PartitionPhase.SEQUENCING,
    PartitionPhase.RETRYING,
    PartitionPhase.UNRESOLVED,
    PartitionPhase.OLD_EPOCH,
)
#: (phase, event) -> next phase; None: the phase the partition's batches leave it in
#: (`PartitionSequence._left_in`: OLD_EPOCH while old-epoch batches remain, then
#: UNRESOLVED while an ambiguous end is unsettled, then RETRYING while retries remain,
#: else SEQUENCING). A pair not in the table is a bug in the caller (`move` raises).
_PHASE_MOVES: dict[tuple[PartitionPhase, PhaseEvent], PartitionPhase | None] = {
    (_S, PhaseEvent.RETRIED): _R,
    (_S, PhaseEvent.ENDED_UNKNOWN): _U,
    (_S, PhaseEvent.SETTLED): _S,
    (_S, PhaseEvent.EPOCH_MOVED): _O,
    (_S, PhaseEvent.REWRITTEN): None,
    (_R, PhaseEvent.RETRIED): _R,
    (_R, PhaseEvent.ENDED_UNKNOWN): _U,
    (_R, PhaseEvent.SETTLED): None,
    (_R, PhaseEvent.EPOCH_MOVED): _O,
    (_R, PhaseEvent.REWRITTEN): None,
    (_U, PhaseEvent.RETRIED): _U,
    (_U, PhaseEvent.ENDED_UNKNOWN): _U,
    (_U, PhaseEvent.SETTLED): _U,
    (_U, PhaseEvent.RESOLVED): None,
    (_U, PhaseEvent.EPOCH_MOVED): _O,
    (_U, PhaseEvent.REWRITTEN): None,
    (_O, PhaseEvent.RETRIED): _O,
    (_O, PhaseEvent.ENDED_UNKNOWN): _O,
    (_O, PhaseEvent.SETTLED): None,
    (_O, PhaseEvent.EPOCH_MOVED): _O,
    (_O, PhaseEvent.REWRITTEN): None,
}


class SequenceVerdict(enum.Enum):
    """What an idempotence error means for the batch it answered (`on_sequence_error`)."""

    RETRY = "retry"  # resend it (the sequencer may have asked for a bump or a reset)
    FAIL = "fail"  # it ends with the error
    BY_ERROR_TABLE = "by_error_table"  # not an idempotence matter: the error table decides


class SequencingPolicy(Protocol):
    enabled: bool
    is_transactional: bool
    #: InitProducerId is run by someone else (the transaction manager): the core's
    #: `needs_producer_id` and `epoch_bump_due` stay False for the driver's loop.
    owns_producer_id: bool
    epoch_bump_required: bool
    producer_id: int
    producer_epoch: int

    def drain_blocked(self, batch: ProducerBatch) -> bool: ...
    def assign(self, batch: ProducerBatch) -> None: ...
    def on_success(self, batch: ProducerBatch) -> None: ...
    def on_retry(self, batch: ProducerBatch) -> None: ...
    def on_split(self, batch: ProducerBatch, pieces: list[ProducerBatch]) -> None: ...
    def on_final(
        self, batch: ProducerBatch, *, gap: bool, error: KafkaError | None = None
    ) -> None: ...
    def request_epoch_bump(self, tp: TopicPartition) -> None: ...
    def on_fatal(self, error: KafkaError) -> None: ...
    def on_sequence_error(
        self, batch: ProducerBatch, code: int, log_start_offset: int
    ) -> SequenceVerdict: ...
    def resolve_sequences(self) -> None: ...
    def next_local_epoch(self) -> tuple[int, int]: ...
    def new_producer_id(self, producer_id: int, producer_epoch: int) -> list[ProducerBatch]: ...


class SequencerHooks(Protocol):
    """What a transaction adds to the idempotent `Sequencer` (composition: the
    transactional producer's sequencer is a `Sequencer` with these hooks,
    `TransactionManager`, core/_transaction.py). Each is called at one place, named below."""

    def may_drain(self, tp: TopicPartition) -> bool:
        """`drain_blocked`, first: False holds `tp`'s batches back (the partition is not
        in the transaction yet, or the transaction is failing)."""
        ...

    def sequenced(self, tp: TopicPartition) -> None:
        """`assign`: a batch of `tp` got its sequence (it is about to be sent)."""
        ...

    def batch_failed(self, batch: ProducerBatch, error: KafkaError) -> None:
        """`on_final`, before the sequencing: `batch` ends without success."""
        ...

    def defer_bump(self, tp: TopicPartition) -> bool:
        """`request_epoch_bump`: True when the bump must wait (mid-transaction: the
        abort bumps); `tp` is then only marked for rewriting."""
        ...

    def producer_failed(self, error: KafkaError) -> None:
        """`on_fatal`: the core hit a fatal error."""
        ...


class NoSequencing:
    """No idempotence: batches go out with producer id -1 and no sequence."""

    enabled = False
    is_transactional = False
    owns_producer_id = False
    epoch_bump_required = False
    producer_id = -1
    producer_epoch = -1

    def drain_blocked(self, batch: ProducerBatch) -> bool:
        return False

    def assign(self, batch: ProducerBatch) -> None:
        pass

    def on_success(self, batch: ProducerBatch) -> None:
        pass

    def on_retry(self, batch: ProducerBatch) -> None:
        pass

    def on_split(self, batch: ProducerBatch, pieces: list[ProducerBatch]) -> None:
        pass

    def on_final(self, batch: ProducerBatch, *, gap: bool, error: KafkaError | None = None) -> None:
        pass

    def request_epoch_bump(self, tp: TopicPartition) -> None:
        pass

    def on_fatal(self, error: KafkaError) -> None:
        pass

    def on_sequence_error(
        self, batch: ProducerBatch, code: int, log_start_offset: int
    ) -> SequenceVerdict:
        return SequenceVerdict.BY_ERROR_TABLE

    def resolve_sequences(self) -> None:
        pass

    def next_local_epoch(self) -> tuple[int, int]:
        return -1, -1

    def new_producer_id(self, producer_id: int, producer_epoch: int) -> list[ProducerBatch]:
        return []


class PartitionSequence:
    """Sequence state of one partition (owned by the Sequencer)."""

    __slots__ = (
        "acked_producer_id",
        "inflight",
        "last_acked_offset",
        "last_acked_sequence",
        "next_sequence",
        "phase",
        "producer_epoch",
        "producer_id",
        "retrying",
        "unresolved_next",
    )

    def __init__(self, producer_id: int, producer_epoch: int) -> None:
        # The id/epoch this partition's sequences belong to (may lag after a bump).
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.next_sequence = 0
        self.last_acked_sequence = -1
        self.last_acked_offset = -1
        # The producer id under which a batch of this partition was acknowledged: the
        # broker then holds our state here (-1: none yet, or the broker lost it).
        self.acked_producer_id = -1
        # Unfinished sequenced batches, sorted by base_sequence.
        self.inflight: list[ProducerBatch] = []
        # Those of them waiting for, or in, a retry.
        self.retrying: set[ProducerBatch] = set()
        # Set when a batch ended without a definite answer: the next sequence after it.
        self.unresolved_next: int | None = None
        # Where its sequences stand (the table in `PartitionPhase`); moved by `move`.
        self.phase = PartitionPhase.SEQUENCING

    def awaiting_first_ack(self) -> bool:
        """A batch is out and none under the partition's producer id was acknowledged
        since the broker may last have lost our state: the broker may hold no state for
        us here (the rule in `PartitionPhase`). An epoch bump keeps the broker's state
        (a newer epoch of a producer it knows must start at sequence 0, so a later batch
        cannot land first); a new producer id or a sequence reset does not."""
        return self.acked_producer_id != self.producer_id and bool(self.inflight)

    def first_sequence(self) -> int:
        return self.inflight[0].base_sequence if self.inflight else -1

    def remove(self, batch: ProducerBatch) -> None:
        """`batch` is no longer unfinished here (acknowledged, or ended)."""
        if batch in self.inflight:
            self.inflight.remove(batch)
        self.retrying.discard(batch)
        self.move(PhaseEvent.SETTLED)

    def move(self, event: PhaseEvent) -> None:
        """Apply `event` to the phase (`_PHASE_MOVES`): the one place it changes."""
        try:
            to = _PHASE_MOVES[self.phase, event]
        except KeyError:
            raise AssertionError(
                f"no phase move on {event.value} from {self.phase.value}"
            ) from None
        if to is None:
            # (a rewritten partition's batches are all under the new epoch)
            to = self._left_in(old_epoch=event is not PhaseEvent.REWRITTEN)
        self.phase = to

    def _left_in(self, *, old_epoch: bool) -> PartitionPhase:
        if old_epoch and self.phase is PartitionPhase.OLD_EPOCH and self.inflight:
            return PartitionPhase.OLD_EPOCH
        if self.unresolved_next is not None:
            return PartitionPhase.UNRESOLVED
        if self.retrying:
            return PartitionPhase.RETRYING
        return PartitionPhase.SEQUENCING


def check_new_producer_id(seq: SequencingPolicy, producer_id: int, producer_epoch: int) -> None:
    """While an epoch bump is pending and our id can still be bumped, only the next
    epochs of the same id may be installed: a new producer id would not fence the old
    one's late requests (ValueError: a driver bug)."""
    if (
        seq.epoch_bump_required
        and not seq.owns_producer_id
        and seq.producer_id >= 0
        and producer_id >= 0  # (-1: an exhausted epoch drops the id)
        and (producer_id != seq.producer_id or producer_epoch <= seq.producer_epoch)
        and seq.next_local_epoch()[0] >= 0
    ):
        raise ValueError(
            f"an epoch bump of producer id {seq.producer_id} epoch {seq.producer_epoch} "
            f"cannot install producer id {producer_id} epoch {producer_epoch}"
        )


_MAX_EPOCH = 32767
_SEQUENCE_WRAP = 2**31


class SequencerRules:
    """The sequencer's part of the rules (core/_rules.py gathers them into `Rules`)."""

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
        self.rules = SequencerRules() if rules is None else rules
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
            return e.phase is not PartitionPhase.SEQUENCING or e.awaiting_first_ack()
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
        batch.sequenced(
            self.producer_id, self.producer_epoch, e.next_sequence, self.is_transactional
        )
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
            e.acked_producer_id = batch.producer_id
            e.last_acked_sequence = max(e.last_acked_sequence, batch.last_sequence)
            if batch.base_offset >= 0:
                e.last_acked_offset = max(
                    e.last_acked_offset, batch.base_offset + len(batch.records) - 1
                )
        e.remove(batch)

    def on_retry(self, batch: ProducerBatch) -> None:
        if batch.base_sequence >= 0:
            e = self.entry((batch.topic, batch.partition))
            e.retrying.add(batch)
            e.move(PhaseEvent.RETRIED)

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
        e.move(PhaseEvent.RETRIED)

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
            e.move(PhaseEvent.ENDED_UNKNOWN)

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
            batch.resequenced(batch.producer_id, batch.producer_epoch, sequence)
            sequence += len(batch.records)
        e.next_sequence = sequence
        e.last_acked_sequence = -1
        e.acked_producer_id = -1  # the broker lost our state: the first goes alone again
        return True

    def unknown_producer(
        self, batch: ProducerBatch, e: PartitionSequence, log_start_offset: int
    ) -> SequenceVerdict:
        """UNKNOWN_PRODUCER_ID for `batch` (sequenced, of the partition `e`): retried
        after asking for an epoch bump (or, in a transaction whose writes retention
        removed, after restarting the partition's sequences in place); failed in a
        transaction that cannot bump (it becomes abortable)."""
        tp = (batch.topic, batch.partition)
        # The broker holds no state for us here: whatever follows, its first batch goes
        # alone (the rule in `PartitionPhase`).
        e.acked_producer_id = -1
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
            if batch.base_sequence <= e.last_acked_sequence:
                # The broker acknowledged later sequences of this partition first: Kafka
                # stores a producer's first batch to a partition whatever its sequence
                # when it holds no state for the producer there, so when the first
                # request is refused (NOT_LEADER_OR_FOLLOWER right after the topic was
                # created) and the next one lands, the broker has moved past this batch
                # and no retry can land it. End it (Failed, or Ambiguous if an attempt
                # may have been written); retried, it held every later batch of the
                # partition until delivery_timeout (40% of 100,000 records on Kafka 4.4).
                return SequenceVerdict.FAIL
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
            e.move(PhaseEvent.RESOLVED)

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
        for tp, e in self.partitions.items():
            if (
                e.inflight
                and (e.producer_id, e.producer_epoch) != (producer_id, producer_epoch)
                and (producer_id < 0 or tp not in self.partitions_to_rewrite)
            ):
                e.move(PhaseEvent.EPOCH_MOVED)
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
                batch.resequenced(producer_id, producer_epoch, sequence)
                sequence += len(batch.records)
            e.inflight = keep
            e.producer_id = producer_id
            e.producer_epoch = producer_epoch
            e.next_sequence = sequence
            e.last_acked_sequence = -1
            e.last_acked_offset = -1
            e.unresolved_next = None
            e.move(PhaseEvent.REWRITTEN)
        self.partitions_to_rewrite.clear()
        self.epoch_bump_required = False
        return dropped
