"""Transaction invariants T1-T6 (research/simulation.md numbers them).

A transaction's values are all committed or none (T1); read_committed sees exactly the
visible data below the last stable offset (T2); the log agrees with what the client
reported (T3); nothing hangs undecided (T4); no data of a fenced epoch follows a newer one
(T5); and one marker decides one transaction's data, never another's (T6).
"""

from __future__ import annotations

from collections.abc import Callable

from trio_kafka.records import ControlType
from trio_kafka.sim._check_index import Fate, Index, Place, Txn, TxnStatus, ViolationKind, show
from trio_kafka.sim.history import Operation, Produce
from trio_kafka.sim.snapshot import TopicPartition


def _fates_of(ix: Index, txn: Txn) -> dict[Fate, list[Operation]]:
    out: dict[Fate, list[Operation]] = {}
    for o in txn.produce_ops:
        assert isinstance(o.op, Produce)
        for p in ix.where(o.op):
            out.setdefault(p.fate, []).append(o)
    return out


def _atomic(ix: Index) -> None:
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


def _reads(ix: Index) -> None:
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
        # By (offset, value): a value may be in the log twice, aborted then committed
        # again (a bulk load resends an aborted chunk; sim/_check_index.py Index.where).
        seen = set(pairs)
        stable = lso.get(tp)
        for value, p in by_tp.get(tp, []):
            visible = p.fate in (Fate.PLAIN, Fate.COMMITTED)
            if not visible and (p.offset, value) in seen:
                ix.add(
                    ViolationKind.ABORTED_READ,
                    f"read_committed returned {show(value)!r} from {tp[0]}-{tp[1]}"
                    f"@{p.offset}, whose transaction is {p.fate.value}",
                    value=show(value),
                    at=[tp[0], tp[1], p.offset],
                )
            elif (
                visible and (p.offset, value) not in seen and (stable is None or p.offset < stable)
            ):
                ix.add(
                    ViolationKind.COMMITTED_NOT_VISIBLE,
                    f"read_committed missed {show(value)!r} at {tp[0]}-{tp[1]}"
                    f"@{p.offset} ({p.fate.value})",
                    value=show(value),
                    at=[tp[0], tp[1], p.offset],
                )


def _reported_outcome(ix: Index) -> None:
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


def _hanging(ix: Index) -> None:
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


def _fencing(ix: Index) -> None:
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


def _decided_by_own(ix: Index) -> None:
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


#: In the order they run (and report).
CHECKS: tuple[Callable[[Index], None], ...] = (
    _atomic,
    _reads,
    _reported_outcome,
    _hanging,
    _fencing,
    _decided_by_own,
)

__all__ = ["CHECKS"]
