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

Every iteration follows the history's invocation order or the snapshot's sorted
partitions and offset order, so the violations and the rendering are deterministic.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping, Sequence
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
    Status,
    TxnAbort,
    TxnBegin,
    TxnCommit,
    op_name,
)
from trio_kafka.sim.snapshot import (
    LogBatch,
    LogRecord,
    LogSnapshot,
    PartitionSnapshot,
    TopicPartition,
    snapshot_cluster,
)

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


@attrs.frozen(slots=True)
class MarkerGroup:
    """The data batches of one producer id that one marker decided (None: undecided)."""

    tp: TopicPartition
    producer_id: int
    marker: LogBatch | None
    batches: tuple[LogBatch, ...]


@attrs.define
class _Txn:
    name: str
    writer: str
    produce_ops: list[Operation] = attrs.field(factory=list)
    end_ops: list[Operation] = attrs.field(factory=list)
    status: TxnStatus = TxnStatus.OPEN


def _show(value: bytes | None) -> str | None:
    return None if value is None else value.decode("latin-1")


@attrs.define
class _Index:
    history: History
    logs: LogSnapshot
    reads: Reads | None
    ops: list[Operation] = attrs.field(factory=list)
    by_value: dict[bytes, Operation] = attrs.field(factory=dict)
    places: dict[bytes | None, list[Place]] = attrs.field(factory=dict)
    groups: list[MarkerGroup] = attrs.field(factory=list)
    txns: dict[str, _Txn] = attrs.field(factory=dict)
    violations: list[Violation] = attrs.field(factory=list)

    def add(self, kind: ViolationKind, message: str, **details: Any) -> None:
        self.violations.append(Violation(kind, message, details))

    def where(self, op: Produce | CasAppend) -> list[Place]:
        return self.places.get(op.value, [])


def _build_index(history: History, logs: LogSnapshot, reads: Reads | None) -> _Index:
    ix = _Index(history, logs, reads, ops=list(history))
    for o in ix.ops:
        op = o.op
        if isinstance(op, Produce | CasAppend):
            if op.value in ix.by_value:
                raise ValueError(
                    f"history ops {ix.by_value[op.value].id} and {o.id} share value "
                    f"{op.value!r}: workloads must make values unique"
                )
            ix.by_value[op.value] = o
        if isinstance(op, Produce) and op.txn is not None:
            ix.txns.setdefault(op.txn, _Txn(op.txn, op.writer)).produce_ops.append(o)
        elif isinstance(op, TxnBegin | TxnCommit | TxnAbort):
            txn = ix.txns.setdefault(op.txn, _Txn(op.txn, op.writer))
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


# ---------------------------------------------------------------------------------------
# Idempotence: I1-I5 and lost writes


def _duplicates(ix: _Index) -> None:
    """I1: a value is at most once in the log (CAS values: C1)."""
    for value, places in ix.places.items():
        if len(places) < 2:
            continue
        o = ix.by_value.get(value) if value is not None else None
        if o is not None and isinstance(o.op, CasAppend):
            continue
        ix.add(
            ViolationKind.DUPLICATE,
            f"value {_show(value)!r} is {len(places)} times in the log",
            value=_show(value),
            op=None if o is None else o.id,
            at=[[p.tp[0], p.tp[1], p.offset] for p in places],
        )


def _unexpected(ix: _Index) -> None:
    """I1: every record in a topic the workload writes comes from an operation."""
    topics = {o.op.topic for o in ix.ops if isinstance(o.op, Produce | CasAppend)}
    for value, places in ix.places.items():
        if value is not None and value in ix.by_value:
            continue
        for p in places:
            if p.tp[0] in topics:
                ix.add(
                    ViolationKind.UNEXPECTED_VALUE,
                    f"{p.tp[0]}-{p.tp[1]}@{p.offset} holds {_show(value)!r}, written by no op",
                    value=_show(value),
                    at=[p.tp[0], p.tp[1], p.offset],
                )


def _acknowledged(ix: _Index) -> None:
    """I2: an acknowledged value is in the log, at its reported offset; else lost-write."""
    for o in ix.ops:
        op = o.op
        if not isinstance(op, Produce | CasAppend) or not isinstance(o.outcome, Ok):
            continue
        places = ix.where(op)
        if not places:
            ix.add(
                ViolationKind.LOST_WRITE,
                f"op {o.id} ({op.writer}) was acknowledged but {_show(op.value)!r} is not in the log",
                op=o.id,
                value=_show(op.value),
                reported=[op.topic, o.outcome.partition, o.outcome.offset],
            )
            continue
        if isinstance(op, CasAppend):
            continue  # C2 checks CAS offsets
        partition = o.outcome.partition if o.outcome.partition is not None else op.partition
        offset = o.outcome.offset
        if offset is None or offset < 0:
            continue
        if not any(
            p.tp[0] == op.topic and p.offset == offset and partition in (None, p.tp[1])
            for p in places
        ):
            ix.add(
                ViolationKind.WRONG_OFFSET,
                f"op {o.id} was acknowledged at {op.topic}-{partition}@{offset} but "
                f"{_show(op.value)!r} is elsewhere",
                op=o.id,
                value=_show(op.value),
                reported=[op.topic, partition, offset],
                at=[[p.tp[0], p.tp[1], p.offset] for p in places],
            )


def _order(ix: _Index) -> None:
    """I3: per (writer, partition), values that were written are in send order."""
    last: dict[tuple[str, TopicPartition], tuple[int, Operation]] = {}
    inversions: dict[tuple[str, TopicPartition], list[tuple[Operation, Operation]]] = {}
    for o in ix.ops:
        op = o.op
        if not isinstance(op, Produce):
            continue
        places = ix.where(op)
        if not places:
            continue
        place = places[0]
        key = (op.writer, place.tp)
        prev = last.get(key)
        if prev is not None and place.offset < prev[0]:
            inversions.setdefault(key, []).append((prev[1], o))
        if prev is None or place.offset > prev[0]:
            last[key] = (place.offset, o)
    for (writer, tp), pairs in inversions.items():
        before, after = pairs[0]
        ix.add(
            ViolationKind.REORDER,
            f"{writer} on {tp[0]}-{tp[1]}: op {after.id} was sent after op {before.id} but "
            f"is earlier in the log ({len(pairs)} inversion(s))",
            writer=writer,
            partition=[tp[0], tp[1]],
            first=[before.id, after.id],
            inversions=len(pairs),
        )


def _failed_not_written(ix: _Index) -> None:
    """I4: a value reported failed is not in the log (aborted data is tolerated: no reader
    sees it, and Kafka reports the records of an aborted transaction as failed)."""
    for o in ix.ops:
        op = o.op
        if not isinstance(op, Produce) or not isinstance(o.outcome, Fail):
            continue
        for p in ix.where(op):
            if p.fate in (Fate.PLAIN, Fate.COMMITTED):
                ix.add(
                    ViolationKind.FAILED_BUT_WRITTEN,
                    f"op {o.id} was reported failed ({o.outcome.error}) but "
                    f"{_show(op.value)!r} is at {p.tp[0]}-{p.tp[1]}@{p.offset} ({p.fate.value})",
                    op=o.id,
                    value=_show(op.value),
                    error=o.outcome.error,
                    at=[p.tp[0], p.tp[1], p.offset],
                )


_SEQ_MOD = 1 << 31


def _sequences(ix: _Index) -> None:
    """I5: per (producer id, epoch, partition) stored sequences start at 0, no holes."""
    for part in ix.logs.partitions:
        expected: dict[tuple[int, int], int] = {}
        for batch in part.batches:
            if batch.is_control or batch.producer_id < 0 or batch.base_sequence < 0:
                continue
            key = (batch.producer_id, batch.producer_epoch)
            want = expected.get(key, 0)
            if batch.base_sequence != want:
                ix.add(
                    ViolationKind.SEQUENCE_GAP,
                    f"{part.topic}-{part.partition}@{batch.base_offset}: producer "
                    f"{key[0]} epoch {key[1]} stored sequence {batch.base_sequence}, "
                    f"expected {want}",
                    partition=[part.topic, part.partition],
                    producer=list(key),
                    offset=batch.base_offset,
                    sequence=batch.base_sequence,
                    expected=want,
                )
            expected[key] = (batch.base_sequence + batch.record_count) % _SEQ_MOD


# ---------------------------------------------------------------------------------------
# Transactions: T1-T6


def _fates_of(ix: _Index, txn: _Txn) -> dict[Fate, list[Operation]]:
    out: dict[Fate, list[Operation]] = {}
    for o in txn.produce_ops:
        assert isinstance(o.op, Produce)
        for p in ix.where(o.op):
            out.setdefault(p.fate, []).append(o)
    return out


def _atomic(ix: _Index) -> None:
    """T1: a transaction's values are all committed or none is."""
    for txn in ix.txns.values():
        fates = _fates_of(ix, txn)
        committed = fates.get(Fate.COMMITTED, [])
        if not committed:
            continue
        aborted = fates.get(Fate.ABORTED, [])
        missing = [o for o in txn.produce_ops if isinstance(o.op, Produce) and not ix.where(o.op)]
        if aborted or missing:
            ix.add(
                ViolationKind.TORN_TRANSACTION,
                f"transaction {txn.name} ({txn.writer}) is torn: {len(committed)} value(s) "
                f"committed, {len(aborted)} aborted, {len(missing)} missing from the log",
                txn=txn.name,
                committed=[o.id for o in committed],
                aborted=[o.id for o in aborted],
                missing=[o.id for o in missing],
            )


def _reads(ix: _Index) -> None:
    """T2: read_committed never returns aborted or undecided data, and returns every
    committed (or plain) record below the last stable offset."""
    if ix.reads is None:
        return
    lso = {(p.topic, p.partition): p.last_stable_offset for p in ix.logs.partitions}
    by_tp: dict[TopicPartition, list[tuple[bytes | None, Place]]] = {}
    for value, places in ix.places.items():
        for p in places:
            by_tp.setdefault(p.tp, []).append((value, p))
    for tp, pairs in sorted(ix.reads.items()):
        seen = {value for _, value in pairs}
        stable = lso.get(tp)
        for value, p in by_tp.get(tp, []):
            visible = p.fate in (Fate.PLAIN, Fate.COMMITTED)
            if not visible and value in seen:
                ix.add(
                    ViolationKind.ABORTED_READ,
                    f"read_committed returned {_show(value)!r} from {tp[0]}-{tp[1]}"
                    f"@{p.offset}, whose transaction is {p.fate.value}",
                    value=_show(value),
                    at=[tp[0], tp[1], p.offset],
                )
            elif visible and value not in seen and (stable is None or p.offset < stable):
                ix.add(
                    ViolationKind.COMMITTED_NOT_VISIBLE,
                    f"read_committed missed {_show(value)!r} at {tp[0]}-{tp[1]}"
                    f"@{p.offset} ({p.fate.value})",
                    value=_show(value),
                    at=[tp[0], tp[1], p.offset],
                )


def _reported_outcome(ix: _Index) -> None:
    """T3: a transaction reported committed is committed in the log, one reported aborted
    (or failed, or never ended) is not; an ambiguous one may be either."""
    for txn in ix.txns.values():
        fates = _fates_of(ix, txn)
        if txn.status is TxnStatus.COMMITTED:
            wrong = fates.get(Fate.ABORTED, [])
            found = "aborted"
        elif txn.status is TxnStatus.AMBIGUOUS:
            continue
        else:
            wrong = fates.get(Fate.COMMITTED, [])
            found = "committed"
        if wrong:
            ix.add(
                ViolationKind.TXN_OUTCOME_MISMATCH,
                f"transaction {txn.name} ({txn.writer}) was reported {txn.status.value} but "
                f"{len(wrong)} of its value(s) are {found}",
                txn=txn.name,
                reported=txn.status.value,
                ops=[o.id for o in wrong],
            )


def _hanging(ix: _Index) -> None:
    """T4: every transactional batch is decided by the end; the LSO reached the log end."""
    for g in ix.groups:
        if g.marker is None:
            first = g.batches[0].base_offset
            ix.add(
                ViolationKind.HANGING_TRANSACTION,
                f"{g.tp[0]}-{g.tp[1]}: producer {g.producer_id} has {len(g.batches)} "
                f"transactional batch(es) from offset {first} with no marker",
                partition=list(g.tp),
                producer=g.producer_id,
                first_offset=first,
            )
    for part in ix.logs.partitions:
        lso = part.last_stable_offset
        if lso is not None and lso < part.log_end_offset:
            ix.add(
                ViolationKind.HANGING_TRANSACTION,
                f"{part.topic}-{part.partition}: last stable offset {lso} is behind the log "
                f"end {part.log_end_offset}",
                partition=[part.topic, part.partition],
                last_stable_offset=lso,
                log_end_offset=part.log_end_offset,
            )


def _fencing(ix: _Index) -> None:
    """T5: once a partition holds a batch or marker of epoch e for a producer id, no data
    batch of a lower epoch of that producer id follows it."""
    for part in ix.logs.partitions:
        highest: dict[int, tuple[int, int]] = {}  # pid -> (epoch, offset where seen)
        for batch in part.batches:
            pid = batch.producer_id
            if pid < 0:
                continue
            top = highest.get(pid)
            if not batch.is_control and top is not None and batch.producer_epoch < top[0]:
                ix.add(
                    ViolationKind.FENCED_APPEND,
                    f"{part.topic}-{part.partition}@{batch.base_offset}: producer {pid} "
                    f"appended with epoch {batch.producer_epoch} after epoch {top[0]} "
                    f"at offset {top[1]}",
                    partition=[part.topic, part.partition],
                    producer=pid,
                    epoch=batch.producer_epoch,
                    fenced_by=list(top),
                    offset=batch.base_offset,
                )
            if top is None or batch.producer_epoch > top[0]:
                highest[pid] = (batch.producer_epoch, batch.base_offset)


def _decided_by_own(ix: _Index) -> None:
    """T6: a marker decides the data its producer id wrote since its previous marker in
    that partition; that data must belong to one transaction of the history (a delayed
    EndTxn of transaction N-1 must not decide transaction N's records)."""
    for g in ix.groups:
        if g.marker is None:
            continue
        owners: dict[str, list[int]] = {}
        for batch in g.batches:
            for record in batch.records:
                o = ix.by_value.get(record.value) if record.value is not None else None
                if o is None:
                    continue
                name = o.op.txn if isinstance(o.op, Produce) and o.op.txn else "<none>"
                owners.setdefault(name, []).append(o.id)
        if len(owners) > 1:
            ix.add(
                ViolationKind.TXN_DECIDED_BY_OTHER,
                f"{g.tp[0]}-{g.tp[1]}@{g.marker.base_offset}: one "
                f"{'commit' if g.marker.control is ControlType.COMMIT else 'abort'} marker of "
                f"producer {g.producer_id} decided {len(owners)} transactions: "
                + ", ".join(owners),
                partition=list(g.tp),
                marker_offset=g.marker.base_offset,
                transactions=dict(owners),
            )


# ---------------------------------------------------------------------------------------
# CAS: C1-C4, and liveness


def _cas(ix: _Index) -> None:
    for o in ix.ops:
        op = o.op
        if not isinstance(op, CasAppend):
            continue
        places = ix.where(op)
        at = [[p.tp[0], p.tp[1], p.offset] for p in places]
        if len(places) > 1:
            ix.add(
                ViolationKind.CAS_DUPLICATE,
                f"CAS op {o.id} ({op.writer} #{op.sequence}) was applied {len(places)} times",
                op=o.id,
                value=_show(op.value),
                at=at,
            )
        for p in places:
            if p.tp != (op.topic, op.partition) or p.offset != op.expected_offset:
                ix.add(
                    ViolationKind.CAS_WRONG_OFFSET,
                    f"CAS op {o.id} expected offset {op.expected_offset} but "
                    f"{_show(op.value)!r} is at {p.tp[0]}-{p.tp[1]}@{p.offset}",
                    op=o.id,
                    expected=op.expected_offset,
                    at=[p.tp[0], p.tp[1], p.offset],
                )
        if (
            isinstance(o.outcome, Ok)
            and o.outcome.offset is not None
            and o.outcome.offset != op.expected_offset
        ):
            ix.add(
                ViolationKind.CAS_WRONG_OFFSET,
                f"CAS op {o.id} expected offset {op.expected_offset} but was acknowledged "
                f"at {o.outcome.offset}",
                op=o.id,
                expected=op.expected_offset,
                reported=o.outcome.offset,
            )
        if isinstance(o.outcome, Fail) and places:
            ix.add(
                ViolationKind.CAS_FAILED_BUT_WRITTEN,
                f"CAS op {o.id} was reported failed ({o.outcome.error}) but its value is "
                f"in the log",
                op=o.id,
                error=o.outcome.error,
                at=at,
            )
        if o.outcome is None:
            ix.add(
                ViolationKind.CAS_UNTERMINATED,
                f"CAS op {o.id} ({op.writer} #{op.sequence}) never settled",
                op=o.id,
            )


def _pending(ix: _Index) -> None:
    """Liveness: after the heal phase every operation has an outcome (CAS: C4)."""
    for o in ix.ops:
        if o.outcome is None and not isinstance(o.op, CasAppend):
            ix.add(
                ViolationKind.PENDING,
                f"op {o.id} ({op_name(o.op)} by {o.op.writer}) never completed",
                op=o.id,
            )


_CHECKS: tuple[Callable[[_Index], None], ...] = (
    _duplicates,
    _unexpected,
    _acknowledged,
    _order,
    _failed_not_written,
    _sequences,
    _atomic,
    _reads,
    _reported_outcome,
    _hanging,
    _fencing,
    _decided_by_own,
    _cas,
    _pending,
)


def _counters(ix: _Index) -> dict[str, int]:
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
    ix = _build_index(history, logs, committed_reads)
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
    "Status",
    "TxnStatus",
    "Violation",
    "ViolationKind",
    "check",
    "snapshot_cluster",
]
