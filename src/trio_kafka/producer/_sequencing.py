"""What the producer core needs of a sequencing policy, and the words it is said in.

`SequencingPolicy` is the seam: the core asks it whether a ready batch may be drained,
has it number each drained batch, and tells it every outcome. `NoSequencing` is the
policy without idempotence; the idempotent one is `_sequencer.Sequencer` (a transaction
plugs `SequencerHooks` into it). `PartitionPhase` is the idempotence state machine's
table, `PartitionSequence` one partition's state, `SequenceVerdict` what an idempotence
error means for the batch it answered.
"""

from __future__ import annotations

import enum
from typing import Protocol

from trio_kafka.errors import KafkaError
from trio_kafka.producer._batch import ProducerBatch

TopicPartition = tuple[str, int]


class PartitionPhase(enum.Enum):
    """Where one partition's sequences stand (`Sequencer.phase`, from its state).

    | phase | new batches | retried batches | left when |
    | --- | --- | --- | --- |
    | SEQUENCING | take the next sequences, pipelined | (none) | a batch is retried, ends ambiguous, or the epoch moves on |
    | RETRYING | held | lowest sequence first, one request at a time | the retried batches settle |
    | UNRESOLVED | held | lowest sequence first | its other batches settle: the sequences line up (SEQUENCING) or the epoch is bumped |
    | OLD_EPOCH | held | lowest sequence first | its old-epoch batches settle: it restarts at sequence 0 |

    Above all of them: nothing is drained without a producer id, while an epoch bump is
    due (every partition waits; the partitions with a gap are then rewritten from 0) or
    after a fatal error, and a transaction's hooks may hold a partition back.
    """

    SEQUENCING = "sequencing"
    RETRYING = "retrying"
    UNRESOLVED = "unresolved"
    OLD_EPOCH = "old_epoch"


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
    `TransactionManager`, producer/_transaction.py). Each is called at one place, named below."""

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
        "inflight",
        "last_acked_offset",
        "last_acked_sequence",
        "next_sequence",
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
        # Unfinished sequenced batches, sorted by base_sequence.
        self.inflight: list[ProducerBatch] = []
        # Those of them waiting for, or in, a retry.
        self.retrying: set[ProducerBatch] = set()
        # Set when a batch ended without a definite answer: the next sequence after it.
        self.unresolved_next: int | None = None

    def first_sequence(self) -> int:
        return self.inflight[0].base_sequence if self.inflight else -1

    def remove(self, batch: ProducerBatch) -> None:
        if batch in self.inflight:
            self.inflight.remove(batch)
        self.retrying.discard(batch)


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
