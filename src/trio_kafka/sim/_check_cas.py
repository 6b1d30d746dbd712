"""CAS invariants C1-C5 (research/simulation.md numbers them), and liveness.

A CAS append lands at most once (C1), exactly at its expected offset and where it was
acknowledged (C2), never when reported failed (C3), and always settles (C4); it lands
only after records its writer had seen: read, or its own appends made before it (C5:
an append pipelined behind a failed one of its writer expected an offset the failed one
would have filled; landing there after another writer's records would be a CAS that
succeeded on a log its writer never saw). After the heal phase every other operation
has an outcome too (liveness).
"""

from __future__ import annotations

from collections.abc import Callable

from trio_kafka.sim._check_index import Index, ViolationKind, show
from trio_kafka.sim.history import CasAppend, Fail, Ok, op_name


def _cas(ix: Index) -> None:
    for o in ix.ops:
        op = o.op
        if not isinstance(op, CasAppend):
            continue
        places = ix.where(op)
        at = [p.at for p in places]
        if len(places) > 1:
            ix.add(
                ViolationKind.CAS_DUPLICATE,
                f"CAS op {o.id} ({op.writer} #{op.sequence}) was applied {len(places)} times",
                op=o.id,
                value=show(op.value),
                at=at,
            )
        for p in places:
            if p.tp != (op.topic, op.partition) or p.offset != op.expected_offset:
                ix.add(
                    ViolationKind.CAS_WRONG_OFFSET,
                    f"CAS op {o.id} expected offset {op.expected_offset} but "
                    f"{show(op.value)!r} is at {p.tp[0]}-{p.tp[1]}@{p.offset}",
                    op=o.id,
                    expected=op.expected_offset,
                    at=p.at,
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


def _seen_before(ix: Index) -> None:
    """C5: between the log end a CAS append's writer had seen (`seen_end`) and where the
    append landed, only that writer's own appends made before it, each at the offset it
    expected."""
    at: dict[tuple[str, int], dict[int, bytes | None]] = {}
    for value, places in ix.places.items():
        for p in places:
            at.setdefault(p.tp, {})[p.offset] = value
    for o in ix.ops:
        op = o.op
        if not isinstance(op, CasAppend) or op.seen_end is None:
            continue
        for p in ix.where(op):
            for offset in range(op.seen_end, p.offset):
                value = at.get(p.tp, {}).get(offset)
                before = ix.by_value.get(value) if value is not None else None
                if (
                    before is not None
                    and isinstance(before.op, CasAppend)
                    and before.op.writer == op.writer
                    and before.id < o.id
                    and before.op.expected_offset == offset
                ):
                    continue
                whose = "no record" if value is None else repr(show(value))
                ix.add(
                    ViolationKind.CAS_UNSEEN_BEFORE,
                    f"CAS op {o.id} ({op.writer} #{op.sequence}) landed at {p.offset} after "
                    f"{whose} at {offset}, which its writer had not seen (it had seen the "
                    f"log to {op.seen_end}) nor appended before it",
                    op=o.id,
                    seen_end=op.seen_end,
                    at=p.at,
                    unseen=offset,
                )
                break


def _pending(ix: Index) -> None:
    """Liveness: after the heal phase every operation has an outcome (CAS: C4)."""
    for o in ix.ops:
        if o.outcome is None and not isinstance(o.op, CasAppend):
            ix.add(
                ViolationKind.PENDING,
                f"op {o.id} ({op_name(o.op)} by {o.op.writer}) never completed",
                op=o.id,
            )


#: In the order they run (and report).
CHECKS: tuple[Callable[[Index], None], ...] = (_cas, _seen_before, _pending)

__all__ = ["CHECKS"]
