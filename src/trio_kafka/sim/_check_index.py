"""The checker's results and its index of a run (see `checker.py` for the whole picture).

`ViolationKind`, `Violation` and `CheckResult` are what a check reports. `build_index`
reads a history and a log snapshot once into an `Index`: where each value landed
(`Place`, with the fate of its batch), which data batches each marker decided
(`MarkerGroup`), and each transaction's operations and reported status (`Txn`). The
invariant modules (`_check_idempotence`, `_check_transactions`, `_check_cas`) only read
the index and append to `Index.violations`.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from trio_kafka.records import ControlType
from trio_kafka.sim.history import (
    CasAppend,
    Fail,
    History,
    Info,
    Ok,
    Operation,
    Produce,
    TxnAbort,
    TxnBegin,
    TxnCommit,
)
from trio_kafka.sim.snapshot import LogBatch, LogSnapshot, TopicPartition

#: A final read: per partition, the (offset, value) pairs a consumer returned.
Reads = Mapping[TopicPartition, Sequence[tuple[int, bytes | None]]]

# ---------------------------------------------------------------------------------------
# Results


class ViolationKind(enum.Enum):
    """What went wrong; `invariant` is its number in research/simulation.md."""

    DUPLICATE = "duplicate"
    UNEXPECTED_VALUE = "unexpected-value"
    WRONG_OFFSET = "wrong-offset"
    LOST_WRITE = "lost-write"
    REORDER = "reorder"
    FAILED_BUT_WRITTEN = "failed-but-written"
    SEQUENCE_GAP = "sequence-gap"
    TORN_TRANSACTION = "torn-transaction"
    ABORTED_READ = "aborted-read"
    COMMITTED_NOT_VISIBLE = "committed-not-visible"
    TXN_OUTCOME_MISMATCH = "txn-outcome-mismatch"
    HANGING_TRANSACTION = "hanging-transaction"
    FENCED_APPEND = "fenced-append"
    TXN_DECIDED_BY_OTHER = "txn-decided-by-other"
    CAS_DUPLICATE = "cas-duplicate"
    CAS_WRONG_OFFSET = "cas-wrong-offset"
    CAS_FAILED_BUT_WRITTEN = "cas-failed-but-written"
    CAS_UNTERMINATED = "cas-unterminated"
    CAS_UNSEEN_BEFORE = "cas-unseen-before"
    PENDING = "pending"

    @property
    def invariant(self) -> str:
        return _INVARIANTS[self]


_INVARIANTS = {
    ViolationKind.DUPLICATE: "I1",
    ViolationKind.UNEXPECTED_VALUE: "I1",
    ViolationKind.WRONG_OFFSET: "I2",
    ViolationKind.LOST_WRITE: "I2",
    ViolationKind.REORDER: "I3",
    ViolationKind.FAILED_BUT_WRITTEN: "I4",
    ViolationKind.SEQUENCE_GAP: "I5",
    ViolationKind.TORN_TRANSACTION: "T1",
    ViolationKind.ABORTED_READ: "T2",
    ViolationKind.COMMITTED_NOT_VISIBLE: "T2",
    ViolationKind.TXN_OUTCOME_MISMATCH: "T3",
    ViolationKind.HANGING_TRANSACTION: "T4",
    ViolationKind.FENCED_APPEND: "T5",
    ViolationKind.TXN_DECIDED_BY_OTHER: "T6",
    ViolationKind.CAS_DUPLICATE: "C1",
    ViolationKind.CAS_WRONG_OFFSET: "C2",
    ViolationKind.CAS_FAILED_BUT_WRITTEN: "C3",
    ViolationKind.CAS_UNTERMINATED: "C4",
    ViolationKind.CAS_UNSEEN_BEFORE: "C5",
    ViolationKind.PENDING: "L",
}
_ORDER = {k: i for i, k in enumerate(ViolationKind)}


@attrs.frozen(slots=True)
class Violation:
    kind: ViolationKind
    message: str
    #: JSON-able facts (values as latin-1 strings, offsets, op ids).
    details: Mapping[str, Any] = attrs.field(factory=dict)

    def render(self) -> str:
        facts = json.dumps(self.details, sort_keys=True, separators=(",", ":"))
        return f"[{self.kind.invariant} {self.kind.value}] {self.message} {facts}"


@attrs.frozen(slots=True)
class CheckResult:
    violations: tuple[Violation, ...]
    #: Ops by kind and status ("produce.ok"), records, batches, transactions by status.
    counters: Mapping[str, int]

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def kinds(self) -> frozenset[ViolationKind]:
        return frozenset(v.kind for v in self.violations)

    @property
    def failure_class(self) -> ViolationKind | None:
        """The first kind in `ViolationKind` order: what a minimizer must keep failing."""
        return min(self.kinds, key=_ORDER.__getitem__, default=None)

    def render(self) -> str:
        head = "ok" if self.ok else f"FAIL: {len(self.violations)} violation(s)"
        counters = " ".join(f"{k}={v}" for k, v in sorted(self.counters.items()))
        return "".join(
            line + "\n"
            for line in [f"check {head}", f"counters {counters}"]
            + [v.render() for v in self.violations]
        )


# ---------------------------------------------------------------------------------------
# Indexing


class Fate(enum.Enum):
    PLAIN = "plain"
    COMMITTED = "committed"
    ABORTED = "aborted"
    UNDECIDED = "undecided"


class TxnStatus(enum.Enum):
    """What the client reported about a transaction (see `_txn_status`)."""

    COMMITTED = "committed"
    ABORTED = "aborted"
    AMBIGUOUS = "ambiguous"
    FAILED = "failed"  # a commit failed definitely: not committed
    OPEN = "open"  # never ended by the client: not committed


@attrs.frozen(slots=True)
class Place:
    tp: TopicPartition
    offset: int
    batch: LogBatch
    fate: Fate

    @property
    def at(self) -> list[str | int]:
        """`[topic, partition, offset]`: how a violation's details name a place."""
        return [self.tp[0], self.tp[1], self.offset]


@attrs.frozen(slots=True)
class MarkerGroup:
    """The data batches of one producer id that one marker decided (None: undecided)."""

    tp: TopicPartition
    producer_id: int
    marker: LogBatch | None
    batches: tuple[LogBatch, ...]


@attrs.define
class Txn:
    name: str
    writer: str
    produce_ops: list[Operation] = attrs.field(factory=list)
    end_ops: list[Operation] = attrs.field(factory=list)
    status: TxnStatus = TxnStatus.OPEN


def show(value: bytes | None) -> str | None:
    return None if value is None else value.decode("latin-1")


@attrs.define
class Index:
    history: History
    logs: LogSnapshot
    reads: Reads | None
    ops: list[Operation] = attrs.field(factory=list)
    by_value: dict[bytes, Operation] = attrs.field(factory=dict)
    places: dict[bytes | None, list[Place]] = attrs.field(factory=dict)
    groups: list[MarkerGroup] = attrs.field(factory=list)
    txns: dict[str, Txn] = attrs.field(factory=dict)
    violations: list[Violation] = attrs.field(factory=list)

    def add(self, kind: ViolationKind, message: str, **details: Any) -> None:
        self.violations.append(Violation(kind, message, details))

    def where(self, op: Produce | CasAppend) -> list[Place]:
        """Where `op`'s value is in the log. A send outside any transaction of the history
        (`txn` None) whose bytes sit in aborted batches is a load that writes in
        transactions of its own (client/_bulk.py): it counts only where read_committed
        readers see it."""
        places = self.places.get(op.value, [])
        if isinstance(op, Produce) and op.txn is None:
            return [p for p in places if p.fate is not Fate.ABORTED]
        return places


def build_index(history: History, logs: LogSnapshot, reads: Reads | None) -> Index:
    ix = Index(history, logs, reads, ops=list(history))
    for o in ix.ops:
        op = o.op
        if isinstance(op, Produce | CasAppend):
            if op.value in ix.by_value:
                raise ValueError(
                    f"history ops {ix.by_value[op.value].id} and {o.id} share value "
                    f"{op.value!r}: workloads must make values unique"
                )
            if isinstance(op, Produce) and op.retry_of is not None:
                first = ix.by_value.get(op.retry_of)
                if first is None or not isinstance(first.op, Produce):
                    raise ValueError(
                        f"history op {o.id} retries {op.retry_of!r}, which no earlier send "
                        "wrote: retry_of is the value of the record's first attempt"
                    )
            ix.by_value[op.value] = o
        if isinstance(op, Produce) and op.txn is not None:
            ix.txns.setdefault(op.txn, Txn(op.txn, op.writer)).produce_ops.append(o)
        elif isinstance(op, TxnBegin | TxnCommit | TxnAbort):
            txn = ix.txns.setdefault(op.txn, Txn(op.txn, op.writer))
            if not isinstance(op, TxnBegin):
                txn.end_ops.append(o)
    for txn in ix.txns.values():
        txn.status = _txn_status(txn.end_ops)

    for part in logs.partitions:
        tp = (part.topic, part.partition)
        fates: dict[int, Fate] = {}  # id(batch) is local to this loop, never rendered
        open_batches: dict[int, list[LogBatch]] = {}
        for batch in part.batches:
            if batch.control is not None:
                decided = open_batches.pop(batch.producer_id, [])
                fate = Fate.COMMITTED if batch.control is ControlType.COMMIT else Fate.ABORTED
                for b in decided:
                    fates[id(b)] = fate
                ix.groups.append(MarkerGroup(tp, batch.producer_id, batch, tuple(decided)))
            elif batch.is_transactional:
                open_batches.setdefault(batch.producer_id, []).append(batch)
            else:
                fates[id(batch)] = Fate.PLAIN
        for pid, batches in open_batches.items():
            for b in batches:
                fates[id(b)] = Fate.UNDECIDED
            ix.groups.append(MarkerGroup(tp, pid, None, tuple(batches)))
        for batch in part.batches:
            if batch.is_control:
                continue
            for record in batch.records:
                place = Place(tp, record.offset, batch, fates[id(batch)])
                ix.places.setdefault(record.value, []).append(place)
    return ix


def _txn_status(end_ops: Sequence[Operation]) -> TxnStatus:
    """The last end op the client reported as done decides; else an ambiguous commit
    makes it ambiguous; else a failed commit or any abort means not committed."""
    definite = [o for o in end_ops if isinstance(o.outcome, Ok)]
    if definite:
        last = definite[-1].op
        return TxnStatus.COMMITTED if isinstance(last, TxnCommit) else TxnStatus.ABORTED
    commits = [o for o in end_ops if isinstance(o.op, TxnCommit)]
    if any(isinstance(o.outcome, Info) for o in commits):
        return TxnStatus.AMBIGUOUS
    if any(isinstance(o.outcome, Fail) for o in commits):
        return TxnStatus.FAILED
    if any(isinstance(o.op, TxnAbort) for o in end_ops):
        return TxnStatus.ABORTED
    return TxnStatus.OPEN


__all__ = [
    "CheckResult",
    "Fate",
    "Index",
    "MarkerGroup",
    "Place",
    "Reads",
    "Txn",
    "TxnStatus",
    "Violation",
    "ViolationKind",
    "build_index",
    "show",
]
