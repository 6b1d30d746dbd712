"""`DeliveryHandle`: one record's delivery, a (batch, index) pair.

Completion is per batch: a handle asks its batch for its outcome when asked, so
acknowledging a batch of 1,000 records is one update, not 1,000.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trio_kafka.producer._record import Acknowledged, Ambiguous, Failed, Outcome

if TYPE_CHECKING:
    from trio_kafka.producer._batch import ProducerBatch


class DeliveryHandle:
    """One record's delivery: its batch and its index in it.

    `done()`, `outcome`, `result()` and `add_done_callback(fn)`; the trio driver adds
    `await` on top through `batch.add_done_hook`.
    """

    __slots__ = ("batch", "index")

    def __init__(self, batch: ProducerBatch, index: int) -> None:
        self.batch = batch
        self.index = index

    def __repr__(self) -> str:
        batch, index = self.batch.located(self.index)
        if batch.partition < 0:  # kept until its topic's metadata comes
            where = f"{batch.topic}#{index} (waiting for the topic's metadata)"
        else:
            where = f"{batch.topic}-{batch.partition}#{index}"
        outcome = self.outcome
        if outcome is None:
            state = "pending"
        elif isinstance(outcome, Acknowledged):
            state = f"acknowledged offset={outcome.offset}"
        else:
            kind = "failed" if isinstance(outcome, Failed) else "ambiguous"
            state = f"{kind} {type(outcome.error).__name__}: {outcome.error}"
        return f"<{type(self).__name__} {where} {state}>"

    def done(self) -> bool:
        return self.batch.result is not None

    @property
    def outcome(self) -> Outcome | None:
        """The typed outcome, or None while the record is not settled."""
        return self.batch.outcome(self.index)

    def result(self) -> Acknowledged:
        """The acknowledgement; raises the error if the record failed or is ambiguous,
        and `RuntimeError` if it is not settled yet."""
        outcome = self.batch.outcome(self.index)
        match outcome:
            case None:
                raise RuntimeError("the record's delivery is not settled yet")
            case Acknowledged():
                return outcome
            case Failed(error=error) | Ambiguous(error=error):
                raise error

    def add_done_callback(self, fn: Callable[[DeliveryHandle], Any]) -> None:
        """Call `fn(handle)` once the record is settled (at once if it already is)."""
        self.batch.add_done_hook(lambda _batch: fn(self))
