"""Kafka's murmur2 key hash, bit for bit as the Java client computes it.

`partition_for_key(key, n)` is Java's `BuiltInPartitioner.partitionForKey`:
`toPositive(murmur2(key)) % n`, where `toPositive` masks the sign bit (it does not take
an absolute value). librdkafka's `murmur2` / `murmur2_random` partitioners compute the
same function, so a key lands on the same partition from Java, librdkafka and us.
"""

from __future__ import annotations

import struct

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
_UNPACKERS: dict[int, struct.Struct] = {}


def murmur2(data: bytes) -> int:
    """Java's `Utils.murmur2`: the 32-bit hash as a signed Java int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    words = length >> 2
    if words:
        unpack = _UNPACKERS.get(words)
        if unpack is None:
            unpack = _UNPACKERS[words] = struct.Struct(f"<{words}I")
        for k in unpack.unpack_from(data):
            k = (k * _M) & _MASK
            k ^= k >> 24
            k = (k * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        base = length - tail
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(value: int) -> int:
    """Java's `Utils.toPositive`: clear the sign bit (not `abs`)."""
    return value & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Java's default partitioner gives a keyed record."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions
