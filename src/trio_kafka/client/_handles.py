"""Delivery handles as the async user sees them: the core's handle plus `await`.

The core (`trio_kafka.core`) hands back a `DeliveryHandle` (a batch and an index)
for every record; it knows nothing of event loops. `RecordHandle` is the same object with
`__await__` added: the core makes its handles of this class (the accumulator's
`handle_class`), because a wrapper would be one more allocation on the per-record path.
Like `DeliveryHandle`, it is a msgspec struct the garbage collector does not track.

Waiting is per batch: the first awaiter of a batch registers one done-hook that sets an
event; later awaiters of the same batch share it (`_BatchWaiter`), so awaiting the
1,000 handles of one batch costs one hook, not 1,000.

Awaiting a handle that is already done does not go through the scheduler every time: a
trio checkpoint costs ~6 us, more than the rest of a record's path, and the way the
README teaches (send everything, then `await` each handle) awaits mostly done handles.
Like `send()`, it checkpoints once every `AWAIT_CHECKPOINT_EVERY` (256) awaits instead
(a counter shared by the process), so a loop over done handles still lets other tasks
run and still sees a cancellation, within that many awaits: at ~0.3 us an await, within
~0.1 ms, as `send()` does (`SEND_CHECKPOINT_EVERY`): a trio checkpoint costs ~4-6 us
of CPU, ~0.1 us per record at 64. That checkpoint is
`anyio.lowlevel.checkpoint` (trio's or asyncio's, looked up then): the other 255 awaits
make no anyio call at all, on either backend.

Cancellation (trio's or asyncio's `task.cancel()`) only ever interrupts the wait: the
record stays in its batch, is delivered or fails as if nobody had waited, and the handle
can be awaited again (or read with `done()` / `outcome`) for its fate.

`BulkDelivery` is what `send_many` returns: the spans of batches its records went to,
awaitable as a whole, with per-record handles only when asked for.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from typing import Any

import anyio
import anyio.lowlevel

from trio_kafka.core import (
    Acknowledged,
    Ambiguous,
    BatchSpan,
    DeliveryHandle,
    Failed,
    Outcome,
    ProducerBatch,
    Result,
)
from trio_kafka.errors import KafkaError
from trio_kafka.net import primitives

# `await handle` on a done handle checkpoints once per this many awaits (a power of two:
# the test is a mask), as send() does; see the module doc.
AWAIT_CHECKPOINT_EVERY = 256
_AWAIT_MASK = AWAIT_CHECKPOINT_EVERY - 1
_checkpoint = anyio.lowlevel.checkpoint
_new_tuple = tuple.__new__
# Awaits of done handles so far (the counter behind the mask); any task may bump it.
_done_awaits = 0


class _BatchWaiter:
    """One event per awaited batch (shared by every awaiter of that batch), of the
    backend's own class (net's `primitives`)."""

    __slots__ = ("event",)

    def __init__(self) -> None:
        self.event = primitives().event()

    def __call__(self, _batch: ProducerBatch) -> None:
        self.event.set()


async def wait_batch(batch: ProducerBatch) -> None:
    """Return once `batch` has a final result (checkpoints either way)."""
    if batch.result is not None:
        await _checkpoint()
        return
    waiter = next((h for h in batch.hooks or () if isinstance(h, _BatchWaiter)), None)
    if waiter is None:
        waiter = _BatchWaiter()
        batch.add_done_hook(waiter)
    await waiter.event.wait()


class RecordHandle(DeliveryHandle, frozen=True, gc=False):
    """One record's delivery: `await handle` returns `Acknowledged` or raises the error
    (a `KafkaError`; an `AmbiguousError` when the record may have been written).

    Also `done()`, `outcome`, `result()` (non-blocking), `add_done_callback(fn)` and
    `succeeded()`.

    Waiting and cancellation: awaiting a pending handle waits for its batch and is a
    normal checkpoint (cancellable, under trio or asyncio; a cancelled wait leaves the
    record alone, it is still delivered and the handle can be awaited again). Awaiting a handle that is
    already done returns its outcome without a trip through the scheduler, except every
    `AWAIT_CHECKPOINT_EVERY` (256) awaits, when it checkpoints: the trade-off `send()`
    makes too (every 256th call). A loop over many done handles is then cheap per record and
    still yields to other tasks and sees a cancellation within 256 awaits; a single await
    of a done handle may return without noticing a pending cancellation.
    """

    def __await__(self) -> Generator[Any, None, Acknowledged]:
        global _done_awaits
        batch = self.batch
        times = batch.ack_times
        if times is not None:
            # The common case (the README's loop over done handles): the batch was
            # acknowledged whole and holds every record's timestamp
            # (`ProducerBatch.ack_times`): the outcome is built from four slots here.
            _done_awaits += 1
            if not _done_awaits & _AWAIT_MASK:
                yield from _checkpoint().__await__()
            index = self.index
            return _new_tuple(
                Acknowledged,
                (batch.topic, batch.partition, batch.base_offset + index, times[index]),
            )
        if batch.result is None:
            yield from wait_batch(batch).__await__()
        else:
            _done_awaits += 1
            if not _done_awaits & _AWAIT_MASK:
                yield from _checkpoint().__await__()
        outcome = batch.outcome(self.index)
        if outcome.__class__ is Acknowledged:
            return outcome
        return self.result()  # raises the error

    async def wait(self) -> Acknowledged:
        """The same as `await handle`."""
        return await self

    def succeeded(self) -> bool:
        """True once the record is acknowledged (False while pending or on error)."""
        batch = self.batch
        if batch.result is not Result.ACKNOWLEDGED:
            return False
        errors = batch.record_errors
        return not errors or self.index not in errors

    @property
    def offset(self) -> int:
        """The acknowledged offset (-1 when unknown or not acknowledged)."""
        outcome = self.batch.outcome(self.index)
        return outcome.offset if isinstance(outcome, Acknowledged) else -1


class BulkDelivery:
    """The records one `send_many` call appended, as spans of batches.

    `await bulk` waits for all of them and returns how many were acknowledged; it raises
    the first error (in send order) if any record failed or is ambiguous. `outcomes()`
    and `handles()` give per-record detail once done; `done()` never blocks.
    """

    __slots__ = ("spans",)

    def __init__(self, spans: Sequence[BatchSpan]) -> None:
        self.spans = list(spans)

    def __len__(self) -> int:
        return sum(stop - start for _, start, stop in self.spans)

    def __repr__(self) -> str:
        return f"<BulkDelivery records={len(self)} batches={len(self.spans)} done={self.done()}>"

    def done(self) -> bool:
        return all(span.batch.result is not None for span in self.spans)

    def handles(self) -> list[RecordHandle]:
        return [RecordHandle(b, i) for b, start, stop in self.spans for i in range(start, stop)]

    def outcomes(self) -> Iterator[Outcome | None]:
        for batch, start, stop in self.spans:
            for index in range(start, stop):
                yield batch.outcome(index)

    def first_error(self) -> KafkaError | None:
        for batch, start, stop in self.spans:
            if batch.result is None or batch.error is None:
                continue
            for index in range(start, stop):
                outcome = batch.outcome(index)
                if isinstance(outcome, Failed | Ambiguous):
                    return outcome.error
        return None

    def __await__(self) -> Generator[Any, None, int]:
        return self.wait().__await__()

    async def wait(self) -> int:
        for span in self.spans:
            if span.batch.result is None:
                await wait_batch(span.batch)
        await _checkpoint()
        error = self.first_error()
        if error is not None:
            raise error
        return len(self)
