"""One partition's log, in memory.

Theory of operation
-------------------
A partition log is a list of record batches kept as the exact bytes a Fetch returns,
each with the few header fields the broker needs (offsets, producer id, whether it is
transactional or a control batch). Offsets are assigned here and nowhere else: `append`
stamps the batch's `baseOffset` (bytes 0-8, outside the CRC, so no checksum work) with the
log end offset and advances it by the batch's record count.

Four offsets describe the log, as in Kafka:

- `log_start_offset`: the first offset still readable (0 until `delete_records`).
- `log_end_offset`: the offset the next appended record gets.
- `high_watermark`: the last offset replicated everywhere, plus one. There is no
  replication here, so it equals the log end offset; it is a property so a later model of
  replication can move it separately.
- `last_stable_offset`: the first offset of the oldest transaction still open on this
  partition, or the high watermark when none is open. A read_committed reader stops there.

Transactions leave two traces: `_open_txns` (producer id -> first offset of its open
transaction here, which is what the last stable offset needs) and `aborted` (the aborted
transactions index: producer id, first offset, offset of the abort marker), which Fetch
returns so a read_committed consumer can drop aborted records.

This module knows nothing of producer sequences, CAS or wire messages: the partition
(`_partition.py`) decides whether a batch may be appended; the log only stores it.
"""

from __future__ import annotations

import bisect
import struct

import attrs

_BASE_OFFSET = struct.Struct(">q")


@attrs.frozen
class StoredBatch:
    """A batch as stored: its bytes (baseOffset already set) and the header fields we use."""

    base_offset: int
    last_offset: int
    data: bytes
    producer_id: int
    producer_epoch: int
    is_transactional: bool
    is_control: bool
    max_timestamp: int

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


@attrs.frozen
class AbortedTxn:
    """An entry of the aborted transactions index, as Fetch reports it."""

    producer_id: int
    first_offset: int
    # Offset of the abort marker: the transaction's records all lie in [first, last].
    last_offset: int


@attrs.define(eq=False)
class PartitionLog:
    """The batches of one partition and the offsets that describe them."""

    # The stored batches in offset order, and their base offsets for bisection. Owned by
    # this object; nobody else appends.
    batches: list[StoredBatch] = attrs.field(factory=list)
    _bases: list[int] = attrs.field(factory=list)
    log_start_offset: int = 0
    log_end_offset: int = 0
    # Producer id -> first offset of its transaction still open on this partition.
    _open_txns: dict[int, int] = attrs.field(factory=dict)
    # The aborted transactions index, in marker order (so sorted by last_offset).
    aborted: list[AbortedTxn] = attrs.field(factory=list)

    @property
    def high_watermark(self) -> int:
        return self.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        if self._open_txns:
            return min(self._open_txns.values())
        return self.high_watermark

    def open_transaction_first_offset(self, producer_id: int) -> int | None:
        return self._open_txns.get(producer_id)

    def append(
        self,
        data: bytes,
        *,
        record_count: int,
        producer_id: int = -1,
        producer_epoch: int = -1,
        is_transactional: bool = False,
        is_control: bool = False,
        max_timestamp: int = -1,
    ) -> StoredBatch:
        """Store a batch at the log end and return it with its offsets.

        `data` is a whole v2 batch; its baseOffset is overwritten here.
        """
        if record_count <= 0:
            raise ValueError(f"a stored batch needs at least one record, got {record_count}")
        base = self.log_end_offset
        stamped = bytearray(data)
        _BASE_OFFSET.pack_into(stamped, 0, base)
        batch = StoredBatch(
            base_offset=base,
            last_offset=base + record_count - 1,
            data=bytes(stamped),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            is_transactional=is_transactional,
            is_control=is_control,
            max_timestamp=max_timestamp,
        )
        self.batches.append(batch)
        self._bases.append(base)
        self.log_end_offset = batch.next_offset
        if is_transactional and not is_control and producer_id not in self._open_txns:
            self._open_txns[producer_id] = base
        return batch

    def end_transaction(self, producer_id: int, *, marker_offset: int, committed: bool) -> None:
        """Close `producer_id`'s open transaction here, after its marker at `marker_offset`."""
        first = self._open_txns.pop(producer_id, None)
        if not committed and first is not None:
            self.aborted.append(AbortedTxn(producer_id, first, marker_offset))

    def read(self, offset: int, max_bytes: int, *, upper: int | None = None) -> list[StoredBatch]:
        """Batches holding offsets from `offset` on, below `upper` (default: the log end).

        Whole batches only, as Kafka returns them: the first batch is returned even when it
        alone exceeds `max_bytes` (so a consumer always makes progress), later ones only
        while they fit.
        """
        limit = self.log_end_offset if upper is None else upper
        if offset >= limit:
            return []
        # The batch containing `offset` is the last one whose base is <= offset.
        index = max(bisect.bisect_right(self._bases, offset) - 1, 0)
        out: list[StoredBatch] = []
        size = 0
        for batch in self.batches[index:]:
            if batch.base_offset >= limit:
                break
            if batch.last_offset < offset:
                continue
            if out and size + len(batch.data) > max_bytes:
                break
            out.append(batch)
            size += len(batch.data)
        return out

    def aborted_in_range(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions that overlap offsets [start, end)."""
        return [a for a in self.aborted if a.first_offset < end and a.last_offset >= start]

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """The first (offset, timestamp) of a batch whose max timestamp is >= `timestamp`.

        Batch granularity is what a mock needs: the answer is the batch's base offset.
        """
        for batch in self.batches:
            if batch.is_control or batch.base_offset < self.log_start_offset:
                continue
            if batch.max_timestamp >= timestamp:
                return batch.base_offset, batch.max_timestamp
        return None

    def max_timestamp(self) -> tuple[int, int] | None:
        """The (offset, timestamp) of the batch with the greatest max timestamp."""
        best: StoredBatch | None = None
        for batch in self.batches:
            if batch.is_control:
                continue
            if best is None or batch.max_timestamp > best.max_timestamp:
                best = batch
        if best is None:
            return None
        return best.last_offset, best.max_timestamp

    def delete_records(self, before_offset: int) -> None:
        """Move the log start offset forward (DeleteRecords); batches stay for simplicity."""
        self.log_start_offset = max(self.log_start_offset, min(before_offset, self.log_end_offset))

    def truncate_to(self, offset: int) -> None:
        """Drop everything from `offset` on (a simulated unclean leader change)."""
        keep = bisect.bisect_left(self._bases, offset)
        del self.batches[keep:]
        del self._bases[keep:]
        self.log_end_offset = self.batches[-1].next_offset if self.batches else offset
        self._open_txns = {p: f for p, f in self._open_txns.items() if f < self.log_end_offset}
        self.aborted = [a for a in self.aborted if a.last_offset < self.log_end_offset]
