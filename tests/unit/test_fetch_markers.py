"""`committed_newest_first`: what read_committed shows, judged from the log's own
markers (the loader's resume on a broker whose read_committed shows aborted records,
as Tansu's does)."""

from __future__ import annotations

from tests.unit.test_reader_select import batches, data, marker
from trio_kafka.client._reader import CommittedInOrder, committed_newest_first
from trio_kafka.records import ControlType


def _values(log: bytes, markers: dict[int, bool] | None = None) -> list[bytes | None]:
    state = {} if markers is None else markers
    return [r.value for r in committed_newest_first(batches(log), state)]


def test_committed_aborted_open_and_plain_batches() -> None:
    log = b"".join(
        [
            data(0, [b"c1", b"c2"], pid=1, transactional=True),  # committed at 5
            data(2, [b"a1"], pid=2, transactional=True),  # aborted at 4
            data(3, [b"plain"]),  # not transactional: always seen
            marker(4, ControlType.ABORT, 2),
            marker(5, ControlType.COMMIT, 1),
            data(6, [b"open"], pid=3, transactional=True),  # no marker yet
            data(7, [b"idem"], pid=4),  # idempotent, not transactional: seen
        ]
    )
    assert _values(log) == [b"idem", b"plain", b"c2", b"c1"]


def test_the_first_marker_after_a_batch_decides_not_a_later_one() -> None:
    # pid 1 aborts a transaction, then commits a later one: the first batch stays aborted.
    log = b"".join(
        [
            data(0, [b"first"], pid=1, transactional=True),
            marker(1, ControlType.ABORT, 1),
            data(2, [b"second"], pid=1, transactional=True),
            marker(3, ControlType.COMMIT, 1),
        ]
    )
    assert _values(log) == [b"second"]
    assert _forward(log) == ([b"second"], None)  # going forward (CommittedInOrder) too


def test_markers_carry_over_to_earlier_windows() -> None:
    # The window read first (the later one) holds the markers; the earlier window's
    # batches are judged by them through the shared dict.
    later = marker(2, ControlType.COMMIT, 1) + marker(3, ControlType.ABORT, 2)
    earlier = data(0, [b"kept"], pid=1, transactional=True) + data(
        1, [b"dropped"], pid=2, transactional=True
    )
    state: dict[int, bool] = {}
    assert _values(later, state) == []
    assert state == {1: True, 2: False}
    assert _values(earlier, state) == [b"kept"]


# -- going forward: CommittedInOrder (the transactional commit log's read) --------------


def _forward(*windows: bytes) -> tuple[list[bytes | None], int | None]:
    judge = CommittedInOrder()
    values = [r.value for window in windows for r in judge.feed(batches(window))]
    return values, judge.first_held


def test_forward_the_same_records_in_offset_order_and_the_first_undecided_batch() -> None:
    log = b"".join(
        [
            data(0, [b"c1", b"c2"], pid=1, transactional=True),  # committed at 5
            data(2, [b"a1"], pid=2, transactional=True),  # aborted at 4
            data(3, [b"plain"]),  # waits behind the batches before it
            marker(4, ControlType.ABORT, 2),
            marker(5, ControlType.COMMIT, 1),
            data(6, [b"idem"], pid=4),  # nothing held: at once
            data(7, [b"open"], pid=3, transactional=True),  # no marker yet
            data(8, [b"after"]),  # behind the open one: not yet
        ]
    )
    assert _forward(log) == ([b"c1", b"c2", b"plain", b"idem"], 7)
    newest_first = [r.value for r in committed_newest_first(batches(log), {})]
    assert _forward(log)[0] == [v for v in reversed(newest_first) if v not in (b"open", b"after")]


def test_forward_markers_decide_batches_of_earlier_windows() -> None:
    earlier = data(0, [b"kept"], pid=1, transactional=True) + data(
        1, [b"dropped"], pid=2, transactional=True
    )
    later = marker(2, ControlType.ABORT, 2) + marker(3, ControlType.COMMIT, 1)
    assert _forward(earlier, later) == ([b"kept"], None)
