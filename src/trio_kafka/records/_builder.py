"""Building record batch v2 on the producer's hot path.

Theory of operation: a BatchBuilder owns one bytearray holding the encoded records of a
batch that is still open. `append` encodes one record straight into it (length, zero
attributes, timestamp delta from the first record's timestamp, offset delta = the
record's index, key, value, headers), taking the varints of small lengths and deltas
from a table computed at import, and keeps the running count and maxTimestamp. Nothing
else happens per record: no object per record, no CRC, no compression. `append_values`
does the same for many records without key or headers in one call (the producer's
common case): it collects the pieces and joins them once, the values copied once;
`append_keyed_values` likewise for records with keys (a keyed load).

`build` turns the records into the wire bytes. The record section (the buffer itself
when uncompressed, never copied; compressed if a codec is set) is computed once and cached, keyed by the record count so that an append after a
build invalidates it. The 61-byte header and the CRC-32C over attributes..end are
rewritten on every call, so a retry after an epoch bump (new producer id, epoch or base
sequence) or with another expected offset costs one CRC pass and one copy, never a
recompression. An empty batch cannot be built: Kafka's producer never sends one and its
broker rejects one (only log compaction leaves empty batches behind, which the decoder
reads fine).
"""

from __future__ import annotations

from collections.abc import Sequence

from trio_kafka.records._codecs import Compression, compress, resolve_level
from trio_kafka.records._layout import (
    HEADER_SIZE,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    TimestampType,
    frame_batch,
)
from trio_kafka.records._varint import MINUS_ONE, ZIGZAG, ZIGZAG_CACHED, zigzag

_NO_HEADERS = b"\x00"  # headersCount 0
_NULL = MINUS_ONE  # length -1: a null key or value
_NULL_KEY_AND_VALUE = MINUS_ONE + MINUS_ONE
_ATTRIBUTES = b"\x00"  # a record's attributes byte (unused, 0)
# The first offset delta whose zigzag varint is one byte wider than 1, 2, 3 bytes.
_WIDTH_ENDS = {1: 64, 2: 8192, 3: 1 << 20}


def encode_headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    """headersCount followed by each header (key length, UTF-8 key, value length, value)."""
    parts = [zigzag(len(headers))]
    for name, value in headers:
        encoded = name.encode("utf-8")
        parts.append(zigzag(len(encoded)))
        parts.append(encoded)
        if value is None:
            parts.append(_NULL)
        else:
            parts.append(zigzag(len(value)))
            parts.append(value)
    return b"".join(parts)


_CODEC_OF = {codec.value: codec for codec in Compression}

#: `append_runs` takes its per-record path up to this many records (measured faster).
_FEW = 4


class BatchBuilder:
    """Accumulates records into one record batch v2 and builds its bytes (see module doc)."""

    __slots__ = (
        "_attributes",
        "_base_timestamp",
        "_buffer",
        "_built_count",
        "_built_section",
        "_count",
        "_max_timestamp",
        "compression",
        "compression_level",
        "timestamp_type",
    )

    def __init__(
        self,
        compression: Compression | int = Compression.NONE,
        compression_level: int | None = None,
        timestamp_type: TimestampType | int = TimestampType.CREATE_TIME,
    ) -> None:
        # A builder per batch: no enum call for a codec given as a member or its number.
        if compression.__class__ is not Compression:
            codec = _CODEC_OF.get(compression)
            compression = Compression(compression) if codec is None else codec
        if timestamp_type.__class__ is not TimestampType:
            timestamp_type = TimestampType(timestamp_type)
        self.compression = compression
        self.compression_level = (
            None
            if compression is Compression.NONE and compression_level is None
            else resolve_level(compression, compression_level)
        )
        self.timestamp_type = timestamp_type
        # Attributes without the per-build transactional bit.
        self._attributes = compression.value | (
            TIMESTAMP_TYPE_BIT if timestamp_type is TimestampType.LOG_APPEND_TIME else 0
        )
        # The encoded records, uncompressed; owned by append().
        self._buffer = bytearray()
        # Records appended so far; the next record's offset delta.
        self._count = 0
        # The first record's timestamp (baseTimestamp) and the largest seen; None/-1 empty.
        self._base_timestamp: int | None = None
        self._max_timestamp = -1
        # The record section as last built (compressed), valid while _built_count matches.
        self._built_section: bytes | bytearray = b""
        self._built_count = -1

    def __repr__(self) -> str:
        return (
            f"<BatchBuilder {self.compression.name.lower()} records={self._count}"
            f" bytes={len(self._buffer)}>"
        )

    @property
    def record_count(self) -> int:
        return self._count

    def size_in_bytes(self) -> int:
        """The built size without compression: an upper estimate when a codec is set."""
        return HEADER_SIZE + len(self._buffer)

    def append(
        self,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] = (),
    ) -> int:
        """Encode one record into the batch; returns its offset delta (its index)."""
        base = self._base_timestamp
        if base is None:
            base = self._base_timestamp = self._max_timestamp = timestamp_ms
        elif timestamp_ms > self._max_timestamp:
            self._max_timestamp = timestamp_ms
        delta = self._count
        # Fields after the length: attributes, timestamp delta, offset delta, key, value,
        # headers. Each small varint is a table lookup.
        ts = timestamp_ms - base
        if 0 <= ts < ZIGZAG_CACHED:
            body = b"\x00" + ZIGZAG[ts]
        else:
            body = b"\x00" + zigzag(ts)
        body += ZIGZAG[delta] if delta < ZIGZAG_CACHED else zigzag(delta)
        if key is None:
            body += _NULL
        else:
            size = len(key)
            body += (ZIGZAG[size] if size < ZIGZAG_CACHED else zigzag(size)) + key
        if value is None:
            body += _NULL
            value = b""
        else:
            size = len(value)
            body += ZIGZAG[size] if size < ZIGZAG_CACHED else zigzag(size)
        tail = encode_headers(headers) if headers else _NO_HEADERS
        size = len(body) + len(value) + len(tail)
        buffer = self._buffer
        buffer += ZIGZAG[size] if size < ZIGZAG_CACHED else zigzag(size)
        buffer += body
        buffer += value
        buffer += tail
        self._count = delta + 1
        return delta

    def _timestamps_seen(self, first: int, top: int) -> int:
        """Bulk appends: the batch's base timestamp (the first record's, set by the first
        append), with `top` counted into its max timestamp."""
        base = self._base_timestamp
        if base is None:
            base = self._base_timestamp = self._max_timestamp = first
        self._max_timestamp = max(self._max_timestamp, top)
        return base

    def _extend(self, parts: list[bytes]) -> None:
        """Bulk appends: the records' pieces, joined once onto the buffer."""
        if self._buffer:
            self._buffer += b"".join(parts)
        else:
            self._buffer = bytearray().join(parts)  # one copy of the values, not two

    def append_values(self, timestamps: Sequence[int], values: Sequence[bytes | None]) -> None:
        """`append(timestamp, None, value)` for each pair: records without key or
        headers (the producer's common case), with the per-call overhead paid once."""
        count = len(values)
        if count == 0:
            return
        if len(timestamps) != count:
            raise ValueError(f"{len(timestamps)} timestamps for {count} values")
        base = self._timestamps_seen(timestamps[0], max(timestamps))
        table = ZIGZAG
        cached = ZIGZAG_CACHED
        delta = self._count
        # Each record: length, attributes 0, timestamp delta, offset delta, null key
        # (-1), value length, value, no headers. Only the varints vary; the pieces are
        # collected and joined once (cheaper than growing the bytearray piece by piece).
        parts: list[bytes] = []
        add = parts.append
        for timestamp, value in zip(timestamps, values):
            ts = timestamp - base
            head = b"\x00" + (table[ts] if 0 <= ts < cached else zigzag(ts))
            head += table[delta] if delta < cached else zigzag(delta)
            if value is None:
                head += _NULL_KEY_AND_VALUE
                size = len(head) + 1
                add(table[size] if size < cached else zigzag(size))
                add(head)
            else:
                length = len(value)
                head += _NULL + (table[length] if length < cached else zigzag(length))
                size = len(head) + length + 1
                add(table[size] if size < cached else zigzag(size))
                add(head)
                add(value)
            add(_NO_HEADERS)
            delta += 1
        self._extend(parts)
        self._count = delta

    def append_keyed_values(
        self,
        timestamps: Sequence[int],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
    ) -> None:
        """`append(timestamp, key, value)` for each triple: records with keys (None
        allowed) and no headers, with the per-call overhead paid once (a keyed load)."""
        count = len(values)
        if count == 0:
            return
        if len(timestamps) != count or len(keys) != count:
            raise ValueError(
                f"{len(timestamps)} timestamps and {len(keys)} keys for {count} values"
            )
        base = self._timestamps_seen(timestamps[0], max(timestamps))
        table = ZIGZAG
        cached = ZIGZAG_CACHED
        delta = self._count
        parts: list[bytes] = []
        add = parts.append
        for timestamp, key, value in zip(timestamps, keys, values):
            ts = timestamp - base
            head = b"\x00" + (table[ts] if 0 <= ts < cached else zigzag(ts))
            head += table[delta] if delta < cached else zigzag(delta)
            if key is None:
                head += _NULL
            else:
                length = len(key)
                head += (table[length] if length < cached else zigzag(length)) + key
            if value is None:
                head += _NULL
                length = 0
            else:
                length = len(value)
                head += table[length] if length < cached else zigzag(length)
            size = len(head) + length + 1
            add(table[size] if size < cached else zigzag(size))
            add(head)
            if value is not None:
                add(value)
            add(_NO_HEADERS)
            delta += 1
        self._extend(parts)
        self._count = delta

    def append_runs(
        self, run_starts: Sequence[int], run_ms: Sequence[int], values: Sequence[bytes | None]
    ) -> None:
        """`append_values` with the timestamps as runs: value `i` has timestamp
        `run_ms[k]` for the last `k` with `run_starts[k] <= i` (`run_starts[0]` is 0).

        When every value is bytes of one length (the common case of a producer sending
        fixed-size records), the records are laid out without a Python step per record:
        each record is four pieces (its length, attributes and timestamp delta, which
        are the same within a run of one millisecond and one offset-delta width; its
        offset delta, a slice of the varint table; the null key and the value's length,
        the same for all; the value), placed into one list by slice assignment and
        joined once. Anything else takes `append_values`.
        """
        count = len(values)
        if count == 0:
            return
        if not run_starts or run_starts[0] != 0 or len(run_starts) != len(run_ms):
            raise ValueError("run_starts must start at 0 and pair with run_ms")
        if count <= _FEW and len(run_ms) == 1:
            # A batch of a record or two (many partitions, each sent to rarely): the
            # layout's fixed cost is more than a step per record.
            self.append_values([run_ms[0]] * count, values)
            return
        first = self._count
        try:
            lengths = set(map(len, values))  # type: ignore[arg-type]
        except TypeError:  # a None value
            lengths = set()
        length = lengths.pop() if len(lengths) == 1 else -1
        base = self._base_timestamp
        if base is None:
            base = run_ms[0]
        low, high = min(run_ms) - base, max(run_ms) - base
        if not (
            0 <= length < ZIGZAG_CACHED - 32
            and first + count <= ZIGZAG_CACHED
            and low >= 0
            and high < ZIGZAG_CACHED
        ):
            stops = [*run_starts[1:], count]
            timestamps: list[int] = []
            for start, stop, ms in zip(run_starts, stops, run_ms, strict=True):
                timestamps += [ms] * (stop - start)
            self.append_values(timestamps, values)
            return
        self._timestamps_seen(base, base + high)
        table = ZIGZAG
        value_length = table[length]
        # Record size without its timestamp and offset delta varints: attributes, null
        # key, the value's length, the value, no headers.
        fixed = 1 + len(_NULL) + len(value_length) + length + 1
        parts: list[bytes | None] = [None] * (4 * count)
        parts[1::4] = table[first : first + count]
        parts[2::4] = [_NULL + value_length] * count
        parts[3::4] = values
        stops = [*run_starts[1:], count]
        for start, stop, ms in zip(run_starts, stops, run_ms, strict=True):
            stamp = _ATTRIBUTES + table[ms - base]
            # Split the run where the offset delta's varint grows a byte.
            at = start
            while at < stop:
                width = len(table[first + at])
                end = min(stop, _WIDTH_ENDS[width] - first)
                size = fixed + len(stamp) - 1 + width
                # The previous record's "no headers" byte, then this record's length.
                piece = _NO_HEADERS + table[size] + stamp
                parts[4 * at : 4 * end : 4] = [piece] * (end - at)
                at = end
        parts[0] = parts[0][1:]  # type: ignore[index]  # (no record before the first)
        parts.append(_NO_HEADERS)
        self._extend(parts)  # type: ignore[arg-type]
        self._count = first + count

    def _record_section(self) -> bytes | bytearray:
        if self._built_count != self._count:
            if self.compression is Compression.NONE:
                # The buffer itself, not a copy: an append after this build changes the
                # count, so the next build looks again.
                self._built_section = self._buffer
            else:
                self._built_section = compress(
                    self.compression, bytes(self._buffer), self.compression_level
                )
            self._built_count = self._count
        return self._built_section

    def build(
        self,
        *,
        base_offset: int = 0,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = -1,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        partition_leader_epoch: int = -1,
    ) -> bytes:
        """The batch's wire bytes with these header values (callable again on retry)."""
        count = self._count
        if count == 0:
            raise ValueError("cannot build an empty record batch")
        section = self._record_section()
        base_timestamp = self._base_timestamp
        assert base_timestamp is not None  # set by the first append
        return frame_batch(
            section,
            base_offset=base_offset,
            partition_leader_epoch=partition_leader_epoch,
            attributes=self._attributes | (TRANSACTIONAL_BIT if is_transactional else 0),
            last_offset_delta=count - 1,
            base_timestamp=base_timestamp,
            max_timestamp=self._max_timestamp,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            record_count=count,
        )
