"""A record to produce, and the outcomes a record can end in.

Every record ends in exactly one outcome: `Acknowledged` (in the log at an offset),
`Failed` (not written) or `Ambiguous` (it may have been written). `Result` is the same
three-way split for a whole batch (`ProducerBatch.result`); a record's outcome is its
batch's, except where the broker named the record (`record_errors`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import attrs
import msgspec
import msgspec.structs

from trio_kafka.errors import AmbiguousError, KafkaError

if TYPE_CHECKING:
    pass


Headers = Sequence[tuple[str, bytes | None]]

# Per-record overhead estimate (length, attributes, deltas, key/value lengths, header
# count varints): an upper bound for small records, as Java's estimate is.
RECORD_OVERHEAD = 16


def headers_size(headers: Headers) -> int:
    """The estimated bytes of a record's headers."""
    return sum(len(k) + (len(v) if v else 0) + 4 for k, v in headers)


def record_size(value: bytes | None, key: bytes | None, headers: Headers | None) -> int:
    """The estimated bytes of a record: what the buffer accounting holds for it (the
    accumulator's append works it out inline)."""
    size = RECORD_OVERHEAD if value is None else RECORD_OVERHEAD + len(value)
    if key is not None:
        size += len(key)
    return size + headers_size(headers) if headers else size


class ProducerRecord(msgspec.Struct, frozen=True, gc=False):
    """One record to produce; `partition=None` lets the partitioner choose.

    Immutable, equal to a record with the same fields, and used like the named tuple it
    once was: `record._replace(partition=3)` makes a changed copy, and it unpacks as
    `topic, value, key, headers, partition, timestamp = record` (also `len`, indexing,
    `_fields`, `_asdict()`). It is not a tuple: it does not compare equal to one.

    A msgspec struct (C): a user building one per `send()` pays ~50 ns for it, against
    ~230 ns for a named tuple (typing's generated `__new__`) and ~600 ns for a frozen
    attrs class; with `gc=False` the garbage collector does not track it, so a list of
    a million records built for `send_many` costs its collections nothing (the record
    refers to its fields only: no cycle can pass through it).
    """

    topic: str
    value: bytes | None
    key: bytes | None = None
    headers: Headers = ()
    partition: int | None = None
    #: Create time in ms since the epoch; None stamps it when appended.
    timestamp: int | None = None

    #: The field names, as a named tuple's (set below, from `__struct_fields__`).
    _fields: ClassVar[tuple[str, ...]]

    def __iter__(self) -> Iterator[Any]:
        return iter(msgspec.structs.astuple(self))

    def __len__(self) -> int:
        return len(self.__struct_fields__)

    def __getitem__(self, index: int | slice) -> Any:
        return msgspec.structs.astuple(self)[index]

    def _replace(self, **changes: Any) -> ProducerRecord:
        """A copy with `changes` (field=value) applied, as a named tuple's `_replace`."""
        return msgspec.structs.replace(self, **changes)

    def _asdict(self) -> dict[str, Any]:
        return msgspec.structs.asdict(self)


ProducerRecord._fields = ProducerRecord.__struct_fields__


class Acknowledged(NamedTuple):
    """The record is in the log at `offset` (-1 when acks=0 or for a deduplicated
    retry whose original offset the broker no longer knows).

    A named tuple (immutable, compares by value, unpacks as `topic, partition, offset,
    timestamp`): one is built per awaited record, and a tuple is the cheapest object
    Python builds."""

    topic: str
    partition: int
    offset: int
    #: Create time, or the log append time when the topic uses LogAppendTime (ms).
    timestamp: int


@attrs.frozen(slots=True)
class Failed:
    """The record was not written; `error` says why."""

    topic: str
    partition: int
    error: KafkaError


@attrs.frozen(slots=True)
class Ambiguous:
    """The record may or may not have been written (`error` is an `AmbiguousError`)."""

    topic: str
    partition: int
    error: AmbiguousError


Outcome = Acknowledged | Failed | Ambiguous


class Result(enum.Enum):
    ACKNOWLEDGED = "acknowledged"
    FAILED = "failed"
    AMBIGUOUS = "ambiguous"


class AmbiguousWriteError(AmbiguousError):
    """A definite error arrived for a batch an earlier attempt of which may have landed."""

    def __init__(self, message: str, cause: KafkaError) -> None:
        super().__init__(message)
        self.cause = cause
