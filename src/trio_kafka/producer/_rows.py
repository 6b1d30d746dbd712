"""The identity of a loaded row: its partition, and the checkpoint headers (sans-IO).

Shared by every load (BulkLoader, `trio-kafka load`, the Spark writers), whatever the
backend, so a load started by one can be resumed by another:

- Rows are numbered by their position in the input (0, 1, 2, ...). A row's partition is
  decided by the row alone: murmur2 of its key (Java's default partitioner) when it has
  one, else `row % partitions`. A partition thus receives a fixed, ordered subsequence of
  the input.
- The last record of each batch (CAS) or chunk (transactions) is the *checkpoint*: it
  carries `tk.load` (the load id) and `tk.row` (its input row number, decimal). Batches
  and chunks are all-or-nothing, so "the last checkpoint of this load in the partition"
  says exactly which of the partition's rows are loaded: all of them up to that row.
"""

from __future__ import annotations

from trio_kafka.producer._murmur import partition_for_key
from trio_kafka.records import Record

LOAD_HEADER = "tk.load"
ROW_HEADER = "tk.row"
#: An input row: a value, or a (key, value) pair.
Row = bytes | None | tuple[bytes | None, bytes | None]
#: Rough bytes per record besides key and value (for sizing batches).
RECORD_OVERHEAD = 24


def checkpoint_headers(load_id: bytes, row: int) -> tuple[tuple[str, bytes], tuple[str, bytes]]:
    """The headers of the record that closes a batch or chunk ending at input `row`."""
    return ((LOAD_HEADER, load_id), (ROW_HEADER, b"%d" % row))


def row_of(record: Record, load_id: bytes) -> int | None:
    """The input row of a checkpoint record of load `load_id` (None otherwise)."""
    load: bytes | None = None
    row: bytes | None = None
    for name, value in record.headers:
        if name == LOAD_HEADER:
            load = value
        elif name == ROW_HEADER:
            row = value
    if load != load_id or row is None:
        return None
    try:
        return int(row)
    except ValueError:
        return None


def partition_of(row: int, key: bytes | None, partitions: int) -> int:
    """The partition of input row `row`: by key (murmur2) or round robin by row."""
    if key is not None:
        return partition_for_key(key, partitions)
    return row % partitions


__all__ = [
    "LOAD_HEADER",
    "RECORD_OVERHEAD",
    "ROW_HEADER",
    "Row",
    "checkpoint_headers",
    "partition_of",
    "row_of",
]
