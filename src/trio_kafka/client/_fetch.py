"""What a Fetch answer means to a reader, with no I/O: which records of the answer's
batches a reader sees (`select_records`: the range asked for, control batches left out,
with read_committed the records of aborted transactions dropped, KIP-98), the per
partition result (`FetchResult`) and the isolation level.
"""

from __future__ import annotations

import collections
import enum
from collections.abc import Callable, Iterable, Iterator

import attrs

from trio_kafka.errors import ConfigError, CorruptRecordError
from trio_kafka.records import ControlType, Record, RecordBatch, parse_control_record


class IsolationLevel(enum.IntEnum):
    """Fetch and ListOffsets `IsolationLevel` (KIP-98)."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


def _isolation(value: IsolationLevel | str | int) -> IsolationLevel:
    if isinstance(value, str):
        try:
            return IsolationLevel[value.upper()]
        except KeyError:
            raise ConfigError(
                f"isolation must be 'read_uncommitted' or 'read_committed', not {value!r}"
            ) from None
    return IsolationLevel(value)


# -- the pure part: which records of a fetch response a reader sees ------------------------


def select_records(
    batches: Iterable[RecordBatch],
    *,
    start: int,
    end: int | None = None,
    read_committed: bool = False,
    aborted_transactions: Iterable[tuple[int, int]] | None = None,
) -> tuple[list[Record], int]:
    """The records of `batches` a reader sees in `[start, end)`, and the next offset to
    fetch (the end of the last batch, at least `start`).

    `aborted_transactions` are the response's (producer_id, first_offset) pairs; with
    `read_committed`, transactional records of a producer id are dropped from its first
    offset up to its ABORT marker. Control batches are never returned.
    """
    # Aborted transactions not yet reached, in offset order (the broker sends them so,
    # but nothing says it must).
    pending = collections.deque(
        sorted(aborted_transactions or (), key=lambda pair: (pair[1], pair[0]))
    )
    # Producer ids whose records are being dropped (reached their first offset, no
    # ABORT marker yet).
    aborted: set[int] = set()
    records: list[Record] = []
    position = start
    for batch in batches:
        position = max(position, batch.next_offset)
        if read_committed and batch.producer_id >= 0:
            while pending and pending[0][1] <= batch.last_offset:
                aborted.add(pending.popleft()[0])
            if batch.is_control:
                if _is_abort_marker(batch):
                    aborted.discard(batch.producer_id)
                continue
            if batch.is_transactional and batch.producer_id in aborted:
                continue
        if batch.is_control:
            continue
        records.extend(
            r for r in batch.records if r.offset >= start and (end is None or r.offset < end)
        )
    return records, position


def _is_abort_marker(batch: RecordBatch) -> bool:
    # A control batch holds one control record; its key says COMMIT or ABORT. Other
    # types (KRaft's, or ones newer than us) are not markers: skip them, as Kafka does.
    for record in batch.records:
        try:
            if parse_control_record(record).type == ControlType.ABORT:
                return True
        except CorruptRecordError:
            continue
    return False


@attrs.frozen(slots=True)
class FetchResult:
    """One Fetch answer for one partition, after filtering."""

    #: The records a reader sees, in offset order, from the offset asked for.
    records: list[Record]
    #: Where the next fetch starts: past every complete batch of the answer.
    next_offset: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    #: Every batch of the answer as decoded (control batches and, with read_committed,
    #: aborted ones included): for callers that judge the markers themselves.
    batches: list[RecordBatch] = attrs.field(factory=list)

    def log_end(self, read_committed: bool) -> int | None:
        """The log end this answer reports: the last stable offset with read_committed,
        else the high watermark; None when it reports none (a partition left out)."""
        if read_committed and self.last_stable_offset >= 0:
            return self.last_stable_offset
        return self.high_watermark if self.high_watermark >= 0 else None


def committed_newest_first(
    batches: Iterable[RecordBatch],
    next_marker: dict[int, bool],
    counts: Callable[[bool | None], bool] = lambda marker: marker is True,
) -> Iterator[Record]:
    """The records of `batches` (consecutive, in offset order) a read_committed reader
    sees, newest first, judged from the transaction markers in the log itself rather
    than from the broker's last stable offset and aborted-transactions list (which
    Tansu does not keep: it shows aborted records to read_committed readers).

    A transactional batch is seen only when the first marker of its producer id after
    it is a COMMIT; with no marker after it (an open transaction) or an ABORT, it is
    not. `next_marker` maps producer id -> whether that first marker is a COMMIT, for
    the log after these batches: start with {} at the log end and pass the same dict
    when going on to earlier batches (it is updated). `counts(first marker after)`
    decides (the load rules' `checkpoint_committed`: a COMMIT, not an ABORT or none)."""
    for batch in reversed(list(batches)):
        if batch.is_control:
            if batch.producer_id >= 0:
                next_marker[batch.producer_id] = not _is_abort_marker(batch)
            continue
        if batch.is_transactional and not counts(next_marker.get(batch.producer_id)):
            continue
        yield from reversed(batch.records)


@attrs.define(slots=True)
class _Held:
    batch: RecordBatch
    committed: bool | None = None  # None: no marker of its producer id after it yet


@attrs.define(eq=False)
class CommittedInOrder:
    """`committed_newest_first`'s judgement going forward: the records a read_committed
    reader sees, in offset order, from consecutive batches fed in offset order (window
    after window). A transactional batch is held until the first marker of its producer
    id after it: a COMMIT releases it, an ABORT drops it; the batches after a held one
    wait behind it (offset order). `first_held` is where a read must end: the first
    batch no marker has decided yet (None: nothing held)."""

    _held: collections.deque[_Held] = attrs.field(factory=collections.deque)

    @property
    def first_held(self) -> int | None:
        return self._held[0].batch.base_offset if self._held else None

    def feed(self, batches: Iterable[RecordBatch]) -> Iterator[Record]:
        held = self._held
        for batch in batches:
            if batch.is_control:
                if batch.producer_id >= 0:
                    commit = not _is_abort_marker(batch)
                    for entry in held:
                        if entry.committed is None and entry.batch.producer_id == batch.producer_id:
                            entry.committed = commit
            elif batch.is_transactional:
                held.append(_Held(batch))
            elif held:
                held.append(_Held(batch, True))
            else:
                yield from batch.records
                continue
            while held and held[0].committed is not None:
                entry = held.popleft()
                if entry.committed:
                    yield from entry.batch.records


__all__ = [
    "CommittedInOrder",
    "FetchResult",
    "IsolationLevel",
    "committed_newest_first",
    "select_records",
]
