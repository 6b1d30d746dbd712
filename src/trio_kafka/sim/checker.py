"""The simulator's checker: a run's history against the brokers' ground-truth logs.

Theory of operation
-------------------
Jepsen's Kafka checker has to infer the log from what consumers saw; a simulation has the
log itself. `snapshot_cluster` copies every partition of the mock broker into a neutral
`LogSnapshot` (batches with offsets, producer id, epoch, base sequence, transactional and
control flags, records). `check(history, logs, committed_reads=)` then:

1. indexes the log: where each value is (values are unique per operation, see
   `history.py`), and the *fate* of every data batch: PLAIN (not transactional), or the
   first control batch of the same producer id after it in the partition: COMMITTED,
   ABORTED, or UNDECIDED when none follows. The data batches a marker decides form a
   *marker group*;
2. derives each transaction's reported status from its end operations (`TxnStatus`);
3. runs one function per invariant (`_CHECKS`), each appending `Violation`s of its own
   kinds (research/simulation.md numbers them: I1-I5, T1-T6, C1-C4, plus liveness).

The index and the result types are in `_check_index.py`, the invariants by family in
`_check_idempotence.py`, `_check_transactions.py` and `_check_cas.py`; this module runs
them and is the public surface.

Every iteration follows the history's invocation order or the snapshot's sorted
partitions and offset order, so the violations and the rendering are deterministic.
"""

from __future__ import annotations

from collections.abc import Callable

from trio_kafka.sim import _check_cas, _check_idempotence, _check_transactions
from trio_kafka.sim._check_index import (
    CheckResult,
    Fate,
    Index,
    Reads,
    TxnStatus,
    Violation,
    ViolationKind,
    build_index,
)
from trio_kafka.sim.history import History, Status, op_name
from trio_kafka.sim.snapshot import (
    LogBatch,
    LogRecord,
    LogSnapshot,
    PartitionSnapshot,
    snapshot_cluster,
)

#: Every invariant, in the order they run and report.
_CHECKS: tuple[Callable[[Index], None], ...] = (
    _check_idempotence.CHECKS + _check_transactions.CHECKS + _check_cas.CHECKS
)


def _counters(ix: Index) -> dict[str, int]:
    counters: dict[str, int] = {}
    for o in ix.ops:
        key = f"op.{op_name(o.op)}.{o.status.value}"
        counters[key] = counters.get(key, 0) + 1
    counters["ops"] = len(ix.ops)
    counters["partitions"] = len(ix.logs.partitions)
    batches = [b for p in ix.logs.partitions for b in p.batches]
    counters["batches"] = sum(not b.is_control for b in batches)
    counters["markers"] = sum(b.is_control for b in batches)
    counters["records"] = sum(b.record_count for b in batches if not b.is_control)
    for txn in ix.txns.values():
        key = f"txn.{txn.status.value}"
        counters[key] = counters.get(key, 0) + 1
    if ix.reads is not None:
        counters["read_committed.records"] = sum(len(v) for v in ix.reads.values())
    return counters


def check(
    history: History, logs: LogSnapshot, *, committed_reads: Reads | None = None
) -> CheckResult:
    """Check `history` against the ground truth `logs`.

    `committed_reads`: what a read_committed consumer returned per partition in the final
    phase, after the heal (T2 is skipped without it). Raises ValueError if two operations
    of the history share a value.
    """
    ix = build_index(history, logs, committed_reads)
    for run in _CHECKS:
        run(ix)
    return CheckResult(tuple(ix.violations), _counters(ix))


__all__ = [
    "CheckResult",
    "Fate",
    "LogBatch",
    "LogRecord",
    "LogSnapshot",
    "PartitionSnapshot",
    "Reads",
    "Status",
    "TxnStatus",
    "Violation",
    "ViolationKind",
    "check",
    "snapshot_cluster",
]
