"""`select_records`: which records of a Fetch answer a reader sees, on hand-built batches."""

from __future__ import annotations

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_kafka.client._reader import select_records
from trio_kafka.records import (
    BatchBuilder,
    ControlType,
    RecordBatch,
    build_control_batch,
    decode_batches,
)


def data(base: int, values: list[bytes], *, pid: int = -1, transactional: bool = False) -> bytes:
    builder = BatchBuilder()
    for value in values:
        builder.append(1000, None, value, [("h", b"x")])
    return builder.build(
        base_offset=base,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=0 if pid >= 0 else -1,
        is_transactional=transactional,
    )


def marker(base: int, control: ControlType, pid: int) -> bytes:
    return build_control_batch(
        control, producer_id=pid, producer_epoch=0, base_offset=base, timestamp_ms=1000
    )


def batches(*parts: bytes) -> list[RecordBatch]:
    return list(decode_batches(b"".join(parts)))


def offsets_and_values(records: list[object]) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for r in records]  # type: ignore[attr-defined]


def test_records_before_start_in_the_first_batch_are_dropped() -> None:
    log = batches(data(0, [b"a", b"b", b"c"]), data(3, [b"d"]))
    records, position = select_records(log, start=2)
    assert offsets_and_values(records) == [(2, b"c"), (3, b"d")]
    assert position == 4


def test_records_at_or_after_end_are_dropped_but_the_position_passes_the_batch() -> None:
    log = batches(data(0, [b"a", b"b", b"c"]))
    records, position = select_records(log, start=0, end=2)
    assert offsets_and_values(records) == [(0, b"a"), (1, b"b")]
    assert position == 3


def test_headers_keys_and_timestamps_come_through() -> None:
    [record], _ = select_records(batches(data(5, [b"v"])), start=5)
    assert (record.offset, record.timestamp, record.key, record.headers) == (
        5,
        1000,
        None,
        (("h", b"x"),),
    )


def test_control_batches_are_never_returned_and_the_position_moves_past_them() -> None:
    log = batches(
        data(0, [b"a"], pid=7, transactional=True),
        marker(1, ControlType.COMMIT, 7),
    )
    for committed in (False, True):
        records, position = select_records(log, start=0, read_committed=committed)
        assert offsets_and_values(records) == [(0, b"a")]
        assert position == 2
    only_marker, position = select_records(log[1:], start=1)
    assert (only_marker, position) == ([], 2)


def test_no_batches_leaves_the_position_at_start() -> None:
    assert select_records([], start=42) == ([], 42)


def interleaved() -> list[RecordBatch]:
    """pid 7 aborts [1, 2] then commits [5]; pid 8 commits [0, 3]; offset 6 is plain."""
    return batches(
        data(0, [b"p8-ok-0"], pid=8, transactional=True),
        data(1, [b"p7-bad-1", b"p7-bad-2"], pid=7, transactional=True),
        data(3, [b"p8-ok-3"], pid=8, transactional=True),
        marker(4, ControlType.ABORT, 7),
        data(5, [b"p7-ok-5"], pid=7, transactional=True),
        data(6, [b"plain-6"]),
        marker(7, ControlType.COMMIT, 8),
        marker(8, ControlType.COMMIT, 7),
    )


def test_read_committed_drops_aborted_records_until_the_abort_marker() -> None:
    records, position = select_records(
        interleaved(), start=0, read_committed=True, aborted_transactions=[(7, 1)]
    )
    assert [r.value for r in records] == [b"p8-ok-0", b"p8-ok-3", b"p7-ok-5", b"plain-6"]
    assert position == 9


def test_read_uncommitted_shows_aborted_records() -> None:
    records, _ = select_records(interleaved(), start=0, aborted_transactions=[(7, 1)])
    assert [r.offset for r in records] == [0, 1, 2, 3, 5, 6]


def test_an_aborted_transaction_that_began_before_start_is_still_dropped() -> None:
    # The broker lists every aborted transaction the answer overlaps, including one whose
    # first offset is before the fetch offset.
    records, _ = select_records(
        interleaved()[2:], start=2, read_committed=True, aborted_transactions=[(7, 1)]
    )
    assert [r.value for r in records] == [b"p8-ok-3", b"p7-ok-5", b"plain-6"]
    records, _ = select_records(
        interleaved()[1:], start=2, read_committed=True, aborted_transactions=[(7, 1)]
    )
    assert [r.value for r in records] == [b"p8-ok-3", b"p7-ok-5", b"plain-6"]


def test_a_non_transactional_batch_of_an_aborted_producer_id_is_kept() -> None:
    log = batches(
        data(0, [b"bad"], pid=7, transactional=True),
        data(1, [b"idempotent"], pid=7, transactional=False),
        marker(2, ControlType.ABORT, 7),
    )
    records, _ = select_records(log, start=0, read_committed=True, aborted_transactions=[(7, 0)])
    assert [r.value for r in records] == [b"idempotent"]


def test_aborted_transactions_in_any_order() -> None:
    log = batches(
        data(0, [b"a0"], pid=1, transactional=True),
        data(1, [b"b1"], pid=2, transactional=True),
        marker(2, ControlType.ABORT, 1),
        marker(3, ControlType.ABORT, 2),
        data(4, [b"ok"], pid=1, transactional=True),
        marker(5, ControlType.COMMIT, 1),
    )
    records, _ = select_records(
        log, start=0, read_committed=True, aborted_transactions=[(2, 1), (1, 0)]
    )
    assert [r.value for r in records] == [b"ok"]


def test_without_an_aborted_list_read_committed_keeps_everything() -> None:
    # What a broker that sends no list (a null AbortedTransactions) gets: no filtering.
    records, _ = select_records(interleaved(), start=0, read_committed=True)
    assert len(records) == 6


# -- a model check: any interleaving of transactions, read from any offset -------------


@attrs.frozen
class Written:
    offset: int
    pid: int
    value: bytes


def build_log(
    steps: list[tuple[int, int, bool]],
) -> tuple[bytes, list[tuple[int, int, int]], set[bytes], int]:
    """Replay steps (producer, records, end-after) into a log; every transaction still open
    at the end is aborted. Returns the log, the aborted index (pid, first, marker), the
    committed values and the log end offset."""
    parts: list[bytes] = []
    offset = 0
    open_txn: dict[int, list[Written]] = {}
    aborted: list[tuple[int, int, int]] = []
    committed: set[bytes] = set()
    outcome = 0

    def end(pid: int, commit: bool) -> None:
        nonlocal offset
        txn = open_txn.pop(pid)
        parts.append(marker(offset, ControlType.COMMIT if commit else ControlType.ABORT, pid))
        if commit:
            committed.update(w.value for w in txn)
        else:
            aborted.append((pid, txn[0].offset, offset))
        offset += 1

    for pid, count, close in steps:
        values = [b"%d-%d" % (pid, offset + i) for i in range(count)]
        parts.append(data(offset, values, pid=pid, transactional=True))
        open_txn.setdefault(pid, []).extend(
            Written(offset + i, pid, v) for i, v in enumerate(values)
        )
        offset += count
        if close:
            outcome += 1
            end(pid, commit=outcome % 3 != 0)
    for pid in sorted(open_txn):
        end(pid, commit=False)
    return b"".join(parts), aborted, committed, offset


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.integers(1, 3), st.integers(1, 3), st.booleans()), min_size=1, max_size=12
    ),
    data_draw=st.data(),
)
def test_read_committed_matches_a_model_from_any_start(
    steps: list[tuple[int, int, bool]], data_draw: st.DataObject
) -> None:
    raw, aborted, committed, log_end = build_log(steps)
    start = data_draw.draw(st.integers(0, log_end - 1))
    every = list(decode_batches(raw))
    # What a broker returns: batches from the one holding `start`, and the aborted
    # transactions overlapping [start, log end).
    fetched = [b for b in every if b.next_offset > start]
    overlapping = [(pid, first) for pid, first, last in aborted if last >= start]
    records, position = select_records(
        fetched, start=start, read_committed=True, aborted_transactions=overlapping
    )
    expected = [r for b in every if not b.is_control for r in b.records if r.offset >= start]
    assert [r.value for r in records] == [r.value for r in expected if r.value in committed]
    assert position == log_end
    everything, _ = select_records(fetched, start=start, aborted_transactions=overlapping)
    assert [r.offset for r in everything] == [r.offset for r in expected]
