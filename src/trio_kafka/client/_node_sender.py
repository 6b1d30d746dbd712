"""One broker's share of the sender: `NodeSender`, its writer and reader tasks, and
the `ProduceAttempt`s (requests) it owns, in drain order (the theory of operation is in
`_sender.py`). It calls back into the sender through `SenderHost`, so this module does
not import the sender's: no import cycle.
"""

from __future__ import annotations

import collections
import logging
import math
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

import anyio
import anyio.abc
import anyio.lowlevel
import attrs

from trio_kafka.errors import BrokerConnectionError, FatalError, KafkaError
from trio_kafka.net import (
    BrokerConnection,
    Clock,
    Event,
    KafkaSelector,
    Primitives,
    TaskGroup,
)
from trio_kafka.producer import ProducerBatch, ProducerCore
from trio_kafka.protocol import ProduceAnswer, ProduceFrame, read_produce_answer

logger = logging.getLogger("trio_kafka.producer")


class SenderHost(Protocol):
    """What a node sender uses of the sender (`Sender` is one)."""

    core: ProducerCore
    selector: KafkaSelector
    clock: Clock
    nursery: TaskGroup
    primitives: Primitives

    def wake(self) -> None: ...

    def refresh_metadata(self, topics: Any = ()) -> None: ...

    def fatal(self, error: KafkaError) -> None: ...

    def write_timeout(self) -> float: ...

    def produce_request(self, batches: list[ProducerBatch], node: int) -> ProduceFrame: ...

    def settle_response(self, attempt: ProduceAttempt, response: ProduceAnswer | None) -> None: ...

    def settle_failure(self, attempt: ProduceAttempt, error: KafkaError) -> None: ...

    def settle_unsendable(self, attempt: ProduceAttempt, error: Exception) -> None: ...


@attrs.define(eq=False, slots=True)
class ProduceAttempt:
    """One ProduceRequest for one node: its batches, whether it may have left, and
    whether the core has been told how it ended."""

    node: int
    batches: list[ProducerBatch]
    #: The bytes may have reached the broker (set just before the write starts).
    sent: bool = False
    settled: bool = False


_T = TypeVar("_T")


class TaskQueue(Generic[_T]):
    """An unbounded FIFO read by one task: `put` never blocks, `get` waits for an item.

    What `trio.open_memory_channel(math.inf)` gave the node senders, on anyio's Event
    (anyio's memory streams warn when dropped unclosed, and a node sender's live as long
    as the producer). Scheduling is the channel's: `get` with an item waiting takes it,
    then yields shielded (the item is never lost to a cancellation); an empty `get` parks
    until the next `put` wakes it.
    """

    __slots__ = ("_event", "_items", "_ready")

    def __init__(self, event: Callable[[], Event] = anyio.Event) -> None:
        self._items: collections.deque[_T] = collections.deque()
        # Makes the reader's event (the backend's class: net's `primitives`).
        self._event = event
        # The waiting reader's event (None when nobody waits).
        self._ready: Event | None = None

    def put(self, item: _T) -> None:
        self._items.append(item)
        ready = self._ready
        if ready is not None:
            self._ready = None
            ready.set()

    async def get(self) -> _T:
        items = self._items
        if items:
            await anyio.lowlevel.checkpoint_if_cancelled()
            item = items.popleft()
            await anyio.lowlevel.cancel_shielded_checkpoint()
            return item
        while not items:
            ready = self._ready = self._event()
            await ready.wait()
        return items.popleft()


class NodeSender:
    """Writes one node's requests in order and reads its responses in order."""

    def __init__(self, sender: SenderHost, node_id: int) -> None:
        self.sender = sender
        self.node_id = node_id
        # The open connection we write to (None until connected; replaced on reconnect).
        self.connection: BrokerConnection | None = None
        self.connecting = False
        self.last_error: KafkaError | None = None
        # Clock time before which no new attempt starts: after a failed one, the
        # selector's backoff (else `reconnect_backoff`; never the instant it failed at),
        # so an attempt that fails at once cannot make the sender loop.
        self.retry_at = -math.inf
        # KIP-219: clock time before which nothing more is sent to this node (the broker
        # answered with throttle_time_ms and mutes the channel until then; so do we).
        self.throttled_until = -math.inf
        # Requests drained for this node, not yet settled with the core, oldest first.
        self.unsettled: collections.deque[ProduceAttempt] = collections.deque()
        # Attempts for the writer task, then (attempt, pending response) for the reader.
        event = sender.primitives.event
        self._outbox: TaskQueue[ProduceAttempt] = TaskQueue(event)
        self._written: TaskQueue[tuple[ProduceAttempt, Any]] = TaskQueue(event)

    def __repr__(self) -> str:
        return (
            f"<NodeSender node={self.node_id} ready={self.ready} unsettled={len(self.unsettled)}>"
        )

    @property
    def ready(self) -> bool:
        connection = self.connection
        return connection is not None and connection.is_open

    def throttle(self, until: float) -> None:
        """The broker asked for a pause (a response's throttle_time_ms, KIP-219)."""
        if until > self.throttled_until:
            logger.debug(
                "node %s throttles us for %.3f s", self.node_id, until - self.sender.clock.now()
            )
            self.throttled_until = until

    def start(self, nursery: TaskGroup) -> None:
        nursery.start_soon(self._writer, name=f"kafka-produce-writer-{self.node_id}")
        nursery.start_soon(self._reader, name=f"kafka-produce-reader-{self.node_id}")

    def connect(self, now: float) -> float:
        """Start opening the node's connection in the background (one attempt at a time,
        none before `retry_at`). Returns the clock time by which the sender must look
        again if nothing wakes it: inf while an attempt runs (its end wakes the sender),
        else `retry_at`."""
        if self.connecting:
            return math.inf
        if now < self.retry_at and not self.sender.selector.is_ready(self.node_id):
            return self.retry_at  # (someone else's attempt may have opened it meanwhile)
        self.connecting = True
        self.sender.nursery.start_soon(self._connect)
        return math.inf

    async def _connect(self) -> None:
        sender = self.sender
        try:
            self.connection = await sender.selector.connection(self.node_id)
            self.last_error = None
        except KafkaError as exc:
            self.last_error = exc
            now = sender.clock.now()
            retry_at = sender.selector.retry_at(self.node_id)
            if retry_at <= now:  # the selector set no backoff (closed, or none configured)
                retry_at = now + sender.core.config.reconnect_backoff
            self.retry_at = max(retry_at, math.nextafter(now, math.inf))
            logger.debug("connecting to node %s failed: %s", self.node_id, exc)
            if isinstance(exc, FatalError):
                self.sender.fatal(exc)
            else:
                # We connect only to lead partitions with batches ready, and a leader we
                # cannot reach may be dead: ask who leads now (Java's NetworkClient
                # requests a metadata update on every disconnect), or the batches wait
                # for this node until delivery_timeout, however soon the cluster elects
                # another. The sender rate-limits refreshes (one per retry_backoff), and
                # the node's reconnect backoff spaces the failures that ask.
                sender.refresh_metadata()
        finally:
            self.connecting = False
            self.sender.wake()

    def submit(self, batches: list[ProducerBatch]) -> None:
        attempt = ProduceAttempt(self.node_id, batches)
        self.unsettled.append(attempt)
        self._outbox.put(attempt)

    async def _writer(self) -> None:
        sender = self.sender
        while True:
            attempt = await self._outbox.get()
            if attempt.settled:
                continue
            try:
                connection = self.connection
                if connection is None or not connection.is_open:
                    connection = self.connection = await sender.selector.connection(self.node_id)
            except KafkaError as exc:
                # BrokerConnectionError: refused before registration, nothing written.
                attempt.sent = not isinstance(exc, BrokerConnectionError)
                sender.settle_failure(attempt, exc)
                continue
            try:
                # Built once connected: the broker's ApiVersions shape the batches.
                request = sender.produce_request(attempt.batches, self.node_id)
            except Exception as exc:  # a record the codec cannot encode: not sendable
                sender.settle_unsendable(attempt, exc)
                continue
            try:
                attempt.sent = True
                pending = await connection.send(
                    request, timeout=sender.write_timeout(), reader=read_produce_answer
                )
            except KafkaError as exc:
                # BrokerConnectionError: refused before registration, nothing written.
                attempt.sent = not isinstance(exc, BrokerConnectionError)
                sender.settle_failure(attempt, exc)
                continue
            self._written.put((attempt, pending))

    async def _reader(self) -> None:
        sender = self.sender
        while True:
            attempt, pending = await self._written.get()
            try:
                response = await pending.wait()
            except KafkaError as exc:
                sender.settle_failure(attempt, exc)
            else:
                sender.settle_response(attempt, response)

    def settle_all(self, error: KafkaError) -> None:
        """Closing: tell the core how every unsettled request ended (without waiting)."""
        while self.unsettled:
            attempt = self.unsettled[0]
            self.sender.settle_failure(attempt, error)


__all__ = ["NodeSender", "ProduceAttempt", "SenderHost", "TaskQueue"]
