"""The load pipeline (sans-IO): input rows to checkpointed batches of one partition,
written exactly once and resumably.

Theory of operation
-------------------
A load writes a fixed, ordered subsequence of input rows into each partition.
`LoadPipeline` decides everything about one partition's write and does no I/O: the
shell (client/_bulk.py) feeds it rows, sends what it is told, and feeds back the
answers, with `now` passed in. This module holds the whole job: the identity of a row
and its checkpoint, the batches, the pipeline's rules and the pipeline.

The identity of a loaded row, shared by every load (BulkLoader, `trio-kafka load`, the
Spark writers), whatever the backend, so a load started by one can be resumed by
another:

- Rows are numbered by their position in the input (0, 1, 2, ...). A row's partition is
  decided by the row alone: murmur2 of its key (Java's default partitioner) when it has
  one, else `row % partitions` (`partition_of`). A partition thus receives a fixed,
  ordered subsequence of the input.
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

Resume. The shell reads the partition first (`resume point`: the log end offset and the
last checkpoint row of this load found there) and builds the pipeline with it: rows up
to that row are skipped (`skip(row)`), the rest are appended after the log end.

Batches (`add`, `add_run`, `finish`). Rows go into the open batch (`OpenLoadBatch`)
until the next one would push it past `batch_bytes`; the batch is then sealed (a
`LoadBatch`: its last row carries the checkpoint headers) and queued. `add_run` takes a
whole run of a partition's rows at once (row numbers, values, keys as lists): a run that
fits the open batch is sized by one sum (`run_size`); otherwise the cut is found from
the run's cumulative sizes by bisection. The rows move as list slices: a load's per-row
work is C work, not a Python call per row. A batch is written whole or not at all, and
its checkpoint covers every row in it.

Backends. `Backend.CAS`: each batch is one Produce request of one idempotent record
batch whose base offset is the *expected offset*, the log end the batch must start at
(batch k expects where batch k-1 ends). `Backend.TRANSACTIONS`: each batch is a chunk
the shell writes in one transaction (its rows and its checkpoint commit together);
there the pipeline only cuts chunks, counts and checkpoints (`committed(batch)`), and
the transactional producer does sequencing, batching and retries (the producer core's
accumulator cuts the chunk's rows into its own batches). A chunk is either taken whole
once sealed (`take_sealed`) or streamed: `stream_rows` gives the oldest chunk's rows
as they come, holding the open batch's last row back (it becomes the checkpoint if the
batch is sealed after it), `chunk_streamed` says when the sealed chunk's rows are all
out (send its checkpoint row, commit), `restream` starts it over after an abort.

The CAS window (`next_send`, `on_answer`). Up to `max_in_flight` (5, the broker's dedup
window) batches are in flight; answers are taken in order, oldest first, and classified
by the one error classification (core/_core.py `classify`, through
`LoadRules.load_answer`):

- acknowledged (NONE, DUPLICATE_SEQUENCE_NUMBER): the batch is done; the checkpoint
  advances to its last row;
- no answer (lost connection, timeout) or a retriable code: *rewind*. The answers of the
  rest of the window are drained and ignored, and after a backoff every unacknowledged
  batch is resent in order, the same bytes at the same expected offset with the same
  sequence: the broker deduplicates what landed (NONE or DUPLICATE with the original
  offset) and CAS refuses anything else that would land twice;
- UNKNOWN_PRODUCER_ID / OUT_OF_ORDER_SEQUENCE_NUMBER: rewind under a new producer id
  (`needs_producer_id`; the shell gets one from the one idempotent InitProducerId,
  client/_producer_id.py, and calls `set_producer`), sequences from 0 again; CAS still
  stops a duplicate: a resent batch that had landed meets a mismatch;
- EXPECTED_OFFSET_MISMATCH: nothing of this attempt was written. `Step.READ`: the shell
  reads the record at `read_offset(batch)` (the batch's last expected offset) and calls
  `on_read(batch, row)` with its checkpoint row (None: not ours). Our row: an earlier
  attempt landed (the broker lost our producer state), acknowledged. Otherwise another
  writer took the offset: `Step.FAIL` with `ConcurrentWriteError`, and the load stops.
  The batches behind it cannot land: their sequences follow one the broker never took;
- anything else: `Step.FAIL` with the broker's error (MESSAGE_TOO_LARGE names the rows:
  `load_failure`).

Why the CAS window is not the producer's `Sequencer`: a CAS batch's offset is fixed
before it is sent (its expected offset), so it is never split, merged or re-batched,
each request carries exactly one batch, and a mismatch is resolved by reading the log;
the producer's sequencer re-batches, splits and bumps epochs instead.

A batch without progress for `retry_timeout` seconds fails the load with an
`AmbiguousError` (a rerun resumes after what landed). Delays: the injected `backoff`.

The decisions where a wrong rule loses or duplicates rows are `LoadRules` (gathered with
the others in core/_rules.py, where a caller may pass its own).

State owned here: the queue of sealed unacknowledged batches in order (`_batches`),
the open batch, the next expected offset and sequence, the producer id, the rewind
(`_rewinding`, `_retry_at`, `_attempts`, `_stuck_since`), and `checkpoint`.
"""

from __future__ import annotations

import collections
import enum
import json
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat

import attrs

from trio_kafka.core._accumulator import record_sizes
from trio_kafka.core._core import Action, classify
from trio_kafka.core._partitioner import partition_for_key
from trio_kafka.errors import (
    AmbiguousError,
    ConcurrentWriteError,
    ConfigError,
    ErrorCode,
    KafkaError,
    RecordTooLargeError,
    error_for_code,
)
from trio_kafka.records import BatchBuilder, Record

# -- the identity of a loaded row -------------------------------------------------------

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


#: Routing entries that trio-kafka began recording after loads were begun without them
#: (`trio-kafka load`'s `input`, its file's SHA-256): a checkpoint without one says
#: nothing about it, so it is not compared (`unrecorded`), where any other missing entry
#: means None (no key field, ...).
RECORDED_SINCE = frozenset({"input"})


def unrecorded(recorded: Routing, now: Routing) -> list[str]:
    """The entries of this run's routing that the load's checkpoints do not record and
    so cannot be checked (those of `RECORDED_SINCE` that a load begun before them lacks)."""
    return sorted(name for name in RECORDED_SINCE if name in now and name not in recorded)


def routing_changes(recorded: Routing, now: Routing) -> list[str]:
    """What differs between the routing a load began with and this run's, one entry a
    name: "key_field: 'user' then, None now" (empty: the same; a missing entry is None,
    except one of `RECORDED_SINCE`, which is not compared)."""
    changes = []
    for name in sorted({*recorded, *now}):
        then, current = recorded.get(name), now.get(name)
        if then is None and name in RECORDED_SINCE:
            continue
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


# -- batches -------------------------------------------------------------------------

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


class LoadBatchState(enum.Enum):
    """Where a sealed load batch is: queued, sent and unanswered, or done."""

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
    state: LoadBatchState = LoadBatchState.UNSENT
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


# -- the rules ------------------------------------------------------------------------


class LoadRules:
    """The load pipeline's part of the rules (core/_rules.py gathers them into
    `Rules`)."""

    def loaded_through(self, resumed_after_row: int) -> int:
        """A resumed load skips the rows up to its last checkpoint, and no further."""
        return resumed_after_row

    def load_batch_offset(self, expected_offset: int) -> int:
        """The base offset a load batch is built with: its expected offset (CAS: the
        broker appends it there or nowhere; -1 under the transactional backend)."""
        return expected_offset

    def checkpoint_committed(self, first_marker_after: bool | None) -> bool:
        """Whether a checkpoint in a transactional batch counts on resume, by the first
        transaction marker of its producer id after it: a COMMIT (True) counts; an
        ABORT (False) or none yet (None: the transaction is open) does not."""
        return first_marker_after is True

    def restream_from(self, streamed: int) -> int:
        """Where an aborted chunk's rows go again from (`streamed` of them were sent in
        the aborted transaction): its first row, since none of them is in the log."""
        return 0

    def load_answer(self, code: int | None) -> Action:
        """What a load batch's answer means (`_actions.classify`): no answer or a
        retriable error is resent at the same offset, a mismatch is read."""
        return classify(code)


# -- the pipeline ---------------------------------------------------------------------


class LoadPipeline:
    """One partition's load (see the module doc)."""

    def __init__(
        self,
        topic: str,
        partition: int,
        load_id: bytes,
        *,
        backend: Backend,
        log_end_offset: int,
        resumed_after_row: int = -1,
        foreign_after: bool = False,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
        max_in_flight: int = 5,
        retry_timeout: float = 120.0,
        backoff: Callable[[int], float] = lambda attempts: 0.0,
        rules: LoadRules | None = None,
        routing: bytes = b"",
    ) -> None:
        #: The decisions where a wrong rule loses or duplicates rows (core/_rules.py).
        self.rules = LoadRules() if rules is None else rules
        if not 1 <= max_in_flight <= 5:
            raise ConfigError(
                f"max_in_flight={max_in_flight}: use 1 to 5 (the broker's dedup window)"
            )
        if batch_bytes < 1:
            raise ConfigError(f"batch_bytes={batch_bytes}: a batch needs at least one byte")
        self.topic = topic
        self.partition = partition
        self.load_id = load_id
        #: The load's routing, recorded with every checkpoint.
        self.routing = routing
        self.backend = backend
        self.batch_bytes = batch_bytes
        self.max_in_flight = max_in_flight
        self.retry_timeout = retry_timeout
        self._backoff = backoff
        #: Where the partition's log ended when the load (re)started.
        self.start_offset = log_end_offset
        #: The offset the next sealed batch expects (CAS).
        self.next_offset = log_end_offset
        #: The last row of this load found in the partition at the start (-1: none).
        self.resumed_after_row = resumed_after_row
        #: Other writers appended after that row: appending would split the load (CAS).
        self.foreign_after = foreign_after
        #: The last row known written (a checkpoint in the log), and the counts.
        self.checkpoint = resumed_after_row
        # Bytes per row of the last run (a guess of whether the next one fits whole).
        self._row_bytes = RECORD_OVERHEAD
        # An empty batch must first check for other writers' records (CAS).
        self._split_guard = foreign_after and backend is Backend.CAS
        self.loaded = 0
        self.loaded_bytes = 0
        self.skipped = 0
        #: Rows given to this pipeline (loaded, skipped or not yet written).
        self.given = 0
        # Sealed batches not yet acknowledged, in row order (the window is a prefix).
        self._batches: collections.deque[LoadBatch] = collections.deque()
        self._open = OpenLoadBatch()
        # The producer the batches are sequenced for (-1: InitProducerId is due).
        self.producer_id = -1
        self.producer_epoch = -1
        self._next_sequence = 0
        # The rewind: set when the oldest batch failed; resends wait until the window
        # drained and `_retry_at` passed. `_attempts` counts failures without progress.
        self._rewinding = False
        self._retry_at = 0.0
        self._attempts = 0
        self._stuck_since: float | None = None
        #: The metadata is stale (the shell refreshes it, then calls `metadata_refreshed`).
        self.refresh_metadata = False
        #: Why the load of this partition stopped (Step.FAIL).
        self.error: KafkaError | None = None

    def __repr__(self) -> str:
        in_flight = sum(1 for b in self._batches if b.state is LoadBatchState.IN_FLIGHT)
        return (
            f"<LoadPipeline {self.topic}-{self.partition} {self.backend.value} "
            f"next_offset={self.next_offset} checkpoint={self.checkpoint} "
            f"queued={len(self._batches)} in_flight={in_flight}"
            f"{' rewinding' if self._rewinding else ''}>"
        )

    # -- rows in -------------------------------------------------------------------------

    def _resumed_through(self) -> int:
        """The last row already loaded: rows up to it are skipped."""
        return self.rules.loaded_through(self.resumed_after_row)

    def skip(self, row: int) -> bool:
        """Whether `row` is already loaded (at or before the resume checkpoint)."""
        if row <= self._resumed_through():
            self.skipped += 1
            return True
        return False

    def add(self, row: int, key: bytes | None, value: bytes | None, timestamp_ms: int) -> bool:
        """Append `row` to the open batch; True when that sealed the previous batch first
        (it is then queued: hand it on with `take_sealed`)."""
        return self.add_run((row,), None if key is None else (key,), (value,), timestamp_ms) > 0

    def add_run(
        self,
        rows: Sequence[int],
        keys: Sequence[bytes | None] | None,
        values: Sequence[bytes | None],
        timestamp_ms: int,
    ) -> int:
        """Append a run of rows (ascending row numbers, with their keys or None for none,
        and values); rows already loaded are skipped (counted in `skipped`). Returns how
        many batches this sealed (queued: hand them on with `take_sealed`)."""
        self.given += len(rows)
        resumed = self._resumed_through()
        if rows and rows[0] <= resumed:
            cut = bisect_right(rows, resumed)
            self.skipped += cut
            rows, values = rows[cut:], values[cut:]
            keys = None if keys is None else keys[cut:]
        total = len(rows)
        if not total:
            return 0
        if len(values) != total or (keys is not None and len(keys) != total):
            raise ValueError(
                f"add_run: {total} rows, {len(values)} values, "
                f"{'no' if keys is None else len(keys)} keys"
            )
        current = self._open
        room = self.batch_bytes - current.size
        if total * self._row_bytes <= room and (current.values or not self._split_guard):
            # The run likely fits the open batch whole (a transaction's chunk takes
            # several runs): its size is one sum, not a list of cumulative sizes (an int
            # object per row); what it takes is what the cut below would take.
            size = run_size(values, keys)
            self._row_bytes = size // total
            if size <= room:
                current.take(rows, keys, values, 0, total, size)
                return 0
        cumulative = record_sizes(values, keys, RECORD_OVERHEAD)
        self._row_bytes = cumulative[-1] // total
        sealed = 0
        position = 0
        while position < total:
            current = self._open
            if not current.values:
                if self._split_guard:
                    raise ConcurrentWriteError(
                        f"{self.topic}-{self.partition} holds records of other writers after "
                        f"the last record of load {self.load_id.decode(errors='replace')!r} "
                        f"(row {self.resumed_after_row}); appending the rest there would "
                        "split the load around them",
                        offset=self.start_offset,
                    )
                # An empty batch takes at least one row, however large.
                room = max(self.batch_bytes, cumulative[position + 1] - cumulative[position])
            else:
                room = self.batch_bytes - current.size
            stop = bisect_right(cumulative, cumulative[position] + room, position) - 1
            if stop <= position:  # the next row does not fit: seal, go on in a new batch
                self._seal(timestamp_ms)
                sealed += 1
                continue
            current.take(
                rows, keys, values, position, stop, cumulative[stop] - cumulative[position]
            )
            position = stop
        return sealed

    def finish(self, timestamp_ms: int, end: bytes = b"") -> bool:
        """Seal the open batch (no more rows, or a transaction to end early); True when
        there was one. `end`: the input ended, and the batch's checkpoint carries this
        end marker (`EndMarker`)."""
        if not self._open.values:
            return False
        self._seal(timestamp_ms, end)
        return True

    def _seal(self, timestamp_ms: int, end: bytes = b"") -> None:
        current, self._open = self._open, OpenLoadBatch()
        values, keys = current.values, current.keys
        headers = checkpoint_headers(self.load_id, current.last_row, self.routing, end)
        count = len(values)
        batch = LoadBatch(current.first_row, current.last_row, count, current.size, None)
        if self.backend is Backend.CAS:
            builder = BatchBuilder()
            if keys is None:
                if count > 1:  # (fixed-size values: laid out without a step per row)
                    builder.append_runs([0], [timestamp_ms], values[:-1])
                builder.append(timestamp_ms, None, values[-1], headers)
            else:
                builder.append_keyed_values([timestamp_ms] * (count - 1), keys[:-1], values[:-1])
                builder.append(timestamp_ms, keys[-1], values[-1], headers)
            batch.builder = builder
            batch.expected_offset = self.next_offset
            self.next_offset += count
        else:
            batch.checkpoint_value = values.pop()
            batch.checkpoint_key = None if keys is None else keys.pop()
            batch.values, batch.keys, batch.headers = values, keys, headers
            batch.streamed = current.streamed
        self._batches.append(batch)

    def take_sealed(self) -> LoadBatch | None:
        """Transactions: the oldest sealed chunk not yet handed to the shell."""
        for batch in self._batches:
            if batch.state is LoadBatchState.UNSENT:
                batch.state = LoadBatchState.IN_FLIGHT
                return batch
        return None

    def committed(self, batch: LoadBatch) -> None:
        """Transactions: `batch`'s transaction committed (its checkpoint is in the log)."""
        self._acknowledge(batch)

    # -- transactions, streamed: a chunk's rows go to its transaction as they come ---------

    @property
    def streamable(self) -> bool:
        """A chunk is sealed, or the open one has rows `stream_rows` would give."""
        return bool(self._batches) or len(self._open.values) - 1 > self._open.streamed

    def stream_rows(self) -> StreamRows | None:
        """The rows of the oldest uncommitted chunk not handed out yet (None: none now).
        The open batch's last row is held back: it becomes the checkpoint if the batch
        is sealed after it."""
        if self._batches:
            chunk = self._batches[0]
            assert chunk.values is not None
            start, chunk.streamed = chunk.streamed, len(chunk.values)
            return unstreamed(chunk.values, chunk.keys, start, chunk.streamed)
        current = self._open
        start, current.streamed = current.streamed, max(len(current.values) - 1, 0)
        return unstreamed(current.values, current.keys, start, current.streamed)

    def chunk_streamed(self) -> LoadBatch | None:
        """The oldest chunk once sealed with all its rows handed out: the shell sends its
        checkpoint row and commits (then `committed`)."""
        chunk = self._batches[0] if self._batches else None
        if chunk is None or chunk.streamed < len(chunk.values or ()):
            return None
        return chunk

    def restream(self) -> None:
        """The oldest chunk's transaction was aborted: its rows go again, from the first."""
        chunk = self._batches[0] if self._batches else self._open
        chunk.streamed = self.rules.restream_from(chunk.streamed)

    # -- the CAS window --------------------------------------------------------------------

    @property
    def queued(self) -> int:
        """Sealed batches not yet acknowledged (the shell feeds while this is small)."""
        return len(self._batches)

    @property
    def in_flight(self) -> list[LoadBatch]:
        return [b for b in self._batches if b.state is LoadBatchState.IN_FLIGHT]

    @property
    def needs_producer_id(self) -> bool:
        return self.backend is Backend.CAS and self.producer_id < 0

    @property
    def done(self) -> bool:
        """Every sealed batch acknowledged and no row waiting in an open batch."""
        return not self._batches and not self._open.values

    def set_producer(self, producer_id: int, producer_epoch: int) -> None:
        """A new producer id (first, or after the broker forgot ours): the unacknowledged
        batches get sequences from 0 again, in order."""
        if self.in_flight:
            raise RuntimeError(f"{self!r}: a new producer id while batches are in flight")
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self._next_sequence = 0
        for batch in self._batches:
            batch.base_sequence = -1

    def poll_delay(self, now: float) -> float:
        """Seconds until `next_send` may give something (0: now)."""
        if self._rewinding and not self.in_flight:
            return max(self._retry_at - now, 0.0)
        return 0.0

    def metadata_refreshed(self) -> None:
        self.refresh_metadata = False

    def next_send(self, now: float) -> LoadBatch | None:
        """The next batch to send (built for the current producer), or None: the window
        is full, a rewind waits, a producer id is due, or nothing is sealed."""
        if self.error is not None or self.needs_producer_id:
            return None
        if self._rewinding:
            if self.in_flight or now < self._retry_at:
                return None
            self._rewinding = False
        in_flight = 0
        for batch in self._batches:
            if batch.state is LoadBatchState.IN_FLIGHT:
                in_flight += 1
                continue
            if in_flight >= self.max_in_flight:
                return None
            if batch.base_sequence < 0:
                batch.base_sequence = self._next_sequence
                self._next_sequence += batch.count
            built = (self.producer_id, self.producer_epoch, batch.base_sequence)
            if batch._built_for != built:
                assert batch.builder is not None
                batch.data = batch.builder.build(
                    base_offset=self.rules.load_batch_offset(batch.expected_offset),
                    producer_id=self.producer_id,
                    producer_epoch=self.producer_epoch,
                    base_sequence=batch.base_sequence,
                )
                batch._built_for = built
            batch.state = LoadBatchState.IN_FLIGHT
            return batch
        return None

    def oldest_in_flight(self) -> LoadBatch | None:
        """The batch whose answer the shell awaits next (answers are taken in order)."""
        for batch in self._batches:
            if batch.state is LoadBatchState.IN_FLIGHT:
                return batch
        return None

    def on_answer(self, batch: LoadBatch, code: int | None, now: float, message: str = "") -> Step:
        """The answer to `batch`, the oldest in flight: its partition's error code, or None
        when no answer came (the request may have landed)."""
        if batch is not self.oldest_in_flight():
            raise RuntimeError(f"{self!r}: an answer out of order (rows up to {batch.last_row})")
        if self._rewinding:
            batch.state = LoadBatchState.UNSENT  # drained: resent once the window is empty
            return Step.IGNORED
        match self.rules.load_answer(code):
            case Action.ACKNOWLEDGED:
                self._acknowledge(batch)
                return Step.ACKNOWLEDGED
            case Action.RESOLVE_MISMATCH:
                return Step.READ
            case Action.FAIL:
                where = f"{self.topic}-{self.partition}"
                self.error = load_failure(code, message, batch, where, self.batch_bytes)
                return Step.FAIL
            case Action.NEW_PRODUCER_ID:
                self.producer_id = self.producer_epoch = -1
            case Action.REFRESH_AND_RETRY:
                self.refresh_metadata = True
        return self._rewind(batch, code, now, message)

    def read_offset(self, batch: LoadBatch) -> int:
        """After a mismatch: the offset whose record tells whether `batch` landed."""
        return batch.expected_offset + batch.count - 1

    def on_read(self, batch: LoadBatch, row: int | None, log_end_offset: int = -1) -> Step:
        """The checkpoint row of the record at `read_offset(batch)` (None: not a
        checkpoint of this load, or nothing there)."""
        if row == batch.last_row:
            self._acknowledge(batch)  # an earlier attempt landed
            return Step.ACKNOWLEDGED
        where = f" (log end {log_end_offset})" if log_end_offset >= 0 else ""
        self.error = ConcurrentWriteError(
            f"another writer appended at offset {batch.expected_offset} of "
            f"{self.topic}-{self.partition}{where} before load "
            f"{self.load_id.decode(errors='replace')!r} could write rows up to "
            f"{batch.last_row} there; the load stops (run it again to resume after what "
            "is loaded)",
            offset=batch.expected_offset,
        )
        return Step.FAIL

    def _acknowledge(self, batch: LoadBatch) -> None:
        oldest = self._batches.popleft()
        assert oldest is batch, "batches are acknowledged in order"
        batch.state = LoadBatchState.ACKNOWLEDGED
        self.checkpoint = batch.last_row
        self.loaded += batch.count
        self.loaded_bytes += batch.size
        batch.builder = None
        batch.values = batch.keys = None
        batch.data = b""
        self._attempts = 0
        self._stuck_since = None

    def _rewind(self, batch: LoadBatch, code: int | None, now: float, message: str) -> Step:
        if self._stuck_since is None:
            self._stuck_since = now
        what = "no answer" if code is None else str(error_for_code(code, message or None))
        if now - self._stuck_since >= self.retry_timeout:
            self.error = AmbiguousError(
                f"{self.topic}-{self.partition}: could not settle rows up to "
                f"{self._batches[-1].last_row} within {self.retry_timeout} s (last: {what}); "
                "run the load again to resume"
            )
            return Step.FAIL
        batch.state = LoadBatchState.UNSENT
        self._rewinding = True
        self._retry_at = now + self._backoff(self._attempts)
        self._attempts += 1
        return Step.RETRY


__all__ = [
    "DEFAULT_BATCH_BYTES",
    "END_HEADER",
    "LOADER_ROUTING",
    "LOAD_HEADER",
    "PARTITIONER",
    "RECORD_OVERHEAD",
    "ROUTING_HEADER",
    "ROW_HEADER",
    "Backend",
    "CheckpointHeaders",
    "EndMarker",
    "LoadBatch",
    "LoadBatchState",
    "LoadPipeline",
    "LoadRules",
    "OpenLoadBatch",
    "Routing",
    "Row",
    "Step",
    "StreamRows",
    "checkpoint_headers",
    "encode_routing",
    "header_of",
    "load_failure",
    "partition_of",
    "routing_changes",
    "routing_of",
    "row_of",
    "run_size",
    "unrecorded",
    "unstreamed",
]
