"""Zigzag varints and varlongs of record batch v2 (the protobuf encoding).

Records carry their lengths, deltas and counts as zigzag varints (signed values mapped to
unsigned: 0, -1, 1, -2, ... -> 0, 1, 2, 3, ...) written 7 bits at a time, low group
first, high bit set on every byte but the last. VARINT holds an int32 (at most 5 bytes),
VARLONG an int64 (at most 10 bytes); Kafka's reader rejects longer encodings.

Encoding is on the producer's hot path, so the encodings of the small non-negative values
that make up nearly every length and offset delta are computed once, at import, into
`ZIGZAG`: `ZIGZAG[n]` is the zigzag varint of `n` for `0 <= n < ZIGZAG_CACHED`.
"""

from __future__ import annotations

from trio_kafka.errors import CorruptRecordError

# 16,384 entries cover every length and offset delta of a batch up to 16 KiB values and
# 16k records, at about 600 KB of memory; bigger values take the slow path.
ZIGZAG_CACHED = 1 << 14

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1


def encode_unsigned(value: int) -> bytes:
    """The unsigned LEB128 encoding of a non-negative integer."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def zigzag(value: int) -> bytes:
    """The zigzag varint (or varlong) encoding of a signed integer."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{value} does not fit a varlong (int64)")
    return encode_unsigned(value << 1 if value >= 0 else ((-value) << 1) - 1)


ZIGZAG: tuple[bytes, ...] = tuple(zigzag(n) for n in range(ZIGZAG_CACHED))
MINUS_ONE = zigzag(-1)  # the length of a null key, value or header value


def read_unsigned(data: bytes, position: int, max_bytes: int) -> tuple[int, int]:
    """Read an unsigned LEB128 value; returns (value, position after it).

    Raises IndexError when `data` ends first (callers turn it into CorruptRecordError)
    and CorruptRecordError when the encoding runs over `max_bytes`.
    """
    value = 0
    shift = 0
    start = position
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
        if position - start >= max_bytes:
            raise CorruptRecordError(
                f"varint at byte {start} is longer than {max_bytes} bytes",
            )


def read_varint(data: bytes, position: int) -> tuple[int, int]:
    """Read a zigzag VARINT (int32); returns (value, position after it)."""
    raw, position = read_unsigned(data, position, 5)
    value = (raw >> 1) ^ -(raw & 1)
    if not INT32_MIN <= value <= INT32_MAX:
        raise CorruptRecordError(f"varint ending at byte {position} overflows int32: {value}")
    return value, position


def read_varlong(data: bytes, position: int) -> tuple[int, int]:
    """Read a zigzag VARLONG (int64); returns (value, position after it)."""
    raw, position = read_unsigned(data, position, 10)
    value = (raw >> 1) ^ -(raw & 1)
    if not INT64_MIN <= value <= INT64_MAX:
        raise CorruptRecordError(f"varlong ending at byte {position} overflows int64: {value}")
    return value, position
