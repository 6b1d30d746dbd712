"""What the blocking producer's calling threads and its trio thread share.

`Ledger` holds the one lock and the counts under it (records pending, records handed
over and not yet appended, closed); every change to them goes through its methods, from
either side. `DeliveryFuture` is the per-record future both sides see; `Item` is what
crosses the bridge (`_sync_portal.py`). See `trio_kafka.sync` for the whole picture.
"""

from __future__ import annotations

import concurrent.futures
import enum
import os
import threading
from typing import Any

from trio_kafka.client import (
    Acknowledged,
    Ambiguous,
    Failed,
    MetricsSnapshot,
    Outcome,
    ProducerRecord,
)
from trio_kafka.errors import AmbiguousError, KafkaError, ProducerClosedError

#: Records handed to the trio thread and not yet in the producer's buffer (appended or
#: refused). Past this, `send()` waits (up to `max_block`): memory stays bounded.
MAX_UNAPPENDED = 65536


class DeliveryFuture(concurrent.futures.Future[Acknowledged]):
    """One record's delivery, a `concurrent.futures.Future`: `result(timeout)` returns
    `Acknowledged` or raises the error (an `AmbiguousError` when the record may have
    been written); `done()`, `exception(timeout)`, `add_done_callback(fn)`; and
    `outcome`, the typed `Acknowledged` / `Failed` / `Ambiguous` (None while pending).

    Callbacks run in the producer's thread: keep them short, and do not call the
    producer's blocking methods (`flush`, `close`, transactions) from them. A record
    cannot be taken back: `cancel()` returns False.
    """

    # The typed outcome once settled (None while pending, and for an error raised by
    # your own code, such as a serializer's, which only `exception()` carries).
    _outcome: Outcome | None = None

    @property
    def outcome(self) -> Outcome | None:
        return self._outcome

    def cancel(self) -> bool:
        return False

    def __repr__(self) -> str:
        if not self.done():
            return "<DeliveryFuture pending>"
        return f"<DeliveryFuture {self._outcome or self.exception(0)!r}>"


class Kind(enum.Enum):
    SEND = "send"  # payload: SendArgs; future: the record's DeliveryFuture
    FLUSH = "flush"  # payload: the deadline (time.monotonic()); no future
    CALL = "call"  # payload: (fn(producer), ordered); future: its result
    CLOSE = "close"  # payload: the deadline (time.monotonic()); no future


#: What crosses the bridge: (kind, payload, future).
Item = tuple[Kind, Any, "concurrent.futures.Future[Any] | None"]
#: send()'s arguments: topic (or a ProducerRecord), value, key, headers, partition,
#: timestamp.
SendArgs = tuple[Any, Any, Any, Any, Any, Any]


class Ledger:
    """The lock and the counts both sides share (each field says who changes it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # Notified when `pending` reaches 0, when `unappended` falls below the limit,
        # and at close: wakes flush() and blocked send()s.
        self.changed = threading.Condition(self.lock)
        # Set by the first close() (calling side): sends, flushes, calls are refused.
        self.closed = False
        # Futures send() handed out and not settled yet: +1 in send(), -1 in settle().
        self.pending = 0
        # Records handed over and not yet appended to (or refused by) the producer:
        # +1 in send(), -1 in appended() (the trio side, or abandon()).
        self.unappended = 0
        # The producer's metrics as it closed (the trio side, at the end of its run).
        self.final_metrics: MetricsSnapshot | None = None
        # In a forked child: the pid of the process that created the producer (whose
        # thread and connections did not come along). None in that process itself.
        self.forked_from: int | None = None
        # Why it closed, when not by a close() call of the program's own (the calling
        # side, before `closed` is set): e.g. "on SIGTERM".
        self.closed_by: str | None = None

    def after_fork(self, parent: int) -> None:
        """In a forked child (the only thread, right after the fork): the producer is
        closed here. A fresh lock: a thread of the parent may have held the old one."""
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.closed = True
        self.forked_from = parent

    def closed_error(self) -> ProducerClosedError:
        """What a call on a closed producer raises."""
        if self.forked_from is None:
            by = f" ({self.closed_by})" if self.closed_by else ""
            return ProducerClosedError(
                f"the producer is closed{by}; nothing more can be sent with it"
            )
        return ProducerClosedError(
            f"this Producer was created in process {self.forked_from} and this process "
            f"({os.getpid()}) is a fork of it: the producer's thread and connections stayed "
            "in the parent, so it cannot send here. Create a new Producer in the child, "
            "after the fork (on first use, or in a post-fork hook such as gunicorn's "
            "post_fork); the parent's producer is unaffected"
        )

    def settle(
        self, future: DeliveryFuture, outcome: Outcome | None, error: BaseException | None
    ) -> None:
        """Any thread: give `future` its final state (its callbacks run here, outside
        the lock), and count it settled."""
        future._outcome = outcome
        if error is None:
            future.set_result(outcome)  # type: ignore[arg-type]
        else:
            future.set_exception(error)
        with self.lock:
            self.pending -= 1
            if not self.pending:
                self.changed.notify_all()

    def refused(self, future: DeliveryFuture, args: SendArgs, error: BaseException) -> None:
        """The record never reached the producer's buffer (or may have, for an
        `AmbiguousError`): settle it with `error`."""
        topic, partition = args[0], args[4]
        if isinstance(topic, ProducerRecord):
            topic, partition = topic.topic, topic.partition
        partition = -1 if partition is None else partition
        outcome: Outcome | None = None
        if isinstance(error, AmbiguousError):
            outcome = Ambiguous(topic, partition, error)
        elif isinstance(error, KafkaError):
            outcome = Failed(topic, partition, error)
        self.settle(future, outcome, error)

    def settle_batch(self, batch: Any, entries: list[tuple[int, DeliveryFuture]]) -> None:
        """The trio thread: `batch` (the async producer's) is done; settle the futures
        of its records (`entries`: index in the batch, future)."""
        for index, future in entries:
            outcome = batch.outcome(index)
            future._outcome = outcome
            if outcome.__class__ is Acknowledged:
                future.set_result(outcome)
            else:
                future.set_exception(outcome.error)
        with self.lock:
            self.pending -= len(entries)
            if not self.pending:
                self.changed.notify_all()

    def appended(self, count: int = 1) -> None:
        """`count` records handed over have been appended or refused."""
        if not count:
            return
        with self.lock:
            before = self.unappended
            self.unappended = before - count
            if before >= MAX_UNAPPENDED > self.unappended:
                self.changed.notify_all()

    def abandon(self, item: Item) -> None:
        """The trio run ended with `item` still queued: answer it."""
        kind, payload, future = item
        error = ProducerClosedError("the producer closed before this was handed to it")
        if kind is Kind.SEND:
            assert isinstance(future, DeliveryFuture)
            self.refused(future, payload, error)
            self.appended()
        elif future is not None and not future.done():
            future.set_exception(error)


__all__ = ["MAX_UNAPPENDED", "DeliveryFuture", "Item", "Kind", "Ledger", "SendArgs"]
