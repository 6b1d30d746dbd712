"""The history of a simulated run: every operation a workload invoked and what it was told.

Theory of operation
-------------------
A workload calls `History.invoke(op)` just before it asks the client for something and
`History.complete(op_id, outcome)` when the client answers, exactly as Jepsen records
`:invoke` then `:ok` / `:fail` / `:info` events. An operation never completed is
*pending*: the checker treats it as a liveness failure when the run has healed.

Operations (frozen values, no identity):

- `Produce`: one record from a writer (a workload task, e.g. "w3"), optionally inside a
  transaction (`txn`, a name unique in the run such as "w3-t2");
- `CasAppend`: one record written with an expected offset (the CAS extension), retried by
  the workload until it settles;
- `TxnBegin`, `TxnCommit`, `TxnAbort`: a transaction's boundaries. Their outcome is what
  the client reported: `Ok` for a commit means committed, for an abort means aborted;
  `Fail` means the end did not happen (a failed commit is not committed); `Info` means
  unknown.

Outcomes: `Ok(partition, offset)` (offset -1 or None when the client does not know it),
`Fail(error)` (definitely not written; `error` is the exception class name) and
`Info(error)` (maybe written).

Values must be unique in a run and should describe themselves (b"w3-17"): the checker maps
the records it finds in the brokers' logs back to operations by value alone.

The canonical trace (`History.trace()`) is one JSON object per event, keys sorted, no
Python ids, reprs or wall times (virtual time is allowed: it is part of the seed's
behaviour). It is what the determinism check compares byte for byte.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from trio_kafka.core import Acknowledged, Ambiguous, Failed

# ---------------------------------------------------------------------------------------
# Operations

#: `json.dumps(d, sort_keys=True, separators=(",", ":"))` with one encoder for every
#: event (`dumps` builds a new encoder per call when given options).
_canonical_json = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


@attrs.frozen(slots=True)
class Produce:
    """Send one record. `partition` None: the client's partitioner chose (see `Ok`)."""

    writer: str
    topic: str
    partition: int | None
    value: bytes
    key: bytes | None = None
    #: The transaction this send belongs to (None: not transactional).
    txn: str | None = None
    #: An application's retry of a record: the value of its first attempt (each attempt
    #: has a value of its own, so the checker knows which one landed; between them the
    #: attempts must land at most once). None: a record of its own.
    retry_of: bytes | None = None


@attrs.frozen(slots=True)
class CasAppend:
    """Append `value` at exactly `expected_offset` (the `sequence`-th CAS of `writer`)."""

    writer: str
    topic: str
    partition: int
    value: bytes
    sequence: int
    expected_offset: int
    key: bytes | None = None
    #: The log end the writer had seen when it appended (read, or its own appends
    #: acknowledged): the records between it and `expected_offset` must be the writer's
    #: own appends made before this one (C5). None: not recorded.
    seen_end: int | None = None


@attrs.frozen(slots=True)
class TxnBegin:
    writer: str
    txn: str


@attrs.frozen(slots=True)
class TxnCommit:
    writer: str
    txn: str


@attrs.frozen(slots=True)
class TxnAbort:
    writer: str
    txn: str


Op = Produce | CasAppend | TxnBegin | TxnCommit | TxnAbort

_OP_NAMES: dict[type, str] = {
    Produce: "produce",
    CasAppend: "cas",
    TxnBegin: "txn-begin",
    TxnCommit: "txn-commit",
    TxnAbort: "txn-abort",
}


def op_name(op: Op) -> str:
    return _OP_NAMES[type(op)]


# ---------------------------------------------------------------------------------------
# Outcomes


@attrs.frozen(slots=True)
class Ok:
    """Done: for a record, where the client says it is (None / -1: not known)."""

    partition: int | None = None
    offset: int | None = None


@attrs.frozen(slots=True)
class Fail:
    """Definitely not done. `error` is the error's class name (never its repr)."""

    error: str


@attrs.frozen(slots=True)
class Info:
    """Maybe done (Jepsen's indeterminate `:info`)."""

    error: str


Outcome = Ok | Fail | Info


class Status(enum.Enum):
    """How an operation ended, for counters and renderings."""

    OK = "ok"
    FAIL = "fail"
    INFO = "info"
    PENDING = "pending"


def status_of(outcome: Outcome | None) -> Status:
    match outcome:
        case None:
            return Status.PENDING
        case Ok():
            return Status.OK
        case Fail():
            return Status.FAIL
        case Info():
            return Status.INFO


def outcome_from_delivery(result: Acknowledged | Failed | Ambiguous) -> Outcome:
    """The history outcome of a producer's per-record result."""
    match result:
        case Acknowledged(partition=partition, offset=offset):
            return Ok(partition, offset if offset >= 0 else None)
        case Failed(error=error):
            return Fail(type(error).__name__)
        case Ambiguous(error=error):
            return Info(type(error).__name__)


def outcome_from_exception(exc: BaseException | None, *, ambiguous: bool) -> Outcome:
    """`Ok()` for no exception, else `Info` when `ambiguous`, else `Fail`."""
    if exc is None:
        return Ok()
    name = type(exc).__name__
    return Info(name) if ambiguous else Fail(name)


# ---------------------------------------------------------------------------------------
# The history


@attrs.frozen(slots=True)
class Operation:
    """An invoked operation, its id (invocation order, from 0) and how it ended."""

    id: int
    op: Op
    outcome: Outcome | None
    invoke_time: float | None = None
    complete_time: float | None = None

    @property
    def status(self) -> Status:
        return status_of(self.outcome)


@attrs.frozen(slots=True)
class Event:
    """One line of the history: an invocation (`outcome` None) or a completion."""

    op_id: int
    outcome: Outcome | None
    time: float | None


def _bytes_json(value: bytes | None) -> str | None:
    # latin-1 maps bytes 1:1 to code points; json escapes the non-ASCII ones, so the
    # rendering is canonical and `.encode("latin-1")` reverses it.
    return None if value is None else value.decode("latin-1")


def _bytes_from_json(value: str | None) -> bytes | None:
    return None if value is None else value.encode("latin-1")


def _op_json(op: Op) -> dict[str, Any]:
    out: dict[str, Any] = {"f": op_name(op), "writer": op.writer}
    match op:
        case Produce() | CasAppend():
            out.update(
                topic=op.topic,
                partition=op.partition,
                value=_bytes_json(op.value),
                key=_bytes_json(op.key),
            )
            if isinstance(op, Produce):
                out.update(txn=op.txn)
                if op.retry_of is not None:  # absent otherwise: older traces stay as they were
                    out.update(retry_of=_bytes_json(op.retry_of))
            else:
                out.update(sequence=op.sequence, expected_offset=op.expected_offset)
                if op.seen_end is not None:  # absent otherwise: older traces stay as they were
                    out.update(seen_end=op.seen_end)
        case TxnBegin() | TxnCommit() | TxnAbort():
            out.update(txn=op.txn)
    return out


def _op_from_json(d: Mapping[str, Any]) -> Op:
    match d["f"]:
        case "produce":
            return Produce(
                d["writer"],
                d["topic"],
                d["partition"],
                _bytes_from_json(d["value"]) or b"",
                _bytes_from_json(d["key"]),
                d["txn"],
                _bytes_from_json(d.get("retry_of")),
            )
        case "cas":
            return CasAppend(
                d["writer"],
                d["topic"],
                d["partition"],
                _bytes_from_json(d["value"]) or b"",
                d["sequence"],
                d["expected_offset"],
                _bytes_from_json(d["key"]),
                d.get("seen_end"),
            )
        case "txn-begin":
            return TxnBegin(d["writer"], d["txn"])
        case "txn-commit":
            return TxnCommit(d["writer"], d["txn"])
        case "txn-abort":
            return TxnAbort(d["writer"], d["txn"])
    raise ValueError(f"unknown operation {d['f']!r} in a history trace")


def _outcome_json(outcome: Outcome) -> dict[str, Any]:
    match outcome:
        case Ok(partition=partition, offset=offset):
            return {"type": "ok", "partition": partition, "offset": offset}
        case Fail(error=error):
            return {"type": "fail", "error": error}
        case Info(error=error):
            return {"type": "info", "error": error}


def _outcome_from_json(d: Mapping[str, Any]) -> Outcome:
    match d["type"]:
        case "ok":
            return Ok(d["partition"], d["offset"])
        case "fail":
            return Fail(d["error"])
        case "info":
            return Info(d["error"])
    raise ValueError(f"unknown outcome type {d['type']!r} in a history trace")


@attrs.define(eq=False)
class History:
    """The operations of one run, in invocation order, and the events in arrival order."""

    # Owned by the workload's run: appended by invoke/complete, never reordered.
    _ops: list[Op] = attrs.field(factory=list)
    _outcomes: list[Outcome | None] = attrs.field(factory=list)
    _invoke_times: list[float | None] = attrs.field(factory=list)
    _complete_times: list[float | None] = attrs.field(factory=list)
    _events: list[Event] = attrs.field(factory=list)

    def invoke(self, op: Op, *, time: float | None = None) -> int:
        """Record that `op` starts; returns its id (invocation order, from 0)."""
        op_id = len(self._ops)
        self._ops.append(op)
        self._outcomes.append(None)
        self._invoke_times.append(time)
        self._complete_times.append(None)
        self._events.append(Event(op_id, None, time))
        return op_id

    def complete(self, op_id: int, outcome: Outcome, *, time: float | None = None) -> None:
        """Record how operation `op_id` ended. An operation completes once."""
        if not 0 <= op_id < len(self._ops):
            raise KeyError(f"no operation {op_id} in this history")
        if self._outcomes[op_id] is not None:
            raise ValueError(
                f"operation {op_id} ({op_name(self._ops[op_id])}) completed twice: "
                f"{self._outcomes[op_id]} then {outcome}"
            )
        self._outcomes[op_id] = outcome
        self._complete_times[op_id] = time
        self._events.append(Event(op_id, outcome, time))

    def __len__(self) -> int:
        return len(self._ops)

    def __getitem__(self, op_id: int) -> Operation:
        return Operation(
            op_id,
            self._ops[op_id],
            self._outcomes[op_id],
            self._invoke_times[op_id],
            self._complete_times[op_id],
        )

    def __iter__(self) -> Iterator[Operation]:
        return (self[i] for i in range(len(self._ops)))

    @property
    def events(self) -> tuple[Event, ...]:
        return tuple(self._events)

    def pending(self) -> list[Operation]:
        return [o for o in self if o.outcome is None]

    # -- the canonical trace -------------------------------------------------------------

    def trace_lines(self) -> list[str]:
        """One canonical JSON object per event (sorted keys, compact separators)."""
        lines = []
        for event in self._events:
            d: dict[str, Any]
            if event.outcome is None:
                d = {"type": "invoke", "op": _op_json(self._ops[event.op_id])}
            else:
                d = _outcome_json(event.outcome)
            d["id"] = event.op_id
            if event.time is not None:
                d["time"] = event.time
            lines.append(_canonical_json(d))
        return lines

    def trace(self) -> str:
        return "".join(line + "\n" for line in self.trace_lines())

    @classmethod
    def from_trace(cls, text: str) -> History:
        """Rebuild a history from `trace()` (regression cases keep failing histories)."""
        history = cls()
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            d = json.loads(line)
            time = d.get("time")
            if d["type"] == "invoke":
                op_id = history.invoke(_op_from_json(d["op"]), time=time)
                if op_id != d["id"]:
                    raise ValueError(f"trace line {number}: invocation {d['id']} out of order")
            else:
                history.complete(d["id"], _outcome_from_json(d), time=time)
        return history
