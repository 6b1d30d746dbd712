"""How `BulkLoader`'s feeder routes a block of input rows: each partition's share of the
block as one run (row numbers, keys or None, values), so the pipelines take lists, not
a call per row. Rows without keys go round robin by row number (a strided slice of the
block); keyed rows go by murmur2 of the key (`partition_of`, producer/_rows.py). A row
that is not bytes, None or a (key, value) pair is refused with its row number.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trio_kafka.producer._rows import partition_of

#: Input rows routed at a time: each partition's share of a block is one run (memory
#: bounded by the block; a partition's run is under one 4 MiB chunk of 100 B rows).
FEED_BLOCK = 1 << 15
UNKEYED = frozenset((bytes, type(None)))
_KEY_CACHE = 65536
#: One partition's share of a block: (partition, row numbers, keys or None, values).
Run = tuple[int, Sequence[int], list[bytes | None] | None, list[bytes | None]]


def unkeyed_runs(block: list[Any], first: int, count: int) -> list[Run]:
    """Rows without keys go round robin by row number: partition p's share of the block
    (rows `first` on) is a slice with step `count`."""
    runs: list[Run] = []
    for partition in range(count):
        offset = (partition - first) % count
        values = block[offset::count]
        if values:
            start = first + offset
            runs.append((partition, range(start, start + len(values) * count, count), None, values))
    return runs


def keyed_runs(
    block: list[Any], first: int, count: int, key_partitions: dict[bytes, int]
) -> list[Run]:
    """Rows with keys (and maybe some without): each to its partition (`partition_of`:
    murmur2 of the key, else round robin by row), in row order."""
    rows: list[list[int]] = [[] for _ in range(count)]
    keys: list[list[bytes | None]] = [[] for _ in range(count)]
    values: list[list[bytes | None]] = [[] for _ in range(count)]
    keyed = [False] * count
    for index, item in enumerate(block, first):
        if item.__class__ is tuple and len(item) == 2:
            key, value = item
        elif item is None or item.__class__ is bytes:
            key, value = None, item
        else:
            key, value = _row_parts(index, item)
        if value is not None and value.__class__ is not bytes:
            value = _as_bytes(index, "value", value)
        if key is None:
            partition = index % count
        else:
            if key.__class__ is not bytes:
                key = _as_bytes(index, "key", key)
            partition = key_partitions.get(key, -1)
            if partition < 0:
                if len(key_partitions) >= _KEY_CACHE:
                    key_partitions.clear()
                partition = key_partitions[key] = partition_of(index, key, count)
            keyed[partition] = True
        rows[partition].append(index)
        keys[partition].append(key)
        values[partition].append(value)
    return [(p, rows[p], keys[p] if keyed[p] else None, values[p]) for p in range(count) if rows[p]]


def _row_parts(index: int, item: Any) -> tuple[Any, Any]:
    """(key, value) of an input row that is not plain bytes, None or a pair."""
    if isinstance(item, tuple):
        if len(item) != 2:
            raise TypeError(
                f"row {index} is a tuple of {len(item)} items: a keyed row is a (key, value) pair"
            )
        return item[0], item[1]
    return None, item


def _as_bytes(index: int, what: str, item: Any) -> bytes:
    if isinstance(item, bytes | bytearray | memoryview):
        return bytes(item)
    raise TypeError(
        f"the {what} of row {index} is a {type(item).__name__}: a row is bytes, None, or a "
        "(key, value) pair of bytes or None"
    )


__all__ = ["FEED_BLOCK", "UNKEYED", "Run", "keyed_runs", "unkeyed_runs"]
