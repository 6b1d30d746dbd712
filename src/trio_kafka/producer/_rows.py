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
- A checkpoint also records the load's *routing* (`tk.routing`, JSON): everything that
  decides which row goes to which partition at which position (the partition count,
  this partitioner, the guarantee, and what the caller says made its rows: the key
  field, the input format...). A resume compares it with its own and refuses another
  (`routing_changes`): resuming with other routing would skip rows by numbers that now
  name other rows, loading some twice and others never.
- The checkpoint of a partition's last row, written once the input ended, also carries
  `tk.end` (`EndMarker`): the input's row count, how many partitions got rows, and this
  partition's rows. A rerun that finds every partition's end recognises a finished
  load from its checkpoints alone, without reading the input again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import attrs

from trio_kafka.producer._partitioner import partition_for_key
from trio_kafka.records import Record

LOAD_HEADER = "tk.load"
ROW_HEADER = "tk.row"
ROUTING_HEADER = "tk.routing"
END_HEADER = "tk.end"
#: The partitioner of every load (`partition_of`), as recorded in the routing.
PARTITIONER = "murmur2(key), else row % partitions"
#: Routing entries the loader itself records (a caller's own entries take other names).
LOADER_ROUTING = ("partitions", "partitioner", "guarantee")
#: A routing: names to JSON values (str, int, None, lists of str).
Routing = Mapping[str, object]
#: An input row: a value, or a (key, value) pair.
Row = bytes | None | tuple[bytes | None, bytes | None]
#: Rough bytes per record besides key and value (for sizing batches).
RECORD_OVERHEAD = 24


def checkpoint_headers(
    load_id: bytes, row: int, routing: bytes = b"", end: bytes = b""
) -> tuple[tuple[str, bytes], ...]:
    """The headers of the record that closes a batch or chunk ending at input `row`
    (with the load's encoded routing, and its end marker on a partition's last row)."""
    headers: tuple[tuple[str, bytes], ...] = ((LOAD_HEADER, load_id), (ROW_HEADER, b"%d" % row))
    if routing:
        headers += ((ROUTING_HEADER, routing),)
    if end:
        headers += ((END_HEADER, end),)
    return headers


def encode_routing(routing: Routing) -> bytes:
    """A routing as its header value (canonical JSON: equal routings, equal bytes; an
    entry that is None is not set, and left out)."""
    kept = {name: value for name, value in routing.items() if value is not None}
    return json.dumps(kept, sort_keys=True, separators=(",", ":")).encode()


def header_of(record: Record, name: str) -> bytes | None:
    """The value of `record`'s header `name` (the last one of that name), or None."""
    found: bytes | None = None
    for header, value in record.headers:
        if header == name:
            found = value
    return found


def routing_of(record: Record) -> dict[str, object] | None:
    """The routing a checkpoint records (None: none recorded, or not readable)."""
    raw = header_of(record, ROUTING_HEADER)
    if raw is None:
        return None
    try:
        routing = json.loads(raw)
    except ValueError:
        return None
    return routing if isinstance(routing, dict) else None


def routing_changes(recorded: Routing, now: Routing) -> list[str]:
    """What differs between the routing a load began with and this run's, one entry a
    name: "key_field: 'user' then, None now" (empty: the same; a missing entry is None)."""
    changes = []
    for name in sorted({*recorded, *now}):
        then, current = recorded.get(name), now.get(name)
        if then != current:
            changes.append(f"{name}: {then!r} then, {current!r} now")
    return changes


@attrs.frozen
class EndMarker:
    """What a partition's last checkpoint says once its load ended (`tk.end`)."""

    #: The input's rows, and how many partitions got at least one of them.
    rows: int
    partitions_with_rows: int
    #: This partition's rows.
    partition_rows: int

    def encode(self) -> bytes:
        return b"%d/%d/%d" % (self.rows, self.partitions_with_rows, self.partition_rows)

    @classmethod
    def of(cls, record: Record) -> EndMarker | None:
        raw = header_of(record, END_HEADER)
        if raw is None:
            return None
        try:
            rows, partitions, partition_rows = map(int, raw.split(b"/"))
        except ValueError:
            return None
        return cls(rows, partitions, partition_rows)


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
    "END_HEADER",
    "LOADER_ROUTING",
    "LOAD_HEADER",
    "PARTITIONER",
    "RECORD_OVERHEAD",
    "ROUTING_HEADER",
    "ROW_HEADER",
    "EndMarker",
    "Routing",
    "Row",
    "checkpoint_headers",
    "encode_routing",
    "header_of",
    "partition_of",
    "routing_changes",
    "routing_of",
    "row_of",
]
