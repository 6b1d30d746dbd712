"""Idempotence invariants I1-I5 and lost writes (research/simulation.md numbers them).

Each function reads the `Index` and appends violations of its own kinds: every value at
most once (I1) and from an operation, every acknowledged value in the log at its reported
offset (I2), per writer and partition in send order (I3), no value reported failed in a
visible batch (I4), and stored sequences without holes per producer id and epoch (I5).
"""

from __future__ import annotations

from collections.abc import Callable

from trio_kafka.sim._check_index import Fate, Index, ViolationKind, show
from trio_kafka.sim.history import CasAppend, Fail, Ok, Operation, Produce
from trio_kafka.sim.snapshot import TopicPartition


def _duplicates(ix: Index) -> None:
    """I1: a value is at most once in the log (CAS values: C1)."""
    for value, places in ix.places.items():
        if len(places) < 2:
            continue
        o = ix.by_value.get(value) if value is not None else None
        if o is not None and isinstance(o.op, CasAppend):
            continue
        if o is not None and isinstance(o.op, Produce):
            places = ix.where(o.op)  # a load's aborted chunks do not count (Index.where)
            if len(places) < 2:
                continue
        ix.add(
            ViolationKind.DUPLICATE,
            f"value {show(value)!r} is {len(places)} times in the log",
            value=show(value),
            op=None if o is None else o.id,
            at=[p.at for p in places],
        )


def _retried_duplicates(ix: Index) -> None:
    """I1 over an application's retries (`Produce.retry_of`): of the attempts of one
    record, at most one is in the log (each value once is `_duplicates`' business)."""
    attempts: dict[bytes, list[tuple[int, Produce]]] = {}
    for o in ix.ops:
        op = o.op
        if not isinstance(op, Produce) or op.retry_of is None:
            continue
        first, first_id = op, o.id
        while first.retry_of is not None:  # a retry of a retry: back to the first
            earlier = ix.by_value[first.retry_of]
            assert isinstance(earlier.op, Produce)  # build_index checked it
            first, first_id = earlier.op, earlier.id
        attempts.setdefault(first.value, [(first_id, first)]).append((o.id, op))
    for value, ops in attempts.items():
        landed = [(op_id, op, ix.where(op)) for op_id, op in ops if ix.where(op)]
        if len(landed) < 2:
            continue
        ix.add(
            ViolationKind.DUPLICATE,
            f"record {show(value)!r} is {len(landed)} times in the log, attempts "
            + ", ".join(f"op {op_id} {show(op.value)!r}" for op_id, op, _ in landed)
            + ": an application's retry of a write that had not failed",
            value=show(value),
            op=ops[0][0],
            at=[p.at for _, _, places in landed for p in places],
        )


def _unexpected(ix: Index) -> None:
    """I1: every record in a topic the workload writes comes from an operation."""
    topics = {o.op.topic for o in ix.ops if isinstance(o.op, Produce | CasAppend)}
    for value, places in ix.places.items():
        if value is not None and value in ix.by_value:
            continue
        for p in places:
            if p.tp[0] in topics:
                ix.add(
                    ViolationKind.UNEXPECTED_VALUE,
                    f"{p.tp[0]}-{p.tp[1]}@{p.offset} holds {show(value)!r}, written by no op",
                    value=show(value),
                    at=p.at,
                )


def _acknowledged(ix: Index) -> None:
    """I2: an acknowledged value is in the log, at its reported offset; else lost-write."""
    for o in ix.ops:
        op = o.op
        if not isinstance(op, Produce | CasAppend) or not isinstance(o.outcome, Ok):
            continue
        places = ix.where(op)
        if not places:
            ix.add(
                ViolationKind.LOST_WRITE,
                f"op {o.id} ({op.writer}) was acknowledged but {show(op.value)!r} is not in the log",
                op=o.id,
                value=show(op.value),
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
                f"{show(op.value)!r} is elsewhere",
                op=o.id,
                value=show(op.value),
                reported=[op.topic, partition, offset],
                at=[p.at for p in places],
            )


def _order(ix: Index) -> None:
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


def _failed_not_written(ix: Index) -> None:
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
                    f"{show(op.value)!r} is at {p.tp[0]}-{p.tp[1]}@{p.offset} ({p.fate.value})",
                    op=o.id,
                    value=show(op.value),
                    error=o.outcome.error,
                    at=p.at,
                )


_SEQ_MOD = 1 << 31


def _sequences(ix: Index) -> None:
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


#: In the order they run (and report).
CHECKS: tuple[Callable[[Index], None], ...] = (
    _duplicates,
    _retried_duplicates,
    _unexpected,
    _acknowledged,
    _order,
    _failed_not_written,
    _sequences,
)

__all__ = ["CHECKS"]
