"""Record batch v2 (KIP-98): its layout, and building one on the producer's hot path.

The fixed layout of a batch's header, shared with the decoder (`_decoder.py`) and the
control batches (`_control.py`):

offset size field                 in CRC
     0    8 baseOffset            no   (the broker assigns it)
     8    4 batchLength           no   (bytes after this field)
    12    4 partitionLeaderEpoch  no   (the broker assigns it)
    16    1 magic (2)             no
    17    4 crc (CRC-32C)         no
    21    2 attributes            yes  (from here to the end of the batch)
    23    4 lastOffsetDelta
    27    8 baseTimestamp
    35    8 maxTimestamp
    43    8 producerId
    51    2 producerEpoch
    53    4 baseSequence
    57    4 recordsCount
    61      records (compressed as one block when the codec is not NONE)

Records carry their lengths, deltas and counts as zigzag varints (signed values mapped to
unsigned: 0, -1, 1, -2, ... -> 0, 1, 2, 3, ...) written 7 bits at a time, low group
first, high bit set on every byte but the last (the protobuf encoding). Encoding is on
the producer's hot path, so the encodings of the small non-negative values that make up
nearly every length and offset delta are computed once, at import, into `_ZIGZAG`:
`_ZIGZAG[n]` is the zigzag varint of `n` for `0 <= n < _ZIGZAG_CACHED`.

Theory of operation: a BatchBuilder owns one bytearray holding the encoded records of a
batch that is still open. `append` encodes one record straight into it (length, zero
attributes, timestamp delta from the first record's timestamp, offset delta = the
record's index, key, value, headers), taking the varints of small lengths and deltas
from `_ZIGZAG`, and keeps the running count and maxTimestamp. Nothing else happens per
record: no object per record, no CRC, no compression. `append_values` does the same for
many records without key or headers in one call (the producer's common case): it
collects the pieces and joins them once, the values copied once; `append_keyed_values`
likewise for records with keys (a keyed load).

`build` turns the records into the wire bytes. The record section (the buffer itself
when uncompressed, never copied; compressed if a codec is set) is computed once and
cached, keyed by the record count so that an append after a build invalidates it. The
61-byte header and the CRC-32C over attributes..end are rewritten on every call
(`frame_batch`), so a retry after an epoch bump (new producer id, epoch or base
sequence) or with another expected offset costs one CRC pass and one copy, never a
recompression. An empty batch cannot be built: Kafka's producer never sends one and its
broker rejects one (only log compaction leaves empty batches behind, which the decoder
reads fine).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from itertools import groupby, islice
from operator import add, itemgetter

from crc32c import crc32c

from trio_kafka.protocol import write_uvarint
from trio_kafka.records._codecs import Compression, compress, resolve_level

# === the layout ==========================================================================

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes batchLength does not count
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
MAGIC = 2

BASE_OFFSET_OFFSET = 0
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35

# The whole header, and its two halves around the CRC boundary.
HEADER = struct.Struct(">qiibIhiqqqhii")
PREFIX = struct.Struct(">qiibI")  # baseOffset .. crc: outside the CRC
SUFFIX = struct.Struct(">hiqqqhii")  # attributes .. recordsCount: inside the CRC
INT64 = struct.Struct(">q")
INT16 = struct.Struct(">h")
CRC = struct.Struct(">I")

# Attribute bits (bits 0-2 are the codec).
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40

NO_SEQUENCE = -1
NO_PRODUCER_ID = -1
NO_TIMESTAMP = -1
INT32_MAX = (1 << 31) - 1


class TimestampType(enum.IntEnum):
    """Bit 3 of the attributes: whose clock the record timestamps come from."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


def frame_batch(
    records: bytes | bytearray,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    record_count: int,
) -> bytes:
    """A whole batch: the 61-byte header, with its length and CRC, before `records` (the
    record section as it goes on the wire, compressed or not)."""
    suffix = SUFFIX.pack(
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    )
    crc = crc32c(records, crc32c(suffix))
    prefix = PREFIX.pack(
        base_offset, HEADER_SIZE - LOG_OVERHEAD + len(records), partition_leader_epoch, MAGIC, crc
    )
    return b"".join((prefix, suffix, records))


# === zigzag varints ======================================================================

# 16,384 entries cover every length and offset delta of a batch up to 16 KiB values and
# 16k records, at about 600 KB of memory; bigger values take the slow path.
_ZIGZAG_CACHED = 1 << 14

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def _encode_unsigned(value: int) -> bytes:
    """The unsigned LEB128 encoding of a non-negative integer (the protocol's writer)."""
    out = bytearray()
    write_uvarint(out, value)
    return bytes(out)


def _zigzag(value: int) -> bytes:
    """The zigzag varint (or varlong) encoding of a signed integer."""
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{value} does not fit a varlong (int64)")
    return _encode_unsigned(value << 1 if value >= 0 else ((-value) << 1) - 1)


_ZIGZAG: tuple[bytes, ...] = tuple(_zigzag(n) for n in range(_ZIGZAG_CACHED))
_MINUS_ONE = _zigzag(-1)  # the length of a null key, value or header value


# === the builder =========================================================================

_NO_HEADERS = b"\x00"  # headersCount 0
_NULL = _MINUS_ONE  # length -1: a null key or value
_NULL_KEY_AND_VALUE = _MINUS_ONE + _MINUS_ONE
_ATTRIBUTES = b"\x00"  # a record's attributes byte (unused, 0)
# The first offset delta whose zigzag varint is one byte wider than 1, 2, 3 bytes.
_WIDTH_ENDS = {1: 64, 2: 8192, 3: 1 << 20}


def _encode_headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    """headersCount followed by each header (key length, UTF-8 key, value length, value).
    Lengths come from the zigzag table (a tuple index, not an encoding loop, per length:
    a commit log's two headers on every append made this a tenth of its client CPU)."""
    table, cached = _ZIGZAG, _ZIGZAG_CACHED
    count = len(headers)
    parts = [table[count] if count < cached else _zigzag(count)]
    for name, value in headers:
        encoded = name.encode("utf-8")
        size = len(encoded)
        parts.append(table[size] if size < cached else _zigzag(size))
        parts.append(encoded)
        if value is None:
            parts.append(_NULL)
        else:
            size = len(value)
            parts.append(table[size] if size < cached else _zigzag(size))
            parts.append(value)
    return b"".join(parts)


def _varint_width(value: int) -> int:
    """The bytes of the zigzag varint of `0 <= value < 1 << 20`."""
    return 1 if value < 64 else 2 if value < 8192 else 3


def _lookup(table: dict[int, bytes], keys: list[int]) -> list[bytes]:
    """`[table[k] for k in keys]` in one C call."""
    if len(keys) == 1:
        return [table[keys[0]]]
    return list(itemgetter(*keys)(table))


def _keyed_layout(
    head: bytes, first: int, keys: Sequence[bytes | None], values: Sequence[bytes | None]
) -> list[bytes] | None:
    """The pieces of records with keys and values (no None) and no headers, offset
    deltas from `first`, each record's attributes and timestamp delta `head`, for one
    join; None when a key or value is None, or the keys' (or values') lengths differ in
    varint width, or a length or delta is outside `_ZIGZAG`.

    No Python step per record: each record is six pieces (the previous record's "no
    headers" byte, its length and `head`; its offset delta; the key's length; the key;
    the value's length; the value), and the pieces that depend on a length are looked
    up (`itemgetter`) in small tables of the lengths the run has. Where all keys' and
    all values' length varints are one width, a record's length is its key's and
    value's lengths plus a constant within each stretch of one offset-delta width."""
    count = len(values)
    try:
        key_lengths = list(map(len, keys))  # type: ignore[arg-type]
        value_lengths = list(map(len, values))  # type: ignore[arg-type]
    except TypeError:  # a None key or value
        return None
    low_key, high_key = min(key_lengths), max(key_lengths)
    low_value, high_value = min(value_lengths), max(value_lengths)
    top = high_key + high_value + len(head) + 16
    if (
        first + count > _ZIGZAG_CACHED
        or top >= _ZIGZAG_CACHED
        or _varint_width(low_key) != _varint_width(high_key)
        or _varint_width(low_value) != _varint_width(high_value)
    ):
        return None
    varint = _ZIGZAG
    if low_value == high_value:  # (fixed-size values: the length is the key's)
        sums, fixed_value = key_lengths, low_value
    else:
        sums, fixed_value = list(map(add, key_lengths, value_lengths)), 0
    # After the length: head, delta, key varint, key, value varint, value, no headers.
    widths = _varint_width(high_key) + _varint_width(high_value) + len(head) + 1
    leads: list[bytes] = []
    at = 0
    while at < count:
        width = len(varint[first + at])
        end = min(count, _WIDTH_ENDS[width] - first)
        fixed = widths + width + fixed_value
        part = sums[at:end] if (at, end) != (0, count) else sums
        table = {n: _NO_HEADERS + varint[n + fixed] + head for n in set(part)}
        leads += _lookup(table, part)
        at = end
    parts: list[bytes] = [_NO_HEADERS] * (6 * count + 1)
    parts[0:-1:6] = leads
    parts[0] = leads[0][1:]  # (no record before the first)
    parts[1::6] = varint[first : first + count]
    parts[2::6] = _lookup({n: varint[n] for n in set(key_lengths)}, key_lengths)
    parts[3::6] = keys  # type: ignore[assignment]
    if low_value == high_value:
        parts[4::6] = [varint[low_value]] * count
    else:
        parts[4::6] = _lookup({n: varint[n] for n in set(value_lengths)}, value_lengths)
    parts[5::6] = values  # type: ignore[assignment]
    return parts


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
        if 0 <= ts < _ZIGZAG_CACHED:
            body = b"\x00" + _ZIGZAG[ts]
        else:
            body = b"\x00" + _zigzag(ts)
        body += _ZIGZAG[delta] if delta < _ZIGZAG_CACHED else _zigzag(delta)
        if key is None:
            body += _NULL
        else:
            size = len(key)
            body += (_ZIGZAG[size] if size < _ZIGZAG_CACHED else _zigzag(size)) + key
        if value is None:
            body += _NULL
            value = b""
        else:
            size = len(value)
            body += _ZIGZAG[size] if size < _ZIGZAG_CACHED else _zigzag(size)
        tail = _encode_headers(headers) if headers else _NO_HEADERS
        size = len(body) + len(value) + len(tail)
        buffer = self._buffer
        buffer += _ZIGZAG[size] if size < _ZIGZAG_CACHED else _zigzag(size)
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
        table = _ZIGZAG
        cached = _ZIGZAG_CACHED
        delta = self._count
        # Each record: length, attributes 0, timestamp delta, offset delta, null key
        # (-1), value length, value, no headers. Only the varints vary; the pieces are
        # collected and joined once (cheaper than growing the bytearray piece by piece).
        parts: list[bytes] = []
        add = parts.append
        for timestamp, value in zip(timestamps, values):
            ts = timestamp - base
            head = b"\x00" + (table[ts] if 0 <= ts < cached else _zigzag(ts))
            head += table[delta] if delta < cached else _zigzag(delta)
            if value is None:
                head += _NULL_KEY_AND_VALUE
                size = len(head) + 1
                add(table[size] if size < cached else _zigzag(size))
                add(head)
            else:
                length = len(value)
                head += _NULL + (table[length] if length < cached else _zigzag(length))
                size = len(head) + length + 1
                add(table[size] if size < cached else _zigzag(size))
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
        first = timestamps[0]
        if count > _FEW:
            # A few runs of one timestamp (a load's batch, the producer's bulk sends):
            # laid out without a Python step per record.
            laid = self._keyed_runs(timestamps, keys, values)
            if laid is not None:
                self._extend(laid)
                self._count += count
                return
        base = self._timestamps_seen(first, max(timestamps))
        table = _ZIGZAG
        cached = _ZIGZAG_CACHED
        delta = self._count
        parts: list[bytes] = []
        add = parts.append
        for timestamp, key, value in zip(timestamps, keys, values):
            ts = timestamp - base
            head = b"\x00" + (table[ts] if 0 <= ts < cached else _zigzag(ts))
            head += table[delta] if delta < cached else _zigzag(delta)
            if key is None:
                head += _NULL
            else:
                length = len(key)
                head += (table[length] if length < cached else _zigzag(length)) + key
            if value is None:
                head += _NULL
                length = 0
            else:
                length = len(value)
                head += table[length] if length < cached else _zigzag(length)
            size = len(head) + length + 1
            add(table[size] if size < cached else _zigzag(size))
            add(head)
            if value is not None:
                add(value)
            add(_NO_HEADERS)
            delta += 1
        self._extend(parts)
        self._count = delta

    def _keyed_runs(
        self,
        timestamps: Sequence[int],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
    ) -> list[bytes] | None:
        """`_keyed_layout` of each run of one timestamp, joined; None (nothing changed
        but the batch's timestamps, as the loop sets them) where runs are many (more
        than one in 16 records), a timestamp is below the batch's base or the layout
        does not apply."""
        count = len(values)
        if timestamps.count(timestamps[0]) == count:
            runs = [(timestamps[0], count)]
        else:
            runs = [
                (ms, len(list(run))) for ms, run in islice(groupby(timestamps), count // 16 + 1)
            ]
            if sum(length for _, length in runs) != count:
                return None  # (more runs than that)
        base = self._timestamps_seen(timestamps[0], max(ms for ms, _ in runs))
        pieces: list[bytes] = []
        at = 0
        for ms, length in runs:
            ts = ms - base
            if not 0 <= ts < _ZIGZAG_CACHED:
                return None
            whole = length == count
            laid = _keyed_layout(
                _ATTRIBUTES + _ZIGZAG[ts],
                self._count + at,
                keys if whole else keys[at : at + length],
                values if whole else values[at : at + length],
            )
            if laid is None:
                return None
            pieces += laid  # (each run's pieces end with its last "no headers" byte)
            at += length
        return pieces

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
            0 <= length < _ZIGZAG_CACHED - 32
            and first + count <= _ZIGZAG_CACHED
            and low >= 0
            and high < _ZIGZAG_CACHED
        ):
            stops = [*run_starts[1:], count]
            timestamps: list[int] = []
            for start, stop, ms in zip(run_starts, stops, run_ms, strict=True):
                timestamps += [ms] * (stop - start)
            self.append_values(timestamps, values)
            return
        self._timestamps_seen(base, base + high)
        table = _ZIGZAG
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
