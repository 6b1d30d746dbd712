"""The batch: the records bound for one partition, its state changes, its encoding.

Theory of operation: records are appended raw to the open `ProducerBatch` of their
partition: the value to `values` (one list append, and no container object per record:
every object that the garbage collector tracks and that lives as long as the batch makes
its collections slower; an explicit timestamp or headers, with the record's key, go to
the `extras` dict, by index; a key alone goes to the `keys` list, by index, without a
tuple per record). Create times are kept as *runs*: a record's timestamp has millisecond
resolution, and thousands of records are appended within one millisecond, so the batch
notes the index where each new millisecond starts (`run_starts`, `run_ms`) and the clock
reading at which the next one begins (`tick`); an append compares `now` with `tick` and
stamps only when it is reached (`stamp`). The timestamps are exactly those of
`int((now + wall_offset) * 1000)` per record. Encoding waits until the batch is
drained, so the per-record cost of `send()` stays tiny. The accumulator's append paths
(core/_accumulator.py) are the one place that writes a batch's `values`, `room` and
`stamp` from outside: they are the per-record path, where a method call per record shows.

Every other change of a batch is one of its methods, and its `state` moves only by the
table `_MOVES`, applied in one place (`_move`):

| state | event | next state | method (caller) |
| --- | --- | --- | --- |
| QUEUED | DRAINED | IN_FLIGHT | `drained` (the accumulator's drain) |
| IN_FLIGHT | REQUEUED | QUEUED | `requeued` (a retry, in sequence order) |
| QUEUED | REQUEUED | QUEUED | `requeued` (a piece of a split batch, queued at once) |
| QUEUED | FINISHED | DONE | `complete` / `fail` / `fail_ambiguous` (expired, closed, dropped at a bump) |
| IN_FLIGHT | FINISHED | DONE | `complete` / `fail` / `fail_ambiguous` (its answer, or its loss) |

The final state is set exactly once (`complete`, `fail` or `fail_ambiguous` return False
for a batch already done). The sequencer numbers a batch with `sequenced` (first drain)
and `resequenced` (an epoch bump or a sequence reset rewrites it from 0); the core notes
`answered` (the base offset of its answer) and `may_have_been_written`. Every record's
`DeliveryHandle` points at its batch and its index: its offset is the batch's base offset
plus the index, so acknowledging a batch of 1,000 records is one update, and handles
compute their outcome when asked (`DeliveryHandle`, a (batch, index) pair, is here too).

`maybe_written` is the batch's memory of whether any attempt may have reached a log
(a request that left without a definite answer, or NOT_ENOUGH_REPLICAS_AFTER_APPEND).
Once set, a batch can no longer end as `Failed`: a final error makes it `Ambiguous`.

Splitting (MESSAGE_TOO_LARGE, as Java's `ProducerBatch.split`): `split` cuts a batch the
broker refused as too large into *pieces*, new batches over consecutive ranges of its
records that keep its producer id, epoch and creation time and take consecutive
sequences from its base sequence (the refused batch appended nothing, so the range is
free). The handles already given out still point at the split batch: it stays
unfinished until every piece is, then finishes with what they say (`follow`,
`_pieces_done`), and `outcome(index)` asks the piece that holds the record. So one
record too large for the broker fails alone (its piece of one), and its neighbours are
acknowledged.

Encoding: a batch of plain values encodes in one bulk call (`BatchBuilder.append_runs`);
one with some records that carry more goes through `encode_with_extras`: the runs between
the records with a timestamp or headers still go in bulk (keyed or not), and those
records one by one.
"""

from __future__ import annotations

import enum
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from itertools import groupby
from math import inf, nextafter, ulp
from typing import Any, overload

import msgspec

from trio_kafka.core._record import (
    Acknowledged,
    Ambiguous,
    AmbiguousWriteError,
    Failed,
    Headers,
    Outcome,
    Result,
)
from trio_kafka.errors import AmbiguousError, KafkaError
from trio_kafka.records import BatchBuilder


class BatchState(enum.Enum):
    QUEUED = "queued"  # in its partition's queue (new, or waiting to be retried)
    IN_FLIGHT = "in_flight"  # drained into a request that has not been settled
    DONE = "done"  # final: see ProducerBatch.result


class BatchEvent(enum.Enum):
    DRAINED = "drained"  # taken into a request
    REQUEUED = "requeued"  # put back in its queue to be sent again
    FINISHED = "finished"  # its final state was set


#: The batch's state machine (see the module doc): (state, event) -> next state. A pair
#: not in it is a bug in the caller (`_move` raises).
_MOVES: dict[tuple[BatchState, BatchEvent], BatchState] = {
    (BatchState.QUEUED, BatchEvent.DRAINED): BatchState.IN_FLIGHT,
    (BatchState.IN_FLIGHT, BatchEvent.REQUEUED): BatchState.QUEUED,
    (BatchState.QUEUED, BatchEvent.REQUEUED): BatchState.QUEUED,
    (BatchState.QUEUED, BatchEvent.FINISHED): BatchState.DONE,
    (BatchState.IN_FLIGHT, BatchEvent.FINISHED): BatchState.DONE,
}


_ACKNOWLEDGED = Result.ACKNOWLEDGED
_new_tuple = tuple.__new__


def _acknowledged(topic: str, partition: int, offset: int, timestamp: int) -> Acknowledged:
    """`Acknowledged(topic, partition, offset, timestamp)` without the named tuple's
    keyword-handling `__new__` (the per-record path of `await handle`)."""
    return _new_tuple(Acknowledged, (topic, partition, offset, timestamp))


class ProducerBatch:
    """The records bound for one partition and sent in one record batch.

    A plain slots class rather than attrs: its attributes are read and written on the
    per-record path, where every indirection shows.
    """

    __slots__ = (
        "ack_times",
        "attempts",
        "base_offset",
        "base_sequence",
        "builder",
        "capacity",
        "created",
        "error",
        "expected_offset",
        "extras",
        "hooks",
        "is_transactional",
        "keys",
        "last_attempt",
        "last_node",
        "log_append_time",
        "maybe_written",
        "partition",
        "pieces",
        "producer_epoch",
        "producer_id",
        "record_errors",
        "reserved",
        "result",
        "retry_at",
        "room",
        "run_ms",
        "run_starts",
        "sequence_reset",
        "state",
        "tick",
        "topic",
        "values",
        "wall_offset",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        capacity: int,
        now: float,
        wall_offset: float = 0.0,
        expected_offset: int = -1,
    ) -> None:
        self.topic = topic
        self.partition = partition
        # Per record, in offset order: its value.
        self.values: list[bytes | None] = []
        # Create times as runs (module doc): where each millisecond starts, which it is,
        # and the `now` at which the next begins (-inf: the next append stamps).
        self.run_starts: list[int] = []
        self.run_ms: list[int] = []
        self.tick = -inf
        # index -> (timestamp_ms | None, key, headers) for the records that have any.
        self.extras: dict[int, tuple[int | None, bytes | None, Headers | None]] | None = None
        # Keys by index (None: no keyed record), shorter than `values` when later records
        # have none; a record in `extras` has its key there.
        self.keys: list[bytes | None] | None = None
        # Bytes this batch may still take; -1 once sealed (drained: no more appends).
        self.capacity = capacity
        self.room = capacity
        # Buffer bytes held (set when sealed; capacity - room while open).
        self.reserved = 0
        self.created = now
        self.wall_offset = wall_offset
        # CAS: the offset the batch must land at (-1: no expectation).
        self.expected_offset = expected_offset
        self.state = BatchState.QUEUED
        # Sends so far; the time of the last one; the earliest time of the next.
        self.attempts = 0
        self.last_attempt = now
        self.retry_at = now
        # The node of the last attempt (-1: never sent); a retry to a new leader skips
        # its backoff (KIP-951, Java's shouldBackoff).
        self.last_node = -1
        # Idempotence header fields, set by the sequencer when first drained.
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1
        self.is_transactional = False
        self.sequence_reset = False
        self.maybe_written = False
        self.builder: BatchBuilder | None = None
        # Final state, set once.
        self.result: Result | None = None
        self.base_offset = -1
        self.log_append_time = -1
        # Set by `complete` when acknowledged at a known offset and unsplit: every
        # record's timestamp, by index, so that record i's outcome is (topic, partition,
        # base_offset + i, ack_times[i]). Worked out once per batch (list repeats, in C)
        # rather than per awaited record (runs, extras, log append time); None
        # otherwise. What `await handle` reads first.
        self.ack_times: list[int] | None = None
        self.error: KafkaError | None = None
        self.record_errors: dict[int, KafkaError] | None = None
        # Called once with the batch when it completes (callbacks, the driver's wakeups).
        self.hooks: list[Callable[[ProducerBatch], None]] | None = None
        # Set by `follow`: where the records went, (index here, piece, index there) per
        # run of records, in record order (`split`, or a send that waited for metadata).
        self.pieces: list[tuple[int, ProducerBatch, int]] | None = None

    def __repr__(self) -> str:
        return (
            f"<ProducerBatch {self.topic}-{self.partition} records={len(self.values)} "
            f"{self.state.value} seq={self.base_sequence} epoch={self.producer_epoch} "
            f"attempts={self.attempts}>"
        )

    @property
    def record_count(self) -> int:
        return len(self.values)

    @property
    def records(self) -> RecordsView:
        """The records as (timestamp_ms, key, value, headers) tuples, made on demand (for callers off the hot path: interceptors, tests, diagnostics)."""
        return RecordsView(self)

    def record(self, index: int) -> RecordTuple:
        """Record `index` as (timestamp_ms, key, value, headers), explicit or created."""
        extra = self.extras.get(index) if self.extras else None
        value = self.values[index]
        if extra is None:
            keys = self.keys
            key = keys[index] if keys is not None and index < len(keys) else None
            return self.create_time(index), key, value, None
        ts = extra[0]
        return (self.create_time(index) if ts is None else ts), extra[1], value, extra[2]

    def stamp(self, index: int, now: float) -> None:
        """Record `index`, appended at `now` (at or past `tick`), may start a new
        millisecond: note it, and move `tick` to the clock reading where the next one
        starts. `tick` may be a little early (then an append or two re-stamp the same
        millisecond, which changes nothing), never late: every reading below it is in
        this millisecond (`int((t + wall_offset) * 1000)` is monotonic in `t`)."""
        offset = self.wall_offset
        ms = int((now + offset) * 1000)
        run_ms = self.run_ms
        if not run_ms or run_ms[-1] != ms:
            self.run_starts.append(index)
            run_ms.append(ms)
        tick = (ms + 1) / 1000 - offset
        # One step moves `tick + offset` by at least one of its units in the last
        # place: a few of them cover the rounding of the line above.
        step = ulp(abs(tick) + abs(offset))
        while int((nextafter(tick, -inf) + offset) * 1000) > ms:
            tick -= step
        self.tick = tick

    def create_time(self, index: int) -> int:
        """Record `index`'s create time (ms since the epoch)."""
        return self.run_ms[bisect_right(self.run_starts, index) - 1]

    def create_times(self) -> list[int]:
        """Every record's create time, in order."""
        times: list[int] = []
        starts, stops = self.run_starts, [*self.run_starts[1:], len(self.values)]
        for start, stop, ms in zip(starts, stops, self.run_ms):
            times += [ms] * (stop - start)
        return times

    def set_extras(
        self, index: int, timestamp_ms: int | None, key: bytes | None, headers: Headers | None
    ) -> None:
        """Record `index` has a key, an explicit timestamp or headers: a key alone goes
        to `keys` (no tuple per record of a keyed producer), the rest to `extras`."""
        if timestamp_ms is None and not headers:
            keys = self.keys
            if keys is None:
                keys = self.keys = []
            if len(keys) > index:
                keys[index] = key
                return
            if len(keys) < index:
                keys += [None] * (index - len(keys))
            keys.append(key)
            return
        if self.extras is None:
            self.extras = {}
        self.extras[index] = (timestamp_ms, key, headers)

    @property
    def size(self) -> int:
        """Estimated bytes of the records (what the buffer accounting holds)."""
        return self.reserved if self.room < 0 else self.capacity - self.room

    @property
    def last_sequence(self) -> int:
        return self.base_sequence + len(self.values) - 1

    @property
    def done(self) -> bool:
        return self.result is not None

    def seal(self) -> None:
        """No more appends (the batch is being drained)."""
        if self.room >= 0:
            self.reserved = self.capacity - self.room
            self.room = -1

    # -- state changes (the table `_MOVES`, module doc) --------------------------------

    def _move(self, event: BatchEvent) -> None:
        to = _MOVES.get((self.state, event))
        if to is None:
            raise AssertionError(f"{self!r}: no move on {event.value} from {self.state.value}")
        self.state = to

    def drained(self, node: int, now: float) -> None:
        """Taken into a request to `node` at `now` (sealed and numbered already)."""
        self._move(BatchEvent.DRAINED)
        self.attempts += 1
        self.last_attempt = now
        self.last_node = node

    def requeued(self, retry_at: float) -> None:
        """Back in its queue, to be sent again no earlier than `retry_at` (unless its
        partition's leader moved: see the accumulator's `ready`)."""
        self._move(BatchEvent.REQUEUED)
        self.retry_at = retry_at

    def sequenced(
        self, producer_id: int, producer_epoch: int, base_sequence: int, is_transactional: bool
    ) -> None:
        """Numbered for its first send (the sequencer's `assign`); kept on every retry."""
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional

    def resequenced(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        """Renumbered from its partition's sequence 0 (an epoch bump, or a sequence reset
        under the same epoch): `sequence_reset` remembers it for the error rules."""
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.sequence_reset = True

    def answered(self, base_offset: int) -> None:
        """The broker's answer placed the batch at `base_offset` (-1: a duplicate whose
        offset it no longer knows); read by the sequencer before the batch completes."""
        self.base_offset = base_offset

    def may_have_been_written(self) -> None:
        """An attempt may have reached the log (no definite answer came, or the broker
        appended it to fewer replicas than asked): from now on it never ends `Failed`."""
        self.maybe_written = True

    def add_keys(self, start: int, keys: Sequence[bytes | None]) -> None:
        """Keys for records `start`, `start + 1`, ... (appended in one run: no tuple
        per record, and `None` for the unkeyed records before them)."""
        batch_keys = self.keys
        if batch_keys is None:
            batch_keys = self.keys = []
        if len(batch_keys) < start:
            batch_keys.extend([None] * (start - len(batch_keys)))
        batch_keys.extend(keys)

    def encode(
        self,
        compression: int = 0,
        compression_level: int | None = None,
        *,
        cas_broker: bool = True,
    ) -> bytes:
        """The batch's wire bytes with its current producer id, epoch and sequence.

        The records are encoded once (first drain) and the builder is kept, so a retry
        only rewrites the header. The base offset is the expected offset (CAS); without
        one, -1 ("no expectation") to a broker with the CAS extension and 0 to any other:
        Apache Kafka 4.4 refuses a produced batch whose base offset is not 0
        (InvalidRecordException, answered CORRUPT_MESSAGE).
        """
        builder = self.builder
        if builder is None:
            builder = self.builder = BatchBuilder(compression, compression_level)
            extras = self.extras
            if extras is None and self.keys is None:  # no keys, headers or timestamps
                builder.append_runs(self.run_starts, self.run_ms, self.values)
            else:
                encode_with_extras(builder, self.create_times(), self.values, extras, self.keys)
        if self.expected_offset >= 0 or cas_broker:
            base_offset = self.expected_offset
        else:
            base_offset = 0
        return builder.build(
            base_offset=base_offset,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=self.base_sequence,
            is_transactional=self.is_transactional,
        )

    def _timestamps(self) -> list[int]:
        """Every record's timestamp as the broker reports it: the log append time, or
        the explicit or create time."""
        if self.log_append_time >= 0:
            return [self.log_append_time] * len(self.values)
        times = self.create_times()
        if self.extras:
            for index, (timestamp, _, _) in self.extras.items():
                if timestamp is not None:
                    times[index] = timestamp
        return times

    def timestamp_of(self, index: int) -> int:
        if self.log_append_time >= 0:
            return self.log_append_time
        extra = self.extras.get(index) if self.extras else None
        if extra is not None and extra[0] is not None:
            return extra[0]
        return self.create_time(index)

    # -- final states (each returns False if the batch was already done) ------------

    def complete(self, base_offset: int, log_append_time: int = -1) -> bool:
        if self.result is not None:
            return False
        self.result = Result.ACKNOWLEDGED
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        if base_offset >= 0 and self.pieces is None:
            self.ack_times = self._timestamps()
        self._finish()
        return True

    def fail(self, error: KafkaError, record_errors: dict[int, KafkaError] | None = None) -> bool:
        """Final failure; becomes Ambiguous if an earlier attempt may have landed."""
        if self.result is not None:
            return False
        if self.maybe_written and not isinstance(error, AmbiguousError):
            return self.fail_ambiguous(
                AmbiguousWriteError(
                    f"{error} (an earlier attempt of this batch may have been written)", error
                )
            )
        self.result = Result.FAILED
        self.error = error
        self.record_errors = record_errors
        self._finish()
        return True

    def fail_ambiguous(self, error: AmbiguousError) -> bool:
        if self.result is not None:
            return False
        self.result = Result.AMBIGUOUS
        self.error = error
        self._finish()
        return True

    def _finish(self) -> None:
        self._move(BatchEvent.FINISHED)
        self.builder = None
        hooks = self.hooks
        if hooks:
            self.hooks = None
            for hook in hooks:
                hook(self)

    def add_done_hook(self, hook: Callable[[ProducerBatch], None]) -> None:
        """Call `hook(batch)` when the batch completes (now if it already has)."""
        if self.result is not None:
            hook(self)
        elif self.hooks is None:
            self.hooks = [hook]
        else:
            self.hooks.append(hook)

    # -- splitting (MESSAGE_TOO_LARGE) ------------------------------------------------

    def follow(self, pieces: list[tuple[int, ProducerBatch, int]]) -> None:
        """This batch's records now live in other batches: `pieces` says where, as
        (index here of a run's first record, the batch holding the run, its index
        there), in record order. The buffer bytes are theirs now; this batch finishes
        once every batch named has (see the module doc)."""
        self.pieces = pieces
        self.reserved = 0
        self.builder = None
        named = list({id(piece): piece for _, piece, _ in pieces}.values())
        remaining = len(named)

        def piece_done(_piece: ProducerBatch) -> None:
            nonlocal remaining
            remaining -= 1
            if remaining == 0:
                self._pieces_done()

        for piece in named:
            piece.add_done_hook(piece_done)  # (at once for a piece already done)

    def _pieces_done(self) -> None:
        """Every piece is final: so is this batch. Acknowledged when every piece is
        (then `record_errors` names the records of the pieces that were not: their
        `outcome` says how), else the first piece's error that was not a success."""
        pieces = self.pieces
        assert pieces is not None
        errors: dict[int, KafkaError] = {}
        stops = [start for start, _, _ in pieces[1:]]
        stops.append(len(self.values))
        for (start, piece, at), stop in zip(pieces, stops, strict=True):
            if piece.result is Result.ACKNOWLEDGED and not piece.record_errors:
                continue
            # (a piece split again may be acknowledged with some records not)
            for index in range(start, stop):
                outcome = piece.outcome(at + index - start)
                if isinstance(outcome, Failed | Ambiguous):
                    errors[index] = outcome.error
        if not errors:
            self.result = Result.ACKNOWLEDGED
        elif len(errors) == len(self.values):
            first = pieces[0][1].outcome(pieces[0][2])
            assert isinstance(first, Failed | Ambiguous)
            self.result = Result.FAILED if isinstance(first, Failed) else Result.AMBIGUOUS
            self.error = first.error
            self.record_errors = errors
        else:
            # Some records landed, some did not: ACKNOWLEDGED with the others named in
            # `record_errors` (what `succeeded()` and `first_error()` read).
            self.result = Result.ACKNOWLEDGED
            self.error = next(iter(errors.values()))
            self.record_errors = errors
        self._finish()

    def split(self, bounds: Sequence[int], sizes: Sequence[int]) -> list[ProducerBatch]:
        """Cut this batch into pieces at `bounds` (the first record index of each piece
        after the first; `sizes`: each piece's estimated bytes, which it now holds of
        this batch's buffer reservation). Returns the pieces, in record order, sealed
        and numbered from this batch's base sequence; this batch finishes when they all
        have (`follow`, module doc)."""
        starts = [0, *bounds]
        stops = [*bounds, len(self.values)]
        pieces: list[tuple[int, ProducerBatch, int]] = []
        extras = self.extras
        for start, stop, size in zip(starts, stops, sizes, strict=True):
            piece = ProducerBatch(self.topic, self.partition, size, self.created, self.wall_offset)
            piece.values = self.values[start:stop]
            first = bisect_right(self.run_starts, start) - 1
            last = bisect_right(self.run_starts, stop - 1)
            piece.run_starts = [max(0, at - start) for at in self.run_starts[first:last]]
            piece.run_ms = self.run_ms[first:last]
            if self.keys is not None and start < len(self.keys):
                piece.keys = self.keys[start:stop]
            if extras:
                for index in range(start, stop):
                    extra = extras.get(index)
                    if extra is not None:
                        piece.set_extras(index - start, *extra)
            piece.room = -1  # sealed: nothing more is appended to a piece
            piece.reserved = size
            piece.attempts = self.attempts
            piece.producer_id = self.producer_id
            piece.producer_epoch = self.producer_epoch
            piece.is_transactional = self.is_transactional
            piece.sequence_reset = self.sequence_reset
            if self.base_sequence >= 0:
                piece.base_sequence = self.base_sequence + start
            pieces.append((start, piece, 0))
        self.follow(pieces)
        return [piece for _, piece, _ in pieces]

    def located(self, index: int) -> tuple[ProducerBatch, int]:
        """Where record `index` is now: the batch (and its index there) that holds it
        after splits and placements, or this batch."""
        batch = self
        while batch.pieces is not None:
            batch, index = batch._piece_of(index)
        return batch, index

    def _piece_of(self, index: int) -> tuple[ProducerBatch, int]:
        assert self.pieces is not None
        if not 0 <= index < len(self.values):
            raise IndexError(index)
        start, piece, at = self.pieces[bisect_right(self.pieces, index, key=_start) - 1]
        return piece, at + index - start

    def outcome(self, index: int) -> Outcome | None:
        times = self.ack_times
        if times is not None:  # (see __init__)
            return _new_tuple(
                Acknowledged, (self.topic, self.partition, self.base_offset + index, times[index])
            )
        result = self.result
        if result is _ACKNOWLEDGED and self.pieces is None:
            # The common case, once per awaited record: a module constant rather than a
            # match on the enum, and the Acknowledged built without attrs' frozen
            # __init__ (together about half the cost of `await handle`).
            base = self.base_offset
            return _acknowledged(
                self.topic,
                self.partition,
                base + index if base >= 0 else -1,
                self.timestamp_of(index),
            )
        if self.pieces is not None and result is not None:
            piece, at = self._piece_of(index)  # a split batch: ask the piece
            return piece.outcome(at)
        match result:
            case None:
                return None
            case Result.FAILED:
                errors = self.record_errors
                error = errors.get(index, self.error) if errors else self.error
                assert error is not None
                return Failed(self.topic, self.partition, error)
            case _:  # Result.AMBIGUOUS (ACKNOWLEDGED returned above)
                assert isinstance(self.error, AmbiguousError)
                return Ambiguous(self.topic, self.partition, self.error)


class DeliveryHandle(msgspec.Struct, frozen=True, gc=False):
    """One record's delivery: its batch and its index in it.

    `done()`, `outcome`, `result()` and `add_done_callback(fn)`; the trio driver adds
    `await` on top through `batch.add_done_hook`.

    Immutable, and equal to another handle of the same record (same batch, same index).

    A msgspec struct with `gc=False`, so that the cyclic garbage collector does not track
    it: the README's loop keeps a handle per record until it awaits them all, and every
    instance of a Python class is tracked (CPython 3.11-3.13), so 300,000 kept handles
    made each full collection ~4x longer and cost ~0.4-0.6 us a record in collections
    (docs/benchmarks.md, session 26); an untracked handle costs the collector nothing,
    and its C constructor ~40 ns against ~115 ns for a `__slots__` class. The price of
    `gc=False`: a reference cycle through a handle is never collected. The handle
    refers to its batch (and an int) only, the batch never refers to a handle, and
    `add_done_callback` gives its callback an equal handle rather than keeping this one
    in the batch's hooks, so the library makes no such cycle.
    """

    batch: ProducerBatch
    index: int

    def __repr__(self) -> str:
        batch, index = self.batch.located(self.index)
        if batch.partition < 0:  # kept until its topic's metadata comes
            where = f"{batch.topic}#{index} (waiting for the topic's metadata)"
        else:
            where = f"{batch.topic}-{batch.partition}#{index}"
        outcome = self.outcome
        if outcome is None:
            state = "pending"
        elif isinstance(outcome, Acknowledged):
            state = f"acknowledged offset={outcome.offset}"
        else:
            kind = "failed" if isinstance(outcome, Failed) else "ambiguous"
            state = f"{kind} {type(outcome.error).__name__}: {outcome.error}"
        return f"<{type(self).__name__} {where} {state}>"

    def done(self) -> bool:
        return self.batch.result is not None

    @property
    def outcome(self) -> Outcome | None:
        """The typed outcome, or None while the record is not settled."""
        return self.batch.outcome(self.index)

    def result(self) -> Acknowledged:
        """The acknowledgement; raises the error if the record failed or is ambiguous,
        and `RuntimeError` if it is not settled yet."""
        outcome = self.batch.outcome(self.index)
        match outcome:
            case None:
                raise RuntimeError("the record's delivery is not settled yet")
            case Acknowledged():
                return outcome
            case Failed(error=error) | Ambiguous(error=error):
                raise error

    def add_done_callback(self, fn: Callable[[DeliveryHandle], Any]) -> None:
        """Call `fn(handle)` once the record is settled (at once if it already is);
        `handle` is equal to this one (`==`), not necessarily the same object."""
        batch, index, cls = self.batch, self.index, self.__class__
        # Not `lambda _b: fn(self)`: the batch's hooks would hold this handle, which
        # holds the batch: a cycle through an untracked object (see the class doc).
        batch.add_done_hook(lambda _batch: fn(cls(batch, index)))


RecordTuple = tuple[int, bytes | None, bytes | None, Headers | None]


def _start(piece: tuple[int, ProducerBatch, int]) -> int:
    return piece[0]


class RecordsView(Sequence[RecordTuple]):
    """A batch's records as tuples, built when read (see `ProducerBatch.records`)."""

    __slots__ = ("_batch",)

    def __init__(self, batch: ProducerBatch) -> None:
        self._batch = batch

    def __len__(self) -> int:
        return len(self._batch.values)

    @overload
    def __getitem__(self, index: int) -> RecordTuple: ...
    @overload
    def __getitem__(self, index: slice) -> list[RecordTuple]: ...
    def __getitem__(self, index: int | slice) -> RecordTuple | list[RecordTuple]:
        if isinstance(index, slice):
            return [self._batch.record(i) for i in range(len(self))[index]]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("record index out of range")
        return self._batch.record(index)

    def __iter__(self) -> Iterator[RecordTuple]:
        record = self._batch.record
        return (record(i) for i in range(len(self)))


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
