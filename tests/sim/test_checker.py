"""The checker on synthetic histories and logs: one passing and one violating case per
violation kind (and the history's canonical trace)."""

from __future__ import annotations

import attrs
import pytest

from trio_kafka.core import Acknowledged, Ambiguous, Failed
from trio_kafka.core._record import AmbiguousWriteError
from trio_kafka.errors import RequestTimeoutError
from trio_kafka.records import ControlType
from trio_kafka.sim.checker import (
    CheckResult,
    LogBatch,
    LogRecord,
    LogSnapshot,
    PartitionSnapshot,
    TxnStatus,
    ViolationKind,
    check,
)
from trio_kafka.sim.history import (
    CasAppend,
    Fail,
    History,
    Info,
    Ok,
    Produce,
    TxnAbort,
    TxnBegin,
    TxnCommit,
    outcome_from_delivery,
)

TP0 = ("t", 0)
TP1 = ("t", 1)


@attrs.define
class Logs:
    """Builds a LogSnapshot: offsets and per (pid, epoch, partition) sequences follow."""

    batches: dict[tuple[str, int], list[LogBatch]] = attrs.field(factory=dict)
    seqs: dict[tuple[int, int, tuple[str, int]], int] = attrs.field(factory=dict)

    def _end(self, tp: tuple[str, int]) -> int:
        bs = self.batches.get(tp, [])
        return bs[-1].base_offset + bs[-1].record_count if bs else 0

    def append(
        self,
        tp: tuple[str, int],
        *values: bytes,
        pid: int = -1,
        epoch: int = -1,
        txn: bool = False,
        seq: int | None = None,
    ) -> int:
        base = self._end(tp)
        if seq is None:
            seq = self.seqs.get((pid, epoch, tp), 0) if pid >= 0 else -1
        if pid >= 0:
            self.seqs[(pid, epoch, tp)] = seq + len(values)
        records = tuple(LogRecord(base + i, None, v) for i, v in enumerate(values))
        self.batches.setdefault(tp, []).append(LogBatch(base, pid, epoch, seq, txn, records))
        return base

    def marker(self, tp: tuple[str, int], pid: int, epoch: int, *, commit: bool) -> int:
        base = self._end(tp)
        control = ControlType.COMMIT if commit else ControlType.ABORT
        record = LogRecord(base, b"\x00\x00\x00" + bytes([int(control)]), b"")
        self.batches.setdefault(tp, []).append(
            LogBatch(base, pid, epoch, -1, True, (record,), control)
        )
        return base

    def snapshot(self, lso: dict[tuple[str, int], int] | None = None) -> LogSnapshot:
        snap = LogSnapshot.of(self.batches)
        if lso is None:
            return snap
        return LogSnapshot(
            tuple(
                attrs.evolve(p, last_stable_offset=lso.get((p.topic, p.partition)))
                for p in snap.partitions
            )
        )


def produce(
    h: History,
    value: str,
    outcome: Ok | Fail | Info | None,
    *,
    writer: str = "w1",
    tp: tuple[str, int] = TP0,
    txn: str | None = None,
) -> int:
    op_id = h.invoke(Produce(writer, tp[0], tp[1], value.encode(), txn=txn))
    if outcome is not None:
        h.complete(op_id, outcome)
    return op_id


def kinds(result: CheckResult) -> set[ViolationKind]:
    return set(result.kinds)


def only(result: CheckResult, kind: ViolationKind) -> None:
    assert kinds(result) == {kind}, result.render()


# -- idempotence --------------------------------------------------------------------------


def idempotent_run() -> tuple[History, Logs]:
    h, logs = History(), Logs()
    produce(h, "w1-0", Ok(0, 0))
    produce(h, "w1-1", Ok(0, 1))
    produce(h, "w1-2", Info("RequestTimeoutError"))
    produce(h, "w1-3", Fail("MessageTooLarge"))
    logs.append(TP0, b"w1-0", b"w1-1", pid=7, epoch=0)
    logs.append(TP0, b"w1-2", pid=7, epoch=0)
    return h, logs


def test_a_clean_idempotent_run_passes_with_counters() -> None:
    h, logs = idempotent_run()
    result = check(
        h, logs.snapshot(), committed_reads={TP0: [(0, b"w1-0"), (1, b"w1-1"), (2, b"w1-2")]}
    )
    assert result.ok, result.render()
    assert result.counters["op.produce.ok"] == 2
    assert result.counters["op.produce.info"] == 1
    assert result.counters["op.produce.fail"] == 1
    assert result.counters["records"] == 3
    assert result.render().startswith("check ok\n")


def test_duplicate_value_is_i1() -> None:
    h, logs = idempotent_run()
    logs.append(TP0, b"w1-1", pid=7, epoch=0)
    result = check(h, logs.snapshot())
    only(result, ViolationKind.DUPLICATE)
    assert result.violations[0].details["at"] == [["t", 0, 1], ["t", 0, 3]]
    assert result.violations[0].kind.invariant == "I1"


def test_value_of_no_operation_is_unexpected() -> None:
    h, logs = idempotent_run()
    logs.append(TP0, b"ghost")
    only(check(h, logs.snapshot()), ViolationKind.UNEXPECTED_VALUE)


def test_acknowledged_at_another_offset_is_wrong_offset() -> None:
    h, logs = History(), Logs()
    produce(h, "w1-0", Ok(0, 5))
    logs.append(TP0, b"w1-0")
    only(check(h, logs.snapshot()), ViolationKind.WRONG_OFFSET)


def test_unknown_offset_is_not_checked() -> None:
    h, logs = History(), Logs()
    produce(h, "w1-0", Ok(0, None))
    logs.append(TP0, b"w1-0")
    assert check(h, logs.snapshot()).ok


def test_acknowledged_but_absent_is_lost_write() -> None:
    h, logs = idempotent_run()
    produce(h, "w1-4", Ok(0, 3))
    only(check(h, logs.snapshot()), ViolationKind.LOST_WRITE)


def test_log_order_against_send_order_is_i3() -> None:
    h, logs = History(), Logs()
    produce(h, "a", Info("x"))
    produce(h, "b", Ok(0, 0))
    produce(h, "c", Ok(0, 2))
    logs.append(TP0, b"b", pid=1, epoch=0)
    logs.append(TP0, b"a", pid=1, epoch=0)
    logs.append(TP0, b"c", pid=1, epoch=0)
    result = check(h, logs.snapshot())
    only(result, ViolationKind.REORDER)
    assert result.violations[0].details["first"] == [0, 1]


def test_other_writers_interleave_freely() -> None:
    h, logs = History(), Logs()
    produce(h, "a", Ok(0, 1), writer="w1")
    produce(h, "b", Ok(0, 0), writer="w2")
    logs.append(TP0, b"b")
    logs.append(TP0, b"a")
    assert check(h, logs.snapshot()).ok


def test_failed_but_in_the_log_is_i4() -> None:
    h, logs = History(), Logs()
    produce(h, "a", Fail("OutOfOrderSequenceError"))
    logs.append(TP0, b"a", pid=1, epoch=0)
    result = check(h, logs.snapshot())
    only(result, ViolationKind.FAILED_BUT_WRITTEN)
    assert result.violations[0].details["error"] == "OutOfOrderSequenceError"


def test_failed_record_of_an_aborted_transaction_is_tolerated() -> None:
    h, logs = History(), Logs()
    h.complete(h.invoke(TxnBegin("w1", "t1")), Ok())
    produce(h, "a", Fail("TransactionAbortedError"), txn="t1")
    h.complete(h.invoke(TxnAbort("w1", "t1")), Ok())
    logs.append(TP0, b"a", pid=1, epoch=0, txn=True)
    logs.marker(TP0, 1, 0, commit=False)
    assert check(h, logs.snapshot()).ok


def test_sequence_hole_is_i5() -> None:
    h, logs = History(), Logs()
    produce(h, "a", Ok(0, 0))
    produce(h, "b", Ok(0, 1))
    logs.append(TP0, b"a", pid=1, epoch=0)
    logs.append(TP0, b"b", pid=1, epoch=0, seq=2)
    result = check(h, logs.snapshot())
    only(result, ViolationKind.SEQUENCE_GAP)
    assert result.violations[0].details["expected"] == 1


def test_sequences_restart_at_zero_with_a_new_epoch() -> None:
    h, logs = History(), Logs()
    produce(h, "a", Ok(0, 0))
    produce(h, "b", Ok(0, 1))
    logs.append(TP0, b"a", pid=1, epoch=0)
    logs.append(TP0, b"b", pid=1, epoch=1)
    assert check(h, logs.snapshot()).ok
    logs2 = Logs()
    logs2.append(TP0, b"a", pid=1, epoch=0, seq=3)
    logs2.append(TP0, b"b", pid=1, epoch=0)
    only(check(h, logs2.snapshot()), ViolationKind.SEQUENCE_GAP)


# -- transactions -------------------------------------------------------------------------


def txn_history(
    h: History,
    name: str,
    values: list[tuple[str, tuple[str, int]]],
    end: str,
    outcome: Ok | Fail | Info,
) -> None:
    h.complete(h.invoke(TxnBegin("w1", name)), Ok())
    for value, tp in values:
        produce(h, value, Ok(), tp=tp, txn=name)
    op = TxnCommit("w1", name) if end == "commit" else TxnAbort("w1", name)
    h.complete(h.invoke(op), outcome)


def committed_two_partitions() -> tuple[History, Logs]:
    h, logs = History(), Logs()
    txn_history(h, "t1", [("a", TP0), ("b", TP1)], "commit", Ok())
    logs.append(TP0, b"a", pid=1, epoch=0, txn=True)
    logs.append(TP1, b"b", pid=1, epoch=0, txn=True)
    logs.marker(TP0, 1, 0, commit=True)
    logs.marker(TP1, 1, 0, commit=True)
    return h, logs


def test_committed_transaction_passes_and_is_counted() -> None:
    h, logs = committed_two_partitions()
    reads = {TP0: [(0, b"a")], TP1: [(0, b"b")]}
    result = check(h, logs.snapshot({TP0: 2, TP1: 2}), committed_reads=reads)
    assert result.ok, result.render()
    assert result.counters["txn.committed"] == 1
    assert result.counters["markers"] == 2


def test_committed_in_one_partition_aborted_in_another_is_torn() -> None:
    h, logs = History(), Logs()
    txn_history(h, "t1", [("a", TP0), ("b", TP1)], "commit", Info("RequestTimeoutError"))
    logs.append(TP0, b"a", pid=1, epoch=0, txn=True)
    logs.append(TP1, b"b", pid=1, epoch=0, txn=True)
    logs.marker(TP0, 1, 0, commit=True)
    logs.marker(TP1, 1, 0, commit=False)
    only(check(h, logs.snapshot()), ViolationKind.TORN_TRANSACTION)


def test_committed_with_a_value_missing_is_torn() -> None:
    h, logs = History(), Logs()
    h.complete(h.invoke(TxnBegin("w1", "t1")), Ok())
    produce(h, "a", Ok(), txn="t1")
    produce(h, "b", Info("RequestTimeoutError"), txn="t1")
    h.complete(h.invoke(TxnCommit("w1", "t1")), Ok())
    logs.append(TP0, b"a", pid=1, epoch=0, txn=True)
    logs.marker(TP0, 1, 0, commit=True)
    result = check(h, logs.snapshot())
    only(result, ViolationKind.TORN_TRANSACTION)
    assert result.violations[0].details["missing"] == [2]


def test_read_committed_returning_aborted_data_is_t2() -> None:
    h, logs = History(), Logs()
    txn_history(h, "t1", [("a", TP0)], "abort", Ok())
    logs.append(TP0, b"a", pid=1, epoch=0, txn=True)
    logs.marker(TP0, 1, 0, commit=False)
    snap = logs.snapshot({TP0: 2})
    assert check(h, snap, committed_reads={TP0: []}).ok
    only(check(h, snap, committed_reads={TP0: [(0, b"a")]}), ViolationKind.ABORTED_READ)


def test_read_committed_missing_committed_data_is_t2() -> None:
    h, logs = committed_two_partitions()
    reads = {TP0: [(0, b"a")], TP1: []}
    result = check(h, logs.snapshot({TP0: 2, TP1: 2}), committed_reads=reads)
    only(result, ViolationKind.COMMITTED_NOT_VISIBLE)
    assert result.violations[0].kind.invariant == "T2"


def test_reported_committed_but_aborted_is_t3() -> None:
    h, logs = History(), Logs()
    txn_history(h, "t1", [("a", TP0)], "commit", Ok())
    logs.append(TP0, b"a", pid=1, epoch=0, txn=True)
    logs.marker(TP0, 1, 0, commit=False)
    only(check(h, logs.snapshot()), ViolationKind.TXN_OUTCOME_MISMATCH)


def test_reported_aborted_but_committed_is_t3() -> None:
    h, logs = History(), Logs()
    txn_history(h, "t1", [("a", TP0)], "abort", Ok())
    logs.append(TP0, b"a", pid=1, epoch=0, txn=True)
    logs.marker(TP0, 1, 0, commit=True)
    result = check(h, logs.snapshot())
    only(result, ViolationKind.TXN_OUTCOME_MISMATCH)
    assert result.violations[0].details["reported"] == "aborted"


@pytest.mark.parametrize("commit", [True, False])
def test_ambiguous_commit_may_go_either_way(commit: bool) -> None:
    h, logs = History(), Logs()
    txn_history(h, "t1", [("a", TP0)], "commit", Info("RequestTimeoutError"))
    logs.append(TP0, b"a", pid=1, epoch=0, txn=True)
    logs.marker(TP0, 1, 0, commit=commit)
    result = check(h, logs.snapshot())
    assert result.ok, result.render()
    assert result.counters["txn.ambiguous"] == 1


@pytest.mark.parametrize(
    ("ends", "status"),
    [
        ([], TxnStatus.OPEN),
        ([("commit", Ok())], TxnStatus.COMMITTED),
        ([("commit", Fail("InvalidTxnState"))], TxnStatus.FAILED),
        ([("commit", Info("Timeout"))], TxnStatus.AMBIGUOUS),
        ([("commit", Info("Timeout")), ("abort", Ok())], TxnStatus.ABORTED),
        ([("commit", Info("Timeout")), ("abort", Info("Timeout"))], TxnStatus.AMBIGUOUS),
        ([("abort", Info("Timeout"))], TxnStatus.ABORTED),
        ([("commit", Fail("X")), ("abort", Ok())], TxnStatus.ABORTED),
    ],
)
def test_transaction_status_follows_the_end_operations(
    ends: list[tuple[str, Ok | Fail | Info]], status: TxnStatus
) -> None:
    h = History()
    h.complete(h.invoke(TxnBegin("w1", "t1")), Ok())
    for end, outcome in ends:
        op = TxnCommit("w1", "t1") if end == "commit" else TxnAbort("w1", "t1")
        h.complete(h.invoke(op), outcome)
    result = check(h, LogSnapshot(()))
    assert result.counters[f"txn.{status.value}"] == 1


def test_transactional_batch_without_marker_is_hanging() -> None:
    h, logs = History(), Logs()
    txn_history(h, "t1", [("a", TP0)], "commit", Info("RequestTimeoutError"))
    logs.append(TP0, b"a", pid=1, epoch=0, txn=True)
    only(check(h, logs.snapshot()), ViolationKind.HANGING_TRANSACTION)


def test_last_stable_offset_behind_the_log_end_is_hanging() -> None:
    h, logs = committed_two_partitions()
    assert check(h, logs.snapshot({TP0: 2, TP1: 2})).ok
    only(check(h, logs.snapshot({TP0: 0, TP1: 2})), ViolationKind.HANGING_TRANSACTION)


def test_append_from_a_fenced_epoch_is_t5() -> None:
    h, logs = History(), Logs()
    produce(h, "a", Ok(0, 0))
    produce(h, "b", Info("RequestTimeoutError"))
    logs.append(TP0, b"a", pid=1, epoch=1)
    logs.append(TP0, b"b", pid=1, epoch=0)
    result = check(h, logs.snapshot())
    only(result, ViolationKind.FENCED_APPEND)
    assert result.violations[0].details["fenced_by"] == [1, 0]


def test_marker_epoch_fences_later_data_of_an_older_epoch() -> None:
    h, logs = History(), Logs()
    txn_history(h, "t1", [("a", TP0)], "abort", Ok())
    txn_history(h, "t2", [("b", TP0)], "abort", Ok())
    logs.append(TP0, b"a", pid=1, epoch=0, txn=True)
    logs.marker(TP0, 1, 1, commit=False)  # transactions v2: the marker bumps the epoch
    logs.append(TP0, b"b", pid=1, epoch=1, txn=True)
    logs.marker(TP0, 1, 2, commit=False)
    assert check(h, logs.snapshot()).ok
    bad = Logs()
    bad.append(TP0, b"a", pid=1, epoch=0, txn=True)
    bad.marker(TP0, 1, 1, commit=False)
    bad.append(TP0, b"b", pid=1, epoch=0, txn=True)
    bad.marker(TP0, 1, 1, commit=False)
    only(check(h, bad.snapshot()), ViolationKind.FENCED_APPEND)


def test_delayed_end_txn_deciding_the_next_transaction_is_t6() -> None:
    # t1's commit timed out (its EndTxn is delayed); the client went on with t2 in the
    # same epoch; the delayed commit then wrote one marker deciding both.
    h, logs = History(), Logs()
    txn_history(h, "t1", [("a", TP0)], "commit", Info("RequestTimeoutError"))
    txn_history(h, "t2", [("b", TP0)], "commit", Info("RequestTimeoutError"))
    logs.append(TP0, b"a", pid=1, epoch=0, txn=True)
    logs.append(TP0, b"b", pid=1, epoch=0, txn=True)
    logs.marker(TP0, 1, 0, commit=True)
    result = check(h, logs.snapshot())
    only(result, ViolationKind.TXN_DECIDED_BY_OTHER)
    assert result.violations[0].details["transactions"] == {"t1": [1], "t2": [4]}
    ok = Logs()
    ok.append(TP0, b"a", pid=1, epoch=0, txn=True)
    ok.marker(TP0, 1, 0, commit=True)
    ok.append(TP0, b"b", pid=1, epoch=0, txn=True)
    ok.marker(TP0, 1, 0, commit=True)
    assert check(h, ok.snapshot()).ok


# -- CAS ------------------------------------------------------------------------------------


def cas(
    h: History, value: str, expected: int, outcome: Ok | Fail | Info | None, seq: int = 0
) -> int:
    op_id = h.invoke(CasAppend("w1", "t", 0, value.encode(), seq, expected))
    if outcome is not None:
        h.complete(op_id, outcome)
    return op_id


def test_cas_run_passes() -> None:
    h, logs = History(), Logs()
    cas(h, "c0", 0, Ok(0, 0), 0)
    cas(h, "c1", 1, Info("RequestTimeoutError"), 1)
    cas(h, "c2", 1, Fail("ExpectedOffsetMismatchError"), 2)
    logs.append(TP0, b"c0", pid=1, epoch=0)
    logs.append(TP0, b"c1", pid=1, epoch=0)
    result = check(h, logs.snapshot())
    assert result.ok, result.render()
    assert result.counters["op.cas.fail"] == 1


def test_cas_applied_twice_is_c1() -> None:
    h, logs = History(), Logs()
    cas(h, "c0", 0, Ok(0, 0))
    logs.append(TP0, b"c0")
    logs.append(TP0, b"c0")
    result = check(h, logs.snapshot())
    # The second copy is also at the wrong offset.
    assert kinds(result) == {ViolationKind.CAS_DUPLICATE, ViolationKind.CAS_WRONG_OFFSET}
    assert ViolationKind.DUPLICATE not in kinds(result)


def test_cas_at_another_offset_is_c2() -> None:
    h, logs = History(), Logs()
    cas(h, "c0", 1, Info("RequestTimeoutError"))
    logs.append(TP0, b"c0")
    only(check(h, logs.snapshot()), ViolationKind.CAS_WRONG_OFFSET)
    h2, logs2 = History(), Logs()
    cas(h2, "c0", 0, Ok(0, 3))
    logs2.append(TP0, b"c0")
    only(check(h2, logs2.snapshot()), ViolationKind.CAS_WRONG_OFFSET)


def test_cas_reported_failed_but_written_is_c3() -> None:
    h, logs = History(), Logs()
    cas(h, "c0", 0, Fail("ExpectedOffsetMismatchError"))
    logs.append(TP0, b"c0")
    only(check(h, logs.snapshot()), ViolationKind.CAS_FAILED_BUT_WRITTEN)


def test_cas_never_settled_is_c4() -> None:
    h = History()
    cas(h, "c0", 0, None)
    only(check(h, LogSnapshot(())), ViolationKind.CAS_UNTERMINATED)


def test_cas_landing_after_a_record_its_writer_never_saw_is_c5() -> None:
    """w1 saw the log to 0 and pipelined c0 (expecting 0) and c1 (expecting 1); c0
    failed, another writer's x0 took offset 0, and c1 landed at 1, its expected offset."""
    h, logs = History(), Logs()
    h.complete(h.invoke(CasAppend("w1", "t", 0, b"c0", 0, 0, seen_end=0)), Fail("Mismatch"))
    h.complete(h.invoke(CasAppend("w1", "t", 0, b"c1", 1, 1, seen_end=0)), Ok(0, 1))
    h.complete(h.invoke(CasAppend("w2", "t", 0, b"x0", 0, 0, seen_end=0)), Ok(0, 0))
    logs.append(TP0, b"x0")
    logs.append(TP0, b"c1")
    only(check(h, logs.snapshot()), ViolationKind.CAS_UNSEEN_BEFORE)


def test_cas_landing_after_its_own_earlier_appends_passes() -> None:
    h, logs = History(), Logs()
    h.complete(h.invoke(CasAppend("w1", "t", 0, b"c0", 0, 0, seen_end=0)), Ok(0, 0))
    h.complete(h.invoke(CasAppend("w1", "t", 0, b"c1", 1, 1, seen_end=0)), Ok(0, 1))
    h.complete(h.invoke(CasAppend("w2", "t", 0, b"x2", 0, 2, seen_end=2)), Ok(0, 2))
    for value in (b"c0", b"c1", b"x2"):
        logs.append(TP0, value)
    result = check(h, logs.snapshot())
    assert result.ok, result.render()


# -- liveness and the history itself ---------------------------------------------------------


def test_pending_operation_is_a_liveness_violation() -> None:
    h, logs = idempotent_run()
    produce(h, "w1-9", None)
    result = check(h, logs.snapshot())
    only(result, ViolationKind.PENDING)
    assert result.counters["op.produce.pending"] == 1


def test_shared_values_are_a_workload_error() -> None:
    h = History()
    produce(h, "a", Ok())
    produce(h, "a", Ok())
    with pytest.raises(ValueError, match="unique"):
        check(h, LogSnapshot(()))


def retried(
    h: History, value: str, first: str, outcome: Ok | Fail | Info, *, tp: tuple[str, int] = TP0
) -> int:
    """An application's retry of the record first sent as `first`, as `value`."""
    op_id = h.invoke(Produce("w1", tp[0], tp[1], value.encode(), retry_of=first.encode()))
    h.complete(op_id, outcome)
    return op_id


def test_an_application_retry_after_a_failure_passes() -> None:
    h, logs = History(), Logs()
    produce(h, "w1-0", Fail("BufferFullError"))
    retried(h, "w1-0/retry-1", "w1-0", Fail("DeliveryTimeoutError"))
    retried(h, "w1-0/retry-2", "w1-0", Ok(0, 0))
    logs.append(TP0, b"w1-0/retry-2", pid=7, epoch=0)
    result = check(h, logs.snapshot())
    assert result.ok, result.render()


def test_two_attempts_of_one_record_in_the_log_are_i1() -> None:
    """The application retried a record whose first attempt was ambiguous, and both
    landed: a duplicate of the record, though each value is in the log once."""
    h, logs = History(), Logs()
    produce(h, "w1-0", Info("RequestTimeoutError"))
    retried(h, "w1-0/retry-1", "w1-0", Ok(0, 1))
    logs.append(TP0, b"w1-0", b"w1-0/retry-1", pid=7, epoch=0)
    result = check(h, logs.snapshot())
    only(result, ViolationKind.DUPLICATE)
    assert result.violations[0].details["at"] == [["t", 0, 0], ["t", 0, 1]]
    assert "record 'w1-0' is 2 times in the log" in result.violations[0].message


def test_a_retry_of_no_earlier_send_is_a_workload_error() -> None:
    h = History()
    retried(h, "w1-0/retry-1", "w1-0", Ok(0, 0))
    with pytest.raises(ValueError, match="retry_of is the value of the record's first"):
        check(h, LogSnapshot(()))


def test_a_retry_survives_the_trace() -> None:
    h = History()
    produce(h, "w1-0", Fail("X"))
    retried(h, "w1-0/retry-1", "w1-0", Ok(0, 0))
    again = History.from_trace(h.trace())
    assert [o.op for o in again] == [o.op for o in h]
    assert '"retry_of"' not in h.trace().splitlines()[0]  # a first attempt's line as before


def test_completing_twice_is_refused() -> None:
    h = History()
    op = produce(h, "a", Ok(0, 0))
    with pytest.raises(ValueError, match="twice"):
        h.complete(op, Fail("X"))


def test_trace_is_canonical_and_round_trips() -> None:
    def build() -> History:
        h = History()
        a = h.invoke(Produce("w1", "t", None, b"w1-\x00\xff", key=b"k"), time=0.5)
        b = h.invoke(CasAppend("w2", "t", 1, b"c", 3, 7))
        h.complete(b, Fail("ExpectedOffsetMismatchError"), time=1.25)
        h.complete(a, Ok(2, 9), time=2.0)
        h.complete(h.invoke(TxnCommit("w1", "t1")), Info("RequestTimeoutError"))
        return h

    trace = build().trace()
    assert trace == build().trace()
    first = trace.splitlines()[0]
    assert first == (
        '{"id":0,"op":{"f":"produce","key":"k","partition":null,"topic":"t","txn":null,'
        '"value":"w1-\\u0000\\u00ff","writer":"w1"},"time":0.5,"type":"invoke"}'
    )
    again = History.from_trace(trace)
    assert again.trace() == trace
    assert again[0].op == Produce("w1", "t", None, b"w1-\x00\xff", key=b"k")
    assert again[0].outcome == Ok(2, 9)


def test_delivery_results_map_to_outcomes() -> None:
    assert outcome_from_delivery(Acknowledged("t", 1, 5, 0)) == Ok(1, 5)
    assert outcome_from_delivery(Acknowledged("t", 1, -1, 0)) == Ok(1, None)
    assert outcome_from_delivery(Failed("t", 1, RequestTimeoutError("x"))) == Fail(
        "RequestTimeoutError"
    )
    ambiguous = AmbiguousWriteError("maybe", RequestTimeoutError("x"))
    assert outcome_from_delivery(Ambiguous("t", 1, ambiguous)) == Info("AmbiguousWriteError")


def test_rendering_is_stable_and_names_the_invariant() -> None:
    h, logs = idempotent_run()
    logs.append(TP0, b"w1-1", pid=7, epoch=0)
    text = check(h, logs.snapshot()).render()
    assert text == check(h, logs.snapshot()).render()
    assert "[I1 duplicate] value 'w1-1' is 2 times in the log" in text
    assert text.splitlines()[0] == "check FAIL: 1 violation(s)"


def test_failure_class_is_the_first_kind_in_declaration_order() -> None:
    h, logs = History(), Logs()
    produce(h, "a", Ok(0, 0))
    produce(h, "b", None)
    logs.append(TP0, b"a")
    logs.append(TP0, b"a")
    result = check(h, logs.snapshot())
    assert kinds(result) == {ViolationKind.DUPLICATE, ViolationKind.PENDING}
    assert result.failure_class is ViolationKind.DUPLICATE
    assert check(h, LogSnapshot((PartitionSnapshot("t", 0, (), 0),))).failure_class is (
        ViolationKind.LOST_WRITE
    )


# -- a load that writes in transactions of its own (bulk-txn) ------------------------------


def bulk_txn_run(*, committed_again: bool) -> tuple[History, Logs]:
    """A load's chunk aborted (its run crashed), then loaded again by the next run."""
    h, logs = History(), Logs()
    produce(h, "r-0", Ok(0, None))
    produce(h, "r-1", Ok(0, None))
    logs.append(TP0, b"r-0", b"r-1", pid=7, epoch=0, txn=True)
    logs.marker(TP0, 7, 1, commit=False)
    if committed_again:
        logs.append(TP0, b"r-0", b"r-1", pid=7, epoch=1, txn=True, seq=0)
        logs.marker(TP0, 7, 1, commit=True)
    return h, logs


def test_a_loads_aborted_chunk_loaded_again_is_no_duplicate() -> None:
    h, logs = bulk_txn_run(committed_again=True)
    result = check(h, logs.snapshot(), committed_reads={TP0: [(3, b"r-0"), (4, b"r-1")]})
    assert result.ok, result.render()


def test_a_loads_row_only_in_an_aborted_chunk_is_a_lost_write() -> None:
    h, logs = bulk_txn_run(committed_again=False)
    only(check(h, logs.snapshot(), committed_reads={TP0: []}), ViolationKind.LOST_WRITE)
