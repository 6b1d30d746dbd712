"""The load pipeline (core/_load.py) stepped by hand, with `now` passed in."""

from __future__ import annotations

import random

import pytest

from trio_kafka.core._core import Action, classify
from trio_kafka.core._load import (
    RECORD_OVERHEAD,
    Backend,
    LoadBatchState,
    LoadPipeline,
    Step,
    row_of,
)
from trio_kafka.errors import AmbiguousError, ConcurrentWriteError, ErrorCode
from trio_kafka.records import decode_batches

ROW = 100  # bytes of each value
PER_BATCH = 4  # rows per batch with the batch_bytes below


def pipeline(**options: object) -> LoadPipeline:
    defaults: dict[str, object] = {
        "backend": Backend.CAS,
        "log_end_offset": 10,
        "batch_bytes": PER_BATCH * (ROW + RECORD_OVERHEAD),
        "backoff": lambda attempts: 1.0,
        "retry_timeout": 30.0,
    }
    defaults.update(options)
    return LoadPipeline("t", 0, b"L", **defaults)  # type: ignore[arg-type]


def feed(pipe: LoadPipeline, rows: range) -> None:
    for row in rows:
        if not pipe.skip(row):
            pipe.add(row, None, b"%0100d" % row, 0)
    pipe.finish(0)


def sent_rows(pipe: LoadPipeline, now: float = 0.0) -> list[tuple[int, int, int]]:
    """(first row, expected offset, base sequence) of each batch next_send gives now."""
    out = []
    while (batch := pipe.next_send(now)) is not None:
        out.append((batch.first_row, batch.expected_offset, batch.base_sequence))
    return out


def test_batches_are_cut_by_bytes_and_expect_contiguous_offsets() -> None:
    pipe = pipeline()
    feed(pipe, range(10))
    pipe.set_producer(7, 0)
    assert sent_rows(pipe) == [(0, 10, 0), (4, 14, 4), (8, 18, 8)]
    batch = pipe.oldest_in_flight()
    assert batch is not None
    (decoded,) = decode_batches(batch.data)
    assert (decoded.base_offset, decoded.producer_id, len(decoded.records)) == (10, 7, 4)
    assert row_of(decoded.records[-1], b"L") == 3  # the checkpoint closes the batch
    assert all(row_of(r, b"L") is None for r in decoded.records[:-1])


def test_at_most_five_batches_are_in_flight_and_answers_open_the_window() -> None:
    pipe = pipeline()
    feed(pipe, range(4 * 8))
    assert pipe.next_send(0.0) is None  # no producer id yet
    pipe.set_producer(1, 0)
    assert [first for first, _, _ in sent_rows(pipe)] == [0, 4, 8, 12, 16]
    oldest = pipe.oldest_in_flight()
    assert oldest is not None
    assert pipe.on_answer(oldest, ErrorCode.NONE, 0.0) is Step.ACKNOWLEDGED
    assert pipe.checkpoint == 3
    assert [first for first, _, _ in sent_rows(pipe)] == [20]


def test_a_lost_answer_resends_the_same_batches_at_the_same_offsets() -> None:
    pipe = pipeline()
    feed(pipe, range(12))
    pipe.set_producer(1, 0)
    first = sent_rows(pipe)
    batches = pipe.in_flight
    data = [b.data for b in batches]
    assert pipe.on_answer(batches[0], None, 5.0) is Step.RETRY
    # The rest of the window is drained (its answers ignored) before anything is resent.
    assert pipe.next_send(10.0) is None
    assert pipe.on_answer(batches[1], ErrorCode.NONE, 5.0) is Step.IGNORED
    assert pipe.on_answer(batches[2], None, 5.0) is Step.IGNORED
    assert pipe.poll_delay(5.5) == pytest.approx(0.5)  # the backoff
    assert pipe.next_send(5.5) is None
    assert sent_rows(pipe, 6.0) == first
    assert [b.data for b in pipe.in_flight] == data  # the same bytes: dedup or CAS
    for batch in pipe.in_flight:
        assert pipe.on_answer(batch, ErrorCode.DUPLICATE_SEQUENCE_NUMBER, 6.0) is Step.ACKNOWLEDGED
    assert pipe.done and pipe.checkpoint == 11 and pipe.loaded == 12


def test_a_forgotten_producer_resequences_from_zero_under_a_new_id() -> None:
    pipe = pipeline()
    feed(pipe, range(8))
    pipe.set_producer(1, 0)
    sent_rows(pipe)
    first, second = pipe.in_flight
    assert pipe.on_answer(first, ErrorCode.UNKNOWN_PRODUCER_ID, 0.0) is Step.RETRY
    assert pipe.on_answer(second, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, 0.0) is Step.IGNORED
    assert pipe.needs_producer_id and pipe.next_send(5.0) is None
    pipe.set_producer(2, 0)
    assert sent_rows(pipe, 5.0) == [(0, 10, 0), (4, 14, 4)]
    assert next(decode_batches(pipe.in_flight[0].data)).producer_id == 2


def test_a_mismatch_whose_record_is_ours_is_acknowledged() -> None:
    pipe = pipeline()
    feed(pipe, range(4))
    pipe.set_producer(1, 0)
    (batch,) = (pipe.next_send(0.0),)
    assert batch is not None
    assert pipe.on_answer(batch, ErrorCode.EXPECTED_OFFSET_MISMATCH, 0.0) is Step.READ
    assert pipe.read_offset(batch) == 13  # the batch's last expected offset
    assert pipe.on_read(batch, 3) is Step.ACKNOWLEDGED
    assert pipe.done and pipe.checkpoint == 3


def test_a_mismatch_with_another_writers_record_stops_the_load() -> None:
    pipe = pipeline()
    feed(pipe, range(4))
    pipe.set_producer(1, 0)
    batch = pipe.next_send(0.0)
    assert batch is not None
    assert pipe.on_answer(batch, ErrorCode.EXPECTED_OFFSET_MISMATCH, 0.0) is Step.READ
    assert pipe.on_read(batch, None, 42) is Step.FAIL
    assert isinstance(pipe.error, ConcurrentWriteError)
    assert pipe.error.offset == 10
    assert "log end 42" in str(pipe.error)
    assert pipe.checkpoint == -1 and pipe.next_send(1.0) is None


def test_a_resumed_pipeline_skips_rows_up_to_its_checkpoint() -> None:
    pipe = pipeline(log_end_offset=50, resumed_after_row=5)
    feed(pipe, range(10))
    assert pipe.skipped == 6
    pipe.set_producer(1, 0)
    assert sent_rows(pipe) == [(6, 50, 0)]
    assert pipe.in_flight[0].count == 4


def test_a_resumed_cas_load_refuses_to_append_after_a_foreign_record() -> None:
    pipe = pipeline(resumed_after_row=3, foreign_after=True)
    assert pipe.skip(2)
    with pytest.raises(ConcurrentWriteError, match="other writers"):
        pipe.add(4, None, b"x", 0)


def test_no_progress_for_the_retry_timeout_fails_ambiguous() -> None:
    pipe = pipeline(retry_timeout=10.0)
    feed(pipe, range(4))
    pipe.set_producer(1, 0)
    batch = pipe.next_send(0.0)
    assert batch is not None
    assert pipe.on_answer(batch, ErrorCode.NOT_LEADER_OR_FOLLOWER, 0.0) is Step.RETRY
    assert pipe.refresh_metadata
    batch = pipe.next_send(5.0)
    assert batch is not None and batch.state is LoadBatchState.IN_FLIGHT
    assert pipe.on_answer(batch, ErrorCode.REQUEST_TIMED_OUT, 10.0) is Step.FAIL
    assert isinstance(pipe.error, AmbiguousError)


def test_a_definite_error_fails_the_load_with_the_brokers_error() -> None:
    pipe = pipeline()
    feed(pipe, range(4))
    pipe.set_producer(1, 0)
    batch = pipe.next_send(0.0)
    assert batch is not None
    assert pipe.on_answer(batch, ErrorCode.MESSAGE_TOO_LARGE, 0.0, "too big") is Step.FAIL
    assert "too big" in str(pipe.error)


def test_transaction_chunks_carry_their_checkpoint_on_the_last_row() -> None:
    pipe = pipeline(backend=Backend.TRANSACTIONS, resumed_after_row=1)
    feed(pipe, range(11))
    chunk = pipe.take_sealed()
    assert chunk is not None and chunk.values is not None
    assert (chunk.first_row, chunk.last_row, chunk.count, chunk.keys) == (2, 5, 4, None)
    assert chunk.values == [b"%0100d" % row for row in range(2, 5)]
    assert chunk.checkpoint_value == b"%0100d" % 5
    assert chunk.headers == (("tk.load", b"L"), ("tk.row", b"5"))
    pipe.committed(chunk)
    assert pipe.checkpoint == 5 and pipe.loaded == 4


def test_error_codes_map_to_one_action_each() -> None:
    assert classify(None) is Action.RETRY
    assert classify(ErrorCode.NONE) is Action.ACKNOWLEDGED
    assert classify(ErrorCode.DUPLICATE_SEQUENCE_NUMBER) is Action.ACKNOWLEDGED
    assert classify(ErrorCode.EXPECTED_OFFSET_MISMATCH) is Action.RESOLVE_MISMATCH
    assert classify(ErrorCode.UNKNOWN_PRODUCER_ID) is Action.NEW_PRODUCER_ID
    assert classify(ErrorCode.NOT_LEADER_OR_FOLLOWER) is Action.REFRESH_AND_RETRY
    assert classify(ErrorCode.REQUEST_TIMED_OUT) is Action.RETRY
    assert classify(ErrorCode.MESSAGE_TOO_LARGE) is Action.FAIL


def batches_of(pipe: LoadPipeline) -> list[tuple[int, int, int]]:
    out = []
    while (batch := pipe.take_sealed()) is not None:
        out.append((batch.first_row, batch.last_row, batch.count))
    return out


def test_a_run_is_cut_exactly_as_row_by_row_adds() -> None:
    sizes = [(row * 37) % 300 for row in range(200)]  # uneven rows, some over a batch
    values = [b"x" * size for size in sizes]
    keys = [b"k%d" % row if row % 3 else None for row in range(200)]
    by_row = pipeline(backend=Backend.TRANSACTIONS, resumed_after_row=4)
    for row in range(200):
        if not by_row.skip(row):
            by_row.add(row, keys[row], values[row], 0)
    by_row.finish(0)
    by_run = pipeline(backend=Backend.TRANSACTIONS, resumed_after_row=4)
    for start in range(0, 200, 45):  # runs that end mid-batch
        by_run.add_run(
            range(start, min(start + 45, 200)),
            keys[start : start + 45],
            values[start : start + 45],
            0,
        )
    by_run.finish(0)
    assert (by_run.skipped, by_row.skipped) == (5, 5)
    assert batches_of(by_run) == batches_of(by_row)


def test_a_run_counts_the_batches_it_sealed_and_keeps_keys_and_values_in_order() -> None:
    pipe = pipeline(backend=Backend.TRANSACTIONS, batch_bytes=4 * (ROW + 1 + RECORD_OVERHEAD))
    values = [b"%0100d" % row for row in range(10)]
    keys = [None, b"a", None, None, b"b", None, None, None, None, b"c"]
    assert pipe.add_run(range(0, 30, 3), keys, values, 0) == 2  # two full, one open
    assert pipe.finish(0)
    chunks = []
    while (chunk := pipe.take_sealed()) is not None:
        chunks.append(chunk)
    assert [(c.first_row, c.last_row) for c in chunks] == [(0, 9), (12, 21), (24, 27)]
    assert [v for c in chunks for v in [*(c.values or []), c.checkpoint_value]] == values
    assert [[*(c.keys or []), c.checkpoint_key] for c in chunks] == [
        keys[0:4],
        keys[4:8],
        keys[8:10],
    ]
    assert chunks[2].headers == (("tk.load", b"L"), ("tk.row", b"27"))


def test_a_cas_batch_from_a_run_encodes_its_keys_and_checkpoint() -> None:
    pipe = pipeline()
    pipe.add_run([0, 5, 7], [b"a", None, b"c"], [b"x", b"y", None], 0)
    pipe.finish(0)
    pipe.set_producer(3, 0)
    batch = pipe.next_send(0.0)
    assert batch is not None
    (decoded,) = decode_batches(batch.data)
    assert [(r.key, r.value) for r in decoded.records] == [(b"a", b"x"), (None, b"y"), (b"c", None)]
    assert row_of(decoded.records[-1], b"L") == 7 and decoded.base_offset == 10


def test_a_run_skips_its_rows_up_to_the_resume_checkpoint() -> None:
    pipe = pipeline(backend=Backend.TRANSACTIONS, resumed_after_row=8)
    assert pipe.add_run(range(0, 12, 2), None, [b"v"] * 6, 0) == 0
    assert pipe.skipped == 5  # rows 0, 2, 4, 6, 8
    pipe.finish(0)
    assert batches_of(pipe) == [(10, 10, 1)]


def test_a_run_with_mismatched_lengths_is_refused() -> None:
    pipe = pipeline()
    with pytest.raises(ValueError, match="3 rows, 2 values"):
        pipe.add_run([1, 2, 3], None, [b"a", b"b"], 0)


@pytest.mark.parametrize("sizes", [[100] * 7, [100, 3, 0, 250, 100, 1, 100], [5]])
def test_a_cas_batch_of_unkeyed_rows_encodes_every_value_and_the_checkpoint(
    sizes: list[int],
) -> None:
    pipe = pipeline(batch_bytes=10_000)
    values: list[bytes | None] = [b"%d" % i * size for i, size in enumerate(sizes)]
    if len(values) > 2:
        values[2] = None
    pipe.add_run(range(len(values)), None, values, 1_700_000_000_000)
    pipe.finish(1_700_000_000_000)
    pipe.set_producer(3, 0)
    batch = pipe.next_send(0.0)
    assert batch is not None
    (decoded,) = decode_batches(batch.data)
    assert [r.value for r in decoded.records] == values
    assert {r.timestamp for r in decoded.records} == {1_700_000_000_000}
    assert row_of(decoded.records[-1], b"L") == len(values) - 1
    assert all(row_of(r, b"L") is None for r in decoded.records[:-1])


def chunk_contents(pipe: LoadPipeline) -> list[tuple[int, int, int, list[object], list[object]]]:
    out = []
    while (chunk := pipe.take_sealed()) is not None:
        keys = [*(chunk.keys or [None] * len(chunk.values or [])), chunk.checkpoint_key]
        values = [*(chunk.values or []), chunk.checkpoint_value]
        out.append((chunk.first_row, chunk.last_row, chunk.size, keys, values))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_runs_that_fit_a_chunk_whole_are_cut_as_row_by_row_adds(seed: int) -> None:
    # Chunks of several runs (add_run's sum fast path), runs that cross a cut, None
    # values and keys, uneven sizes, so the guess of whether a run fits is wrong both
    # ways: the chunks, their sizes and their rows are those of adding row by row.
    rng = random.Random(seed)
    count = 400
    values = [
        None if rng.random() < 0.1 else b"v" * rng.choice((0, 5, 100, 700)) for _ in range(count)
    ]
    keys = [None if rng.random() < 0.5 else b"k" * rng.randrange(20) for _ in range(count)]
    runs = []
    start = 0
    while start < count:
        stop = min(count, start + rng.randrange(1, 60))
        keyed = rng.random() < 0.7
        if not keyed:
            keys[start:stop] = [None] * (stop - start)
        runs.append((start, stop, keyed))
        start = stop
    batch_bytes = rng.choice((300, 2_000, 9_000))
    by_run = pipeline(backend=Backend.TRANSACTIONS, batch_bytes=batch_bytes)
    for start, stop, keyed in runs:
        run_keys = keys[start:stop] if keyed else None
        by_run.add_run(range(start, stop), run_keys, values[start:stop], 0)
    by_run.finish(0)
    by_row = pipeline(backend=Backend.TRANSACTIONS, batch_bytes=batch_bytes)
    for row in range(count):
        by_row.add(row, keys[row], values[row], 0)
    by_row.finish(0)
    assert chunk_contents(by_run) == chunk_contents(by_row)


def test_a_streamed_chunk_hands_out_its_rows_as_they_come_holding_the_last_back() -> None:
    pipe = pipeline(backend=Backend.TRANSACTIONS, batch_bytes=6 * (ROW + RECORD_OVERHEAD))
    values = [b"%0100d" % row for row in range(10)]
    assert not pipe.streamable
    pipe.add_run(range(0, 3), None, values[0:3], 0)
    assert pipe.stream_rows() == (values[0:2], None)  # row 2 may become the checkpoint
    assert pipe.stream_rows() is None and pipe.chunk_streamed() is None
    assert pipe.add_run(range(3, 8), None, values[3:8], 0) == 1  # rows 0-5 sealed
    assert pipe.stream_rows() == (values[2:5], None)
    chunk = pipe.chunk_streamed()
    assert chunk is not None and (chunk.first_row, chunk.last_row) == (0, 5)
    assert chunk.checkpoint_value == values[5]
    assert chunk.headers == (("tk.load", b"L"), ("tk.row", b"5"))
    pipe.committed(chunk)
    assert pipe.checkpoint == 5 and pipe.loaded == 6
    assert pipe.stream_rows() == ([values[6]], None)  # the next chunk, from its first row


def test_an_aborted_chunk_is_streamed_again_from_its_first_row() -> None:
    pipe = pipeline(backend=Backend.TRANSACTIONS, batch_bytes=6 * (ROW + 2 + RECORD_OVERHEAD))
    values = [b"%0100d" % row for row in range(8)]
    keys = [b"k%d" % row for row in range(8)]
    pipe.add_run(range(0, 4), keys[0:4], values[0:4], 0)
    assert pipe.stream_rows() == (values[0:3], keys[0:3])
    pipe.restream()  # aborted while the chunk was still open
    assert pipe.stream_rows() == (values[0:3], keys[0:3])
    pipe.add_run(range(4, 8), keys[4:8], values[4:8], 0)  # seals rows 0-5
    assert pipe.stream_rows() == (values[3:5], keys[3:5])
    assert pipe.chunk_streamed() is not None
    pipe.restream()  # aborted once sealed: the whole chunk again, no copy
    rows = pipe.stream_rows()
    assert rows is not None and rows == (values[0:5], keys[0:5])
    chunk = pipe.chunk_streamed()
    assert chunk is not None and rows[0] is chunk.values
    assert (chunk.checkpoint_value, chunk.checkpoint_key) == (values[5], keys[5])


def test_finish_seals_an_open_streamed_chunk_at_its_held_back_row() -> None:
    pipe = pipeline(backend=Backend.TRANSACTIONS, batch_bytes=100 * (ROW + RECORD_OVERHEAD))
    values = [b"%0100d" % row for row in range(3)]
    pipe.add_run(range(0, 3), None, values, 0)
    assert pipe.stream_rows() == (values[0:2], None)
    assert pipe.finish(0)  # (the input ended, or the transaction is old)
    assert pipe.stream_rows() is None
    chunk = pipe.chunk_streamed()
    assert chunk is not None and (chunk.last_row, chunk.checkpoint_value) == (2, values[2])


def test_every_checkpoint_records_the_routing_and_the_last_the_end_of_the_input() -> None:
    pipe = pipeline(routing=b'{"partitions":1}')
    for row in range(10):
        pipe.add(row, None, b"%0100d" % row, 0)
    pipe.finish(0, b"10/1/10")
    pipe.set_producer(7, 0)
    checkpoints = []
    while (batch := pipe.next_send(0.0)) is not None:
        (decoded,) = decode_batches(batch.data)
        checkpoints.append(dict(decoded.records[-1].headers))
    assert [c.get("tk.routing") for c in checkpoints] == [b'{"partitions":1}'] * 3
    assert [c.get("tk.end") for c in checkpoints] == [None, None, b"10/1/10"]
