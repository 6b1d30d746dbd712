"""The load pipeline of one partition: ordered, resumable, exactly-once writes (sans-IO).

Theory of operation
-------------------
A load writes a fixed, ordered subsequence of input rows into one partition
(producer/_rows.py says which rows and how a checkpoint names them). `LoadPipeline`
decides everything about that write and does no I/O: the shell (client/_bulk.py) feeds
it rows, sends what it is told, and feeds back the answers, with `now` passed in.

Resume. The shell reads the partition first (`resume point`: the log end offset and the
last checkpoint row of this load found there) and builds the pipeline with it: rows up
to that row are skipped (`skip(row)`), the rest are appended after the log end.

Batches (`add`, `add_run`, `finish`). Rows go into the open batch until the next one
would push it past `batch_bytes`; the batch is then sealed (its last row carries the
checkpoint headers) and queued. `add_run` takes a whole run of a partition's rows at
once (row numbers, values, keys as lists): a run that fits the open batch is sized by
one sum; otherwise the cut is found from the run's cumulative sizes by bisection. The
rows move as list slices: a load's per-row work is C work, not a Python call per row.
A batch is written whole or not at all, and its checkpoint covers every row in it.

Backends. `Backend.CAS`: each batch is one Produce request of one idempotent record
batch whose base offset is the *expected offset*, the log end the batch must start at
(batch k expects where batch k-1 ends). `Backend.TRANSACTIONS`: each batch is a chunk
the shell writes in one transaction (its rows and its checkpoint commit together);
there the pipeline only cuts chunks, counts and checkpoints (`committed(batch)`), and
the transactional producer does sequencing and retries. A chunk is either taken whole
once sealed (`take_sealed`) or streamed: `stream_rows` gives the oldest chunk's rows
as they come, holding the open batch's last row back (it becomes the checkpoint if the
batch is sealed after it), `chunk_streamed` says when the sealed chunk's rows are all
out (send its checkpoint row, commit), `restream` starts it over after an abort.

The CAS window (`next_send`, `on_answer`). Up to `max_in_flight` (5, the broker's dedup
window) batches are in flight; answers are taken in order, oldest first, and classified
by producer/_core.py (`classify`):

- acknowledged (NONE, DUPLICATE_SEQUENCE_NUMBER): the batch is done; the checkpoint
  advances to its last row;
- no answer (lost connection, timeout) or a retriable code: *rewind*. The answers of the
  rest of the window are drained and ignored, and after a backoff every unacknowledged
  batch is resent in order, the same bytes at the same expected offset with the same
  sequence: the broker deduplicates what landed (NONE or DUPLICATE with the original
  offset) and CAS refuses anything else that would land twice;
- UNKNOWN_PRODUCER_ID / OUT_OF_ORDER_SEQUENCE_NUMBER: rewind under a new producer id
  (`needs_producer_id`; the shell calls `set_producer`), sequences from 0 again; CAS
  still stops a duplicate: a resent batch that had landed meets a mismatch;
- EXPECTED_OFFSET_MISMATCH: nothing of this attempt was written. `Step.READ`: the shell
  reads the record at `read_offset(batch)` (the batch's last expected offset) and calls
  `on_read(batch, row)` with its checkpoint row (None: not ours). Our row: an earlier
  attempt landed (the broker lost our producer state), acknowledged. Otherwise another
  writer took the offset: `Step.FAIL` with `ConcurrentWriteError`, and the load stops.
  The batches behind it cannot land: their sequences follow one the broker never took;
- anything else: `Step.FAIL` with the broker's error (MESSAGE_TOO_LARGE names the rows).

A batch without progress for `retry_timeout` seconds fails the load with an
`AmbiguousError` (a rerun resumes after what landed). Delays: the injected `backoff`.

State owned here: the queue of sealed unacknowledged batches in order (`_batches`),
the open batch, the next expected offset and sequence, the producer id, the rewind
(`_rewinding`, `_retry_at`, `_attempts`, `_stuck_since`), and `checkpoint`.
"""

from __future__ import annotations

import collections
from bisect import bisect_right
from collections.abc import Callable, Sequence

from trio_kafka.errors import (
    AmbiguousError,
    ConcurrentWriteError,
    ConfigError,
    KafkaError,
    error_for_code,
)
from trio_kafka.producer._accumulator import record_sizes
from trio_kafka.producer._core import Action
from trio_kafka.producer._load_batch import (
    DEFAULT_BATCH_BYTES,
    Backend,
    BatchState,
    CheckpointHeaders,
    LoadBatch,
    OpenLoadBatch,
    Step,
    StreamRows,
    load_failure,
    run_size,
    unstreamed,
)
from trio_kafka.producer._load_rules import LoadRules
from trio_kafka.producer._rows import RECORD_OVERHEAD, checkpoint_headers
from trio_kafka.producer._rule_context import rules_for
from trio_kafka.records import BatchBuilder


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
        #: The decisions where a wrong rule loses or duplicates rows (producer/_rules.py).
        self.rules = rules_for(LoadRules) if rules is None else rules
        if not 1 <= max_in_flight <= 5:
            raise ConfigError(
                f"max_in_flight={max_in_flight}: use 1 to 5 (the broker's dedup window)"
            )
        if batch_bytes < 1:
            raise ConfigError(f"batch_bytes={batch_bytes}: a batch needs at least one byte")
        self.topic = topic
        self.partition = partition
        self.load_id = load_id
        #: The load's routing, recorded with every checkpoint (producer/_rows.py).
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
        in_flight = sum(1 for b in self._batches if b.state is BatchState.IN_FLIGHT)
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
        end marker (producer/_rows.py `EndMarker`)."""
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
            if batch.state is BatchState.UNSENT:
                batch.state = BatchState.IN_FLIGHT
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
        return [b for b in self._batches if b.state is BatchState.IN_FLIGHT]

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
            if batch.state is BatchState.IN_FLIGHT:
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
            batch.state = BatchState.IN_FLIGHT
            return batch
        return None

    def oldest_in_flight(self) -> LoadBatch | None:
        """The batch whose answer the shell awaits next (answers are taken in order)."""
        for batch in self._batches:
            if batch.state is BatchState.IN_FLIGHT:
                return batch
        return None

    def on_answer(self, batch: LoadBatch, code: int | None, now: float, message: str = "") -> Step:
        """The answer to `batch`, the oldest in flight: its partition's error code, or None
        when no answer came (the request may have landed)."""
        if batch is not self.oldest_in_flight():
            raise RuntimeError(f"{self!r}: an answer out of order (rows up to {batch.last_row})")
        if self._rewinding:
            batch.state = BatchState.UNSENT  # drained: resent once the window is empty
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
        batch.state = BatchState.ACKNOWLEDGED
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
        batch.state = BatchState.UNSENT
        self._rewinding = True
        self._retry_at = now + self._backoff(self._attempts)
        self._attempts += 1
        return Step.RETRY


__all__ = [  # (the values are re-exported: their home is producer/_load_batch.py)
    "DEFAULT_BATCH_BYTES",
    "Backend",
    "CheckpointHeaders",
    "LoadBatch",
    "LoadPipeline",
    "LoadRules",
    "Step",
]
