"""The blocking producer's loop side: the pump, one lane per topic, calls, close.

Runs in the thread `_sync_portal.LoopThread` starts (anyio's blocking portal), inside
`open_producer()`; it is the only code that touches the async producer. What it shares
with calling threads goes through the `Ledger` (`_sync_ledger.py`). See `trio_kafka.sync` for the whole picture.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import inspect
import math
import time
from collections.abc import Callable, Iterable
from typing import Any

import anyio
import anyio.abc

from trio_kafka._sync_ledger import DeliveryFuture, Item, Kind, Ledger, SendArgs
from trio_kafka._sync_portal import LoopThread
from trio_kafka.client import Producer as AsyncProducer
from trio_kafka.client import open_producer
from trio_kafka.errors import (
    AmbiguousError,
    BrokerConnectionError,
    BufferFullError,
    KafkaError,
    ProducerClosedError,
    UnknownTopicError,
)

#: A topic's records waiting for its lane: (send()'s arguments, the future, when the pump
#: took it, on the loop's clock).
_Lane = collections.deque[tuple[SendArgs, DeliveryFuture, float]]

#: What producer.send() raises once it has waited `max_block` (for the topic's metadata,
#: or for buffer memory): every record queued behind it has waited as long, and fails
#: with it rather than waiting a `max_block` of its own after it (Java's callers each
#: block `max.block.ms` from their own send).
_WAITED_OUT = (UnknownTopicError, BrokerConnectionError, BufferFullError)


#: How many appended records a lane counts before telling the ledger (one lock per that
#: many records, not one per record).
_TELL_EVERY = 256


class _BatchFutures:
    """The futures of one batch's records, settled by one done-hook on the batch (not
    one closure per record). Lives in `Runner._batches` until the batch is done."""

    __slots__ = ("batches", "entries", "ledger")

    def __init__(self, ledger: Ledger, batches: dict[Any, _BatchFutures]) -> None:
        self.ledger = ledger
        self.batches = batches
        # (the record's index in the batch, its future), in append order.
        self.entries: list[tuple[int, DeliveryFuture]] = []

    def __call__(self, batch: Any) -> None:
        del self.batches[batch]
        self.ledger.settle_batch(batch, self.entries)


class Runner:
    """The loop side of one blocking producer (all of its state is the loop thread's)."""

    def __init__(
        self, ledger: Ledger, bootstrap: str | Iterable[str] | None, options: dict[str, Any]
    ) -> None:
        self._ledger = ledger
        self._bootstrap = bootstrap
        self._options = options
        # topic -> the records waiting for their lane task to send them, in order; the
        # key None is the shared lane, for topics whose metadata is known (see `_route`).
        self._lanes: dict[str | None, _Lane] = {}
        # topic -> its records in the shared lane (a topic's records are in one lane).
        self._shared: dict[str, int] = {}
        # A batch (of the async producer) -> the futures of its records, until it is done.
        self._batches: dict[Any, _BatchFutures] = {}
        # topic (None: the shared lane) -> the cancel scope of its lane task (close
        # cancels what still waits).
        self._lane_scopes: dict[str | None, anyio.CancelScope] = {}
        # Replaced and set each time a lane ends (what "wait until the lanes are idle"
        # waits on).
        self._lane_ended: anyio.Event | None = None
        # Where lanes and flush tasks run (set once the producer is open; close cancels it).
        self._lane_nursery: anyio.abc.TaskGroup | None = None
        # The running CALL's scope, and the close deadline (loop time) once close began:
        # close bounds a call by its own deadline.
        self._call_scope: anyio.CancelScope | None = None
        self._close_deadline: float | None = None

    async def main(self, portal: LoopThread[Item]) -> None:
        async with (
            open_producer(self._bootstrap, **self._options) as producer,
            anyio.create_task_group() as lanes,
        ):
            self._lane_nursery = lanes
            self._lane_ended = anyio.Event()
            portal.started()
            deadline = await self._pump(portal, producer)
            await self._close(producer, deadline)
        self._ledger.final_metrics = producer.metrics()

    async def _pump(self, portal: LoopThread[Item], producer: AsyncProducer) -> float:
        """Take items in order until CLOSE; returns its deadline (time.monotonic())."""
        lanes = self._lanes
        while True:
            items = await portal.take()
            now = anyio.current_time()
            for position, (kind, payload, future) in enumerate(items):
                match kind:
                    case Kind.SEND:
                        topic = payload[0]
                        if topic.__class__ is not str:
                            topic = topic.topic
                        key = topic if topic in lanes else self._route(producer, topic)
                        lane = lanes.get(key)
                        if lane is None:
                            lane = lanes[key] = collections.deque()
                            self._start_lane(producer, key, lane)
                        lane.append((payload, future, now))  # type: ignore[arg-type]
                    case Kind.FLUSH:
                        assert self._lane_nursery is not None
                        self._lane_nursery.start_soon(self._flush, producer, payload)
                    case Kind.CALL:
                        assert future is not None
                        await self._run_call(producer, payload, future)
                    case Kind.CLOSE:
                        for rest in items[position + 1 :]:  # nothing follows CLOSE; if
                            self._ledger.abandon(rest)  # something did, it is answered
                        return float(payload)

    def _route(self, producer: AsyncProducer, topic: str) -> str | None:
        """The lane for a record of `topic`, which has no lane of its own: the shared
        lane (None) when its metadata is known (its send will not wait for it, so it
        holds back no other topic) or it has records there already (order), else a lane
        of its own. One lane for every known topic: with records round robin over
        thousands of topics, a lane of each would start a task for nearly every record."""
        shared = self._shared
        if topic not in shared:
            found = producer.selector.metadata.topic(topic)
            if found is None or not found.is_usable:
                return topic
            shared[topic] = 0
        shared[topic] += 1
        return None

    def _start_lane(
        self,
        producer: AsyncProducer,
        topic: str | None,
        lane: _Lane,
    ) -> None:
        scope = anyio.CancelScope()
        self._lane_scopes[topic] = scope
        assert self._lane_nursery is not None
        self._lane_nursery.start_soon(self._lane, producer, topic, lane, scope)

    async def _lane(
        self,
        producer: AsyncProducer,
        key: str | None,
        lane: _Lane,
        scope: anyio.CancelScope,
    ) -> None:
        """Send one topic's records (key None: the shared lane's) in order until none is
        left."""
        ledger = self._ledger
        batches = self._batches
        shared = self._shared if key is None else None
        send = producer.send
        handed = 0  # records appended or refused, not yet told to the ledger
        try:
            with scope:
                while lane:
                    if shared is not None and self._hand_over(producer, lane):
                        continue
                    args, future, _ = lane.popleft()
                    if shared is not None:
                        self._forget_shared(_topic_of(args))
                    handed += 1
                    if handed == _TELL_EVERY:
                        ledger.appended(handed)
                        handed = 0
                    try:
                        handle = await send(
                            args[0],
                            args[1],
                            key=args[2],
                            headers=args[3],
                            partition=args[4],
                            timestamp=args[5],
                        )
                    except _WAITED_OUT as exc:
                        ledger.refused(future, args, exc)
                        # Those queued behind it that have waited max_block too (in the
                        # shared lane other topics' records: only for the buffer, which
                        # they all wait for).
                        cutoff = anyio.current_time() - producer.config.max_block
                        while (
                            (shared is None or isinstance(exc, BufferFullError))
                            and lane
                            and lane[0][2] <= cutoff
                        ):
                            args, future, _ = lane.popleft()
                            if shared is not None:
                                self._forget_shared(_topic_of(args))
                            ledger.refused(future, args, exc)
                            handed += 1
                    except Exception as exc:  # KafkaError, TypeError, a serializer's error
                        ledger.refused(future, args, exc)
                    except BaseException:  # cancelled at close, inside producer.send()
                        error = self._cancelled_error(producer, _topic_of(args))
                        ledger.refused(future, args, error)
                        raise
                    else:
                        batch = handle.batch
                        waiting = batches.get(batch)
                        if waiting is None:
                            waiting = batches[batch] = _BatchFutures(ledger, batches)
                            waiting.entries.append((handle.index, future))
                            batch.add_done_hook(waiting)  # at once if it is done already
                        else:
                            waiting.entries.append((handle.index, future))
        finally:
            # Cancelled at close: the records still queued were never handed over.
            while lane:
                args, future, _ = lane.popleft()
                error = ProducerClosedError(
                    "the producer closed before this record was appended (it was waiting "
                    f"for topic {_topic_of(args)!r} to be sendable); it was not written"
                )
                ledger.refused(future, args, error)
                handed += 1
            if shared is not None:
                shared.clear()
            ledger.appended(handed)
            del self._lanes[key]
            del self._lane_scopes[key]
            ended, self._lane_ended = self._lane_ended, anyio.Event()
            assert ended is not None
            ended.set()

    def _hand_over(self, producer: AsyncProducer, lane: _Lane) -> bool:
        """The shared lane's next record is of a topic whose metadata is gone (a topic
        deleted, a broker that no longer knows it): its send would wait, holding back
        every other topic. Move that topic's records, in order, to a lane of its own;
        True if it did."""
        topic = _topic_of(lane[0][0])
        found = producer.selector.metadata.topic(topic)
        if found is not None and found.is_usable:
            return False
        mine = collections.deque(entry for entry in lane if _topic_of(entry[0]) == topic)
        others = [entry for entry in lane if _topic_of(entry[0]) != topic]
        lane.clear()
        lane.extend(others)
        del self._shared[topic]
        self._lanes[topic] = mine
        self._start_lane(producer, topic, mine)
        return True

    def _forget_shared(self, topic: str) -> None:
        """One record of `topic` left the shared lane."""
        if self._shared[topic] == 1:
            del self._shared[topic]
        else:
            self._shared[topic] -= 1

    def _cancelled_error(self, producer: AsyncProducer, topic: str) -> KafkaError:
        """The error for a record whose producer.send() was cancelled at close. Without
        metadata for its topic it cannot have been appended (send() waits for that
        before appending); with it, the cancel may have come just after the append."""
        found = producer.selector.metadata.topic(topic)
        if found is None or not found.is_usable:
            return ProducerClosedError(
                f"the producer closed while this record waited for the metadata of topic "
                f"{topic!r}; it was not written"
            )
        return AmbiguousError(
            "the producer closed while this record was being appended; it may have been written"
        )

    async def _lanes_idle(self) -> None:
        while self._lanes:
            assert self._lane_ended is not None
            await self._lane_ended.wait()

    async def _flush_everything(self, producer: AsyncProducer) -> None:
        """Until every record handed over is appended and settled."""
        while True:
            await self._lanes_idle()
            await producer.flush()
            if not self._lanes:
                return

    async def _flush(self, producer: AsyncProducer, deadline: float) -> None:
        with anyio.CancelScope(deadline=_loop_deadline(deadline)):
            await self._flush_everything(producer)

    async def _run_call(
        self,
        producer: AsyncProducer,
        payload: tuple[Callable[[AsyncProducer], Any], bool],
        future: concurrent.futures.Future[Any],
    ) -> None:
        fn, ordered = payload
        with anyio.CancelScope() as scope:
            self._call_scope = scope
            if self._close_deadline is not None:
                scope.deadline = self._close_deadline
            try:
                if ordered:
                    await self._lanes_idle()
                result = fn(producer)
                if inspect.isawaitable(result):
                    result = await result
            except Exception as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)
            finally:
                self._call_scope = None
        if scope.cancelled_caught:
            future.set_exception(
                ProducerClosedError(
                    "the producer was closed (its deadline passed) during this call"
                )
            )

    def hurry(self, deadline: float) -> None:
        """close() began: bound a running call by close's deadline."""
        self._close_deadline = _loop_deadline(deadline)
        if self._call_scope is not None:
            self._call_scope.deadline = min(self._call_scope.deadline, self._close_deadline)

    async def _close(self, producer: AsyncProducer, deadline: float) -> None:
        loop_deadline = _loop_deadline(deadline)
        with anyio.CancelScope(deadline=loop_deadline):
            await self._flush_everything(producer)
        # Every lane still busy is inside producer.send(): aclose() refuses those
        # waiting for buffer memory; those waiting for metadata are cancelled after it.
        await producer.aclose(max(loop_deadline - anyio.current_time(), 0.0))
        for scope in self._lane_scopes.values():
            scope.cancel()
        assert self._lane_nursery is not None
        self._lane_nursery.cancel_scope.cancel()


async def enter_transaction(producer: AsyncProducer) -> Any:
    manager = producer.transaction()
    await manager.__aenter__()
    return manager


async def exit_transaction(
    manager: contextlib.AbstractAsyncContextManager[None],
    exc: BaseException | None,
    _producer: AsyncProducer,
) -> None:
    """Commit (exc None) or abort and re-raise, as the async `transaction()` does."""
    if exc is None:
        await manager.__aexit__(None, None, None)
    else:
        await manager.__aexit__(type(exc), exc, exc.__traceback__)


def _topic_of(args: SendArgs) -> str:
    topic = args[0]
    return topic if topic.__class__ is str else topic.topic


def _loop_deadline(deadline: float) -> float:
    """A time.monotonic() deadline on the running loop's clock."""
    if deadline == math.inf:
        return math.inf
    return anyio.current_time() + (deadline - time.monotonic())


__all__ = ["Runner", "enter_transaction", "exit_transaction"]
