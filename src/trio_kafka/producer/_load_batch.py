"""The values of the load pipeline (producer/_load.py): its backends, the steps it tells
the shell to take, and its batches, sealed (`LoadBatch`) and open (`OpenLoadBatch`).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from itertools import repeat

import attrs

from trio_kafka.errors import ErrorCode, KafkaError, RecordTooLargeError, error_for_code
from trio_kafka.producer._rows import RECORD_OVERHEAD
from trio_kafka.records import BatchBuilder

#: Default batch size of a load (the broker's default max.message.bytes is 1 MiB).
DEFAULT_BATCH_BYTES = 512 * 1024
#: The headers of a checkpoint record.
CheckpointHeaders = tuple[tuple[str, bytes], ...]


def run_size(values: Sequence[bytes | None], keys: Sequence[bytes | None] | None) -> int:
    """The estimated bytes of a run of records (`RECORD_OVERHEAD` each, plus keys and
    values; None counts 0): `record_sizes(...)[-1]`, in C sums without a list."""
    try:
        size = sum(map(len, values))  # type: ignore[arg-type]
    except TypeError:  # a None value
        size = sum(map(len, filter(None, values)))
    if keys is not None:
        try:
            size += sum(map(len, keys))  # type: ignore[arg-type]
        except TypeError:
            size += sum(map(len, filter(None, keys)))
    return size + RECORD_OVERHEAD * len(values)


class Backend(enum.Enum):
    """How a load makes its writes exactly once (see docs/cas.md)."""

    CAS = "exactly_once_cas"
    TRANSACTIONS = "transactional"


class Step(enum.Enum):
    """What the shell does after `on_answer` / `on_read`."""

    ACKNOWLEDGED = "acknowledged"  # the batch is done; go on
    IGNORED = "ignored"  # an answer drained during a rewind
    RETRY = "retry"  # rewinding: wait `poll_delay`, maybe refresh, then `next_send`
    READ = "read"  # read the record at `read_offset(batch)`, then `on_read`
    FAIL = "fail"  # raise `pipeline.error`


class BatchState(enum.Enum):
    UNSENT = "unsent"
    IN_FLIGHT = "in-flight"
    ACKNOWLEDGED = "acknowledged"


@attrs.define(eq=False, slots=True)
class LoadBatch:
    """A sealed batch (CAS) or chunk (transactions) of one partition's rows."""

    first_row: int
    last_row: int
    count: int
    size: int
    #: CAS: the encoded records (rebuilt with new header fields on a new producer id).
    builder: BatchBuilder | None
    #: Transactions: the values and keys (None: no row has a key) of the rows before
    #: the last, in row order (whole lists for `send_many`, no copy); the last row is
    #: the checkpoint: its value and key, and its `headers`.
    values: list[bytes | None] | None = None
    keys: list[bytes | None] | None = None
    checkpoint_value: bytes | None = None
    checkpoint_key: bytes | None = None
    headers: CheckpointHeaders | None = None
    expected_offset: int = -1
    #: Transactions, streamed: how many of `values` are handed to the open transaction.
    streamed: int = 0
    base_sequence: int = -1
    state: BatchState = BatchState.UNSENT
    #: The wire bytes for (producer id, epoch, base sequence) `_built_for` (CAS).
    data: bytes = b""
    _built_for: tuple[int, int, int] = (-1, -1, -1)


@attrs.define(eq=False)
class OpenLoadBatch:
    """The batch being filled: its rows' values and keys (None while no row has one),
    first and last row, and estimated size."""

    values: list[bytes | None] = attrs.Factory(list)
    keys: list[bytes | None] | None = None
    first_row: int = -1
    last_row: int = -1
    size: int = 0
    #: Transactions, streamed: how many rows are handed to the open transaction (never
    #: the last: it becomes the checkpoint if the batch is sealed after it).
    streamed: int = 0

    def take(
        self,
        rows: Sequence[int],
        keys: Sequence[bytes | None] | None,
        values: Sequence[bytes | None],
        start: int,
        stop: int,
        size: int,
    ) -> None:
        """Rows `start` to `stop - 1` of a run, `size` bytes in all."""
        if not self.values:
            self.first_row = rows[start]
        if keys is not None:
            if self.keys is None:
                self.keys = [None] * len(self.values)
            self.keys.extend(keys[start:stop])
        elif self.keys is not None:
            self.keys.extend(repeat(None, stop - start))
        self.values.extend(values[start:stop])
        self.last_row = rows[stop - 1]
        self.size += size


#: Rows of a chunk to hand to its transaction: values, and keys (None: no row has one).
StreamRows = tuple[list[bytes | None], list[bytes | None] | None]


def unstreamed(
    values: list[bytes | None], keys: list[bytes | None] | None, start: int, stop: int
) -> StreamRows | None:
    """Rows `start` to `stop - 1` (None: none)."""
    if stop <= start:
        return None
    if start == 0 and stop == len(values):
        return values, keys  # (a whole sealed chunk: no copy)
    return values[start:stop], None if keys is None else keys[start:stop]


def load_failure(
    code: int | None, message: str, batch: LoadBatch, where: str, batch_bytes: int
) -> KafkaError:
    """The error of a load's batch refused with `code`. MESSAGE_TOO_LARGE names its rows
    and what to change: a load never splits a batch (its rows' offsets are fixed in
    advance), so it stops there."""
    assert code is not None
    if code != ErrorCode.MESSAGE_TOO_LARGE:
        return error_for_code(code, message or None)
    if batch.count == 1:
        rows = f"row {batch.first_row}"
        advice = "that row alone is larger than the topic's max.message.bytes"
    else:
        rows = f"rows {batch.first_row}-{batch.last_row} ({batch.count} rows)"
        advice = (
            f"lower batch_bytes (now {batch_bytes}) below the topic's max.message.bytes, "
            "or raise that"
        )
    said = f": {message}" if message else ""
    return RecordTooLargeError(
        f"{where}: the batch of {rows}, about {batch.size} bytes, is larger than the "
        f"broker accepts (MESSAGE_TOO_LARGE{said}); {advice}. The rows before it are "
        "loaded: a rerun resumes after them"
    )
