"""CAS invariants C1-C4 (research/simulation.md numbers them), and liveness.

A CAS append lands at most once (C1), exactly at its expected offset and where it was
acknowledged (C2), never when reported failed (C3), and always settles (C4); after the
heal phase every other operation has an outcome too (liveness).
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
CHECKS: tuple[Callable[[Index], None], ...] = (_cas, _pending)

__all__ = ["CHECKS"]
