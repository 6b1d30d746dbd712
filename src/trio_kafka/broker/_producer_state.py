"""Idempotent producer state of one partition: epochs, sequences and the dedup window.

Theory of operation
-------------------
Kafka's ProducerStateManager, reduced to what a client can observe. For every producer id
that wrote to a partition the broker keeps a `ProducerEntry`: the producer epoch it last
saw and the metadata of the last five batches appended (first and last sequence, first
and last offset). Five because a client keeps at most five requests in flight per
partition, so a retried batch is always one of the last five.

`check` decides what to do with a new batch, in this order (Kafka's order):

1. An epoch older than the entry's: INVALID_PRODUCER_EPOCH. (Since Kafka 2.7 a Produce is
   answered with INVALID_PRODUCER_EPOCH, never PRODUCER_FENCED, whatever its version: the
   client may abort and go on. PRODUCER_FENCED is the coordinator's answer.)
2. Same epoch and the same (first, last) sequence as one of the five: a duplicate,
   answered with the original offsets and not appended again.
3. A newer epoch must start at sequence 0 (OUT_OF_ORDER_SEQUENCE_NUMBER otherwise).
4. The same epoch must continue at last sequence + 1, wrapping after 2**31 - 1
   (OUT_OF_ORDER_SEQUENCE_NUMBER otherwise). After a transaction marker bumped the epoch
   the window is empty and the next batch must start at 0.
5. No entry at all: sequence 0 is a new producer; any other sequence is
   UNKNOWN_PRODUCER_ID (the broker lost or expired the producer's state and cannot tell a
   gap from a continuation; Kafka 1.0-2.4 answer this, later brokers accept any sequence,
   which `strict_unknown_producer=False` reproduces).

`record` then stores the batch's metadata once the partition appended it. The module is
pure: no clock (the caller passes `now_ms`), no I/O.
"""

from __future__ import annotations

import collections
import enum

import attrs

from trio_kafka.errors import ErrorCode

#: How many batches per producer the broker remembers for deduplication.
DEDUP_WINDOW = 5
_MAX_SEQUENCE = 2**31 - 1


def increment_sequence(sequence: int, increment: int) -> int:
    """`sequence + increment`, wrapping to 0 after 2**31 - 1 as Kafka's sequences do."""
    if sequence > _MAX_SEQUENCE - increment:
        return increment - (_MAX_SEQUENCE - sequence) - 1
    return sequence + increment


@attrs.frozen
class BatchMetadata:
    """What the broker remembers of an appended idempotent batch."""

    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    timestamp_ms: int


@attrs.define(eq=False)
class ProducerEntry:
    """One producer id's state on one partition."""

    producer_id: int
    # The newest epoch seen from this producer (batches or transaction markers).
    producer_epoch: int
    # The last DEDUP_WINDOW batches, oldest first. Cleared when the epoch changes.
    batches: collections.deque[BatchMetadata] = attrs.field(
        factory=lambda: collections.deque(maxlen=DEDUP_WINDOW)
    )
    # Epoch of the coordinator that wrote the last marker (kept for DescribeProducers).
    coordinator_epoch: int = -1
    last_timestamp_ms: int = -1

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1

    def find_duplicate(self, epoch: int, first: int, last: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_sequence == first and batch.last_sequence == last:
                return batch
        return None


class Verdict(enum.Enum):
    APPEND = "append"
    DUPLICATE = "duplicate"
    REJECT = "reject"


@attrs.frozen
class SequenceCheck:
    """The outcome of `ProducerStateTable.check`."""

    verdict: Verdict
    error: ErrorCode = ErrorCode.NONE
    message: str = ""
    # For DUPLICATE: the batch it duplicates.
    duplicate: BatchMetadata | None = None


_APPEND = SequenceCheck(Verdict.APPEND)


@attrs.define(eq=False)
class ProducerStateTable:
    """Producer id -> `ProducerEntry`, for one partition."""

    strict_unknown_producer: bool = True
    entries: dict[int, ProducerEntry] = attrs.field(factory=dict)

    def check(
        self, producer_id: int, producer_epoch: int, first_sequence: int, record_count: int
    ) -> SequenceCheck:
        """Decide whether an idempotent batch is appended, a duplicate, or refused."""
        last_sequence = increment_sequence(first_sequence, record_count - 1)
        entry = self.entries.get(producer_id)
        if entry is None:
            if first_sequence != 0 and self.strict_unknown_producer:
                return SequenceCheck(
                    Verdict.REJECT,
                    ErrorCode.UNKNOWN_PRODUCER_ID,
                    f"no state for producer id {producer_id} and its batch starts at "
                    f"sequence {first_sequence}, not 0",
                )
            return _APPEND
        if producer_epoch < entry.producer_epoch:
            return SequenceCheck(
                Verdict.REJECT,
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"producer {producer_id} epoch {producer_epoch} is older than the current "
                f"epoch {entry.producer_epoch}",
            )
        duplicate = entry.find_duplicate(producer_epoch, first_sequence, last_sequence)
        if duplicate is not None:
            return SequenceCheck(Verdict.DUPLICATE, duplicate=duplicate)
        if producer_epoch > entry.producer_epoch:
            if first_sequence != 0:
                return SequenceCheck(
                    Verdict.REJECT,
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {producer_id} new epoch {producer_epoch} must start at "
                    f"sequence 0, got {first_sequence}",
                )
            return _APPEND
        expected = increment_sequence(entry.last_sequence, 1) if entry.batches else 0
        if first_sequence != expected:
            return SequenceCheck(
                Verdict.REJECT,
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {producer_id} epoch {producer_epoch}: expected sequence "
                f"{expected}, got {first_sequence}",
            )
        return _APPEND

    def record(
        self,
        producer_id: int,
        producer_epoch: int,
        first_sequence: int,
        *,
        first_offset: int,
        last_offset: int,
        now_ms: int,
    ) -> None:
        """Remember an appended idempotent batch."""
        entry = self._entry_at_epoch(producer_id, producer_epoch)
        last_sequence = increment_sequence(first_sequence, last_offset - first_offset)
        entry.batches.append(
            BatchMetadata(first_sequence, last_sequence, first_offset, last_offset, now_ms)
        )
        entry.last_timestamp_ms = now_ms

    def record_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """A transaction marker was written: it may carry a bumped epoch (fencing)."""
        entry = self._entry_at_epoch(producer_id, producer_epoch)
        entry.coordinator_epoch = coordinator_epoch

    def marker_epoch_error(self, producer_id: int, producer_epoch: int) -> ErrorCode:
        """A marker from an epoch older than the producer's is from a fenced coordinator."""
        entry = self.entries.get(producer_id)
        if entry is not None and producer_epoch < entry.producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        return ErrorCode.NONE

    def _entry_at_epoch(self, producer_id: int, producer_epoch: int) -> ProducerEntry:
        entry = self.entries.get(producer_id)
        if entry is None:
            entry = self.entries[producer_id] = ProducerEntry(producer_id, producer_epoch)
        elif producer_epoch != entry.producer_epoch:
            # A new epoch starts a new sequence space: old batches can no longer match.
            entry.producer_epoch = producer_epoch
            entry.batches.clear()
        return entry

    def clear(self) -> None:
        """Forget every producer (a broker restart that lost its producer snapshots)."""
        self.entries.clear()
