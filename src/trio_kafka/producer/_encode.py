"""Encoding a batch's records that have a key, an explicit timestamp or headers.

A batch of plain values encodes in one bulk call (`BatchBuilder.append_runs`); one with
some records that carry more goes here: the runs between the records with a timestamp
or headers still go in bulk (keyed or not), and those records one by one.
"""

from __future__ import annotations

from itertools import groupby
from typing import TYPE_CHECKING

from trio_kafka.producer._record import Headers

#: One ProduceRequest's records: topic -> [(partition, record batch bytes)].
ProduceData = dict[str, list[tuple[int, bytes]]]

if TYPE_CHECKING:
    from trio_kafka.records import BatchBuilder


def encode_with_extras(
    builder: BatchBuilder,
    stamps: list[int],
    values: list[bytes | None],
    extras: dict[int, tuple[int | None, bytes | None, Headers | None]] | None,
    bulk_keys: list[bytes | None] | None,
) -> None:
    """Encode records some of which have a key, an explicit timestamp or headers: the
    runs between records with a timestamp or headers go in bulk, keyed or not (a load's
    batch is keyed rows, or plain rows, with one checkpoint record with headers)."""
    keys: list[bytes | None] | None = None
    if bulk_keys is not None:
        keys = bulk_keys + [None] * (len(values) - len(bulk_keys))
    special: list[int] = []
    extras = extras or {}
    for index, (ts, key, headers) in extras.items():
        if ts is not None or headers:
            special.append(index)
        elif key is not None:
            if keys is None:
                keys = [None] * len(values)
            keys[index] = key
    special.sort()
    start = 0
    for stop in [*special, len(values)]:
        if stop > start:
            if keys is None:
                # The timestamps as runs of one millisecond (found in C: groupby and
                # list), so a segment spanning several milliseconds keeps the fixed
                # layout of append_runs instead of a Python step per record.
                run_starts: list[int] = []
                run_ms: list[int] = []
                at = 0
                for ms, run in groupby(stamps[start:stop]):
                    run_starts.append(at)
                    run_ms.append(ms)
                    at += len(list(run))
                builder.append_runs(run_starts, run_ms, values[start:stop])
            else:
                builder.append_keyed_values(
                    stamps[start:stop], keys[start:stop], values[start:stop]
                )
        if stop < len(values):
            ts, key, headers = extras[stop]
            builder.append(stamps[stop] if ts is None else ts, key, values[stop], headers or ())
        start = stop + 1
