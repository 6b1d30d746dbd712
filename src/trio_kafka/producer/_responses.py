"""What a Produce answer looks like to the core, and what settling it decides.

`PartitionResponseLike` is what `ProducerCore.handle_response` reads of a partition's
answer (the protocol layer's `PartitionProduceResponse` fits, and so does
`PartitionResponse`); `Decision` is what settling a batch did with it; `Settled` is what
the driver must do after handing back a request's results. The errors a settled batch
can end with that need more words than the error table's are built here too.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Protocol

import attrs

from trio_kafka.errors import (
    AmbiguousDeliveryTimeoutError,
    AmbiguousError,
    DeliveryTimeoutError,
    ErrorCode,
    KafkaError,
    ProducerFencedError,
    RecordTooLargeError,
    RequestTimeoutError,
    error_for_code,
)
from trio_kafka.producer._batch import ProducerBatch


class Decision(enum.Enum):
    """What settling a batch did with it: sent again later, or final; and whether the
    answer says the metadata is stale (the driver then refreshes it)."""

    RETRY = "retry"  # back in its queue
    RETRY_REFRESH = "retry_refresh"  # back in its queue; refresh the metadata
    FINAL = "final"  # done (acknowledged, failed or ambiguous)
    FINAL_REFRESH = "final_refresh"  # done; refresh the metadata

    @property
    def retried(self) -> bool:
        return self is Decision.RETRY or self is Decision.RETRY_REFRESH

    @property
    def refresh(self) -> bool:
        return self is Decision.RETRY_REFRESH or self is Decision.FINAL_REFRESH


#: Answers that may name the partition's current leader (KIP-951, Produce v10+).
LEADER_MOVED = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH})


class RecordErrorLike(Protocol):
    @property
    def batch_index(self) -> int: ...
    @property
    def batch_index_error_message(self) -> str | None: ...


class PartitionResponseLike(Protocol):
    """What `handle_response` reads of a partition's answer: the protocol layer's
    `PartitionProduceResponse` fits, and so does `PartitionResponse`."""

    @property
    def error_code(self) -> int: ...
    @property
    def base_offset(self) -> int: ...
    @property
    def log_append_time_ms(self) -> int: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def record_errors(self) -> Sequence[RecordErrorLike]: ...
    @property
    def error_message(self) -> str | None: ...


@attrs.frozen(slots=True)
class RecordError:
    batch_index: int
    batch_index_error_message: str | None = None


@attrs.frozen(slots=True)
class PartitionResponse:
    """A partition's answer to a Produce request (for tests and other callers)."""

    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    record_errors: Sequence[RecordError] = ()
    error_message: str | None = None


@attrs.frozen(slots=True)
class Settled:
    """What the driver should do after handing back a request's results."""

    refresh_metadata: bool = False
    #: Batches that reached a final state (room came free: wake blocked senders).
    completed: int = 0
    retried: int = 0
    #: KIP-951: (topic, partition, leader id, leader epoch) a NOT_LEADER_OR_FOLLOWER or
    #: FENCED_LEADER_EPOCH answer named as the current leader (Produce v10+). The driver
    #: puts them in its metadata (with the response's NodeEndpoints) and hands the core
    #: the new view: the retries then go to the new leader at once, without backoff.
    leaders: tuple[tuple[str, int, int, int], ...] = ()


def idempotent_epoch_refused(
    batch: ProducerBatch, code: int, message: str | None
) -> ProducerFencedError:
    """PRODUCER_FENCED for a batch of a non-transactional idempotent producer: with no
    transactional id there is no newer instance, so the broker refused our epoch bump."""
    return ProducerFencedError(
        code,
        f"the broker refused producer id {batch.producer_id} epoch "
        f"{batch.producer_epoch} for {batch.topic}-{batch.partition}"
        + (f" ({message})" if message else "")
        + ": a non-transactional idempotent producer bumps its epoch itself after "
        "a sequence gap or a lost request, as Java's does and Kafka accepts; this "
        "broker does not (Tansu refuses it). The producer stops rather than take "
        "a new producer id, under which a late request of the old one could land "
        "after newer records",
    )


def refused_as_too_large(batch: ProducerBatch, message: str | None) -> RecordTooLargeError:
    """MESSAGE_TOO_LARGE for a batch that cannot be split (see `ProducerCore._too_large`)."""
    what = "a record of" if batch.record_count == 1 else f"a batch of {batch.record_count} records,"
    return RecordTooLargeError(
        f"{what} {batch.size} bytes (estimated) for {batch.topic}-{batch.partition} is "
        f"larger than the broker accepts (MESSAGE_TOO_LARGE: the topic's "
        f"max.message.bytes or the broker's message.max.bytes)"
        + (f": {message}" if message else "")
    )


def record_errors_of(
    response: PartitionResponseLike, code: int, message: str | None
) -> dict[int, KafkaError] | None:
    """The errors the broker named per record (KIP-467), by index in the batch."""
    if not response.record_errors:
        return None
    return {
        e.batch_index: error_for_code(code, e.batch_index_error_message or message)
        for e in response.record_errors
    }


def expired_error(batch: ProducerBatch, age: float) -> KafkaError:
    """A queued batch passed `delivery_timeout`: Ambiguous when an earlier attempt may
    have been written, else not written."""
    where = f"{batch.record_count} record(s) for {batch.topic}-{batch.partition}"
    if batch.maybe_written:
        return AmbiguousDeliveryTimeoutError(
            f"{where} expired after {age:.3f}s; an earlier attempt may have been written"
        )
    return DeliveryTimeoutError(f"{where} expired after {age:.3f}s without being written")


def ambiguous_end(batch: ProducerBatch, error: KafkaError, timed_out: bool) -> AmbiguousError:
    """The error a batch that may have been written ends with (`timed_out`: its
    delivery_timeout passed with a request in flight)."""
    if timed_out:
        return AmbiguousDeliveryTimeoutError(
            f"{batch.record_count} record(s) for {batch.topic}-{batch.partition}: "
            f"delivery_timeout passed with a request in flight ({error})"
        )
    return error if isinstance(error, AmbiguousError) else RequestTimeoutError(str(error))


def dropped_at_bump() -> AmbiguousError:
    """A batch dropped at an epoch bump (`Sequencer.new_producer_id`)."""
    return AmbiguousError(
        "the producer epoch was bumped while an earlier attempt of this batch "
        "may have been written; resending it under the new epoch could duplicate it"
    )
