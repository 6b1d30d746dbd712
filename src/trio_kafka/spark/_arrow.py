"""Kafka's partition rule over Arrow columns, vectorized (numpy): no Python step per row.

`partitions_of(rows, keys, n)` is `partition_of(row, key, n)` (core/_load.py) for
every row at once: murmur2 of the key as Java computes it (core/_partitioner.py, bit for
bit: little-endian 4-byte words, then the 1-3 tail bytes, then the final mix; uint32
arithmetic wraps as Java's int does), `& 0x7fffffff`, `% n`; a null key goes by
`row % n`. The key bytes are read from the Arrow array's own buffers (offsets and
data), not as Python `bytes`: the words of every key are mixed in one numpy step per
word position (a key of L bytes takes L // 4 of them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

_SEED = np.uint32(0x9747B28C)
_M = np.uint32(0x5BD1E995)


def _binary(keys: Any) -> Any:
    """`keys` as one `pa.binary()` array (chunks combined, strings as their UTF-8)."""
    import pyarrow as pa  # type: ignore[import-untyped]

    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if not pa.types.is_binary(keys.type):
        keys = keys.cast(pa.binary())
    return keys


def murmur2_positive(keys: Any) -> np.ndarray[Any, Any]:
    """`murmur2(key) & 0x7fffffff` of every key of an Arrow binary array (uint32; a
    null key's entry is meaningless)."""
    keys = _binary(keys)
    count = len(keys)
    _, offsets_buffer, data_buffer = keys.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int32, count=count + 1, offset=keys.offset * 4)
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else None
    starts = offsets[:-1].astype(np.int64)
    lengths = (offsets[1:] - offsets[:-1]).astype(np.int64)
    # Three zero bytes past the end: a word read never leaves the buffer.
    padded = np.zeros((0 if data is None else len(data)) + 4, dtype=np.uint32)
    if data is not None:
        padded[: len(data)] = data
    h = np.uint32(_SEED) ^ lengths.astype(np.uint32)
    words = lengths >> 2
    for word in range(int(words.max()) if count else 0):
        which = np.flatnonzero(words > word)
        at = starts[which] + 4 * word
        k = padded[at] | (padded[at + 1] << 8) | (padded[at + 2] << 16) | (padded[at + 3] << 24)
        k *= _M
        k ^= k >> 24
        k *= _M
        h[which] = (h[which] * _M) ^ k
    tail = lengths & 3
    base = starts + lengths - tail
    three, two, one = tail == 3, tail >= 2, tail >= 1
    h[three] ^= padded[base[three] + 2] << 16
    h[two] ^= padded[base[two] + 1] << 8
    h[one] ^= padded[base[one]]
    h[one] *= _M
    h ^= h >> 13
    h *= _M
    h ^= h >> 15
    positive: np.ndarray[Any, Any] = h & np.uint32(0x7FFFFFFF)
    return positive


def partitions_of(rows: Any, keys: Any | None, partitions: int) -> np.ndarray[Any, Any]:
    """The Kafka partition of every row (int32): `partition_of` vectorized (module doc).
    `rows`: the rows' input numbers (Arrow or numpy int64); `keys`: Arrow binary or
    string array, or None (no keys)."""
    numbers = np.asarray(rows, dtype=np.int64)
    by_row = (numbers % partitions).astype(np.int32)
    if keys is None:
        return by_row
    keys = _binary(keys)
    if keys.null_count == len(keys):
        return by_row
    by_key = (murmur2_positive(keys) % np.uint32(partitions)).astype(np.int32)
    if keys.null_count:
        nulls = np.asarray(keys.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        by_key[nulls] = by_row[nulls]
    return by_key


__all__ = ["murmur2_positive", "partitions_of"]
