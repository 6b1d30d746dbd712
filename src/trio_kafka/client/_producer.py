"""`open_producer()` and `Producer`: the idempotent producer for trio and asyncio.

Theory of operation
-------------------
`Producer` is the user-facing half: `send()` appends to the core's accumulator and
returns a `RecordHandle` at once; the `Sender` task (`_sender.py`) does all I/O. The hot
path of `send()` is a core append and a counter, with no anyio call: it yields to the
event loop only every 64 calls (DESIGN.md: a checkpoint per call caps at ~215k calls/s
on trio), through the backend's own checkpoint looked up once at open, or when it must
wait (buffer full, topic metadata). That checkpoint comes before the append, so a
cancelled `send()` (trio, or asyncio's `task.cancel()`) has appended nothing: a record
is either in the buffer with its handle returned, or not sent at all. It wakes the
sender only when the append opened a new batch (handle index 0), so waking costs once
per batch.

Waiting (flush, close, a send blocked on `buffer_memory`) is on `_progress`, an Event
replaced each time batches reach a final state.

Closing (`aclose()`, or leaving `async with open_producer(...)`): abort an open
transaction, stop lingering, wait up to `close_timeout` for every batch to settle, then
settle the rest without waiting: requests still out become Ambiguous (they may have been
written), queued batches fail with `ProducerClosedError`; then the tasks are cancelled.
The tasks run in a nursery of their own (`_task_nursery`), so `aclose()` inside the
block closes the producer without cancelling the block. Leaving the block with an
exception closes with a zero timeout. Nothing waits on the network past the timeout.

Files: this one (the record path: `send()` and its slow path, the wait for room),
`_pending.py` (the queue of records whose topic's metadata has not come, placed in call
order), `_send_many.py` (`send_many`), `_cas_send.py` (`send(..., expected_offset=)`),
`_closing.py` (`flush`, `aclose`), `_txn_calls.py` (the transactional calls), each a
mixin of `Producer` on `ProducerBase` (`_producer_base.py`), which declares once what
they use of it; `_open.py` (`open_producer`).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import attrs

from trio_kafka.client._cas_send import ConditionalSendMixin
from trio_kafka.client._checks import (
    check_extras,
    check_interceptor_result,
    check_types,
    checked_partitioner,
    record_fields,
)
from trio_kafka.client._closing import ClosingMixin
from trio_kafka.client._handles import BulkDelivery, RecordHandle
from trio_kafka.client._pending import PendingTopicsMixin
from trio_kafka.client._send_many import SendManyMixin, merge_spans
from trio_kafka.client._sender import Sender, logger
from trio_kafka.client._telemetry import telemetry_for
from trio_kafka.client._topic_calls import TopicCallsMixin
from trio_kafka.client._transactions import transaction_driver
from trio_kafka.client._txn_calls import TransactionalProducerMixin
from trio_kafka.errors import (
    BufferFullError,
    KafkaError,
    ProducerClosedError,
)
from trio_kafka.net import (
    Clock,
    KafkaSelector,
    LoopClock,
    TaskGroup,
    checkpoint_function,
    loop_time,
)
from trio_kafka.producer import (
    BatchSpan,
    BufferFullStrategy,
    DeliveryHandle,
    Headers,
    MetricsSnapshot,
    ProducerBatch,
    ProducerConfig,
    ProducerCore,
    ProducerRecord,
    UnknownTopicError,
)

# send() checkpoints once per this many calls (a power of two: the test is a mask).
_CHECKPOINT_EVERY = 64
_CHECKPOINT_MASK = _CHECKPOINT_EVERY - 1


class Producer(
    SendManyMixin,
    ConditionalSendMixin,
    PendingTopicsMixin,
    TopicCallsMixin,
    ClosingMixin,
    TransactionalProducerMixin,
):
    """Created by `open_producer()`; see the module doc."""

    def __init__(
        self,
        config: ProducerConfig,
        selector: KafkaSelector,
        clock: Clock,
        rng: random.Random,
        wall_offset: float,
        nursery: TaskGroup,
        buggify: Callable[[str], bool] | None = None,
    ) -> None:
        self.config = config
        self.selector = selector
        self._clock = clock
        self._now = _fast_now(clock)
        # The running backend's checkpoint, looked up once (no anyio dispatch per send).
        self._checkpoint = checkpoint_function()
        self._nursery = nursery
        # Transactions (client/_transactions.py): None unless transactional_id is set.
        self._txn = transaction_driver(config)
        core_config = config
        if callable(config.partitioner):
            core_config = attrs.evolve(config, partitioner=checked_partitioner(config.partitioner))
        self._core = ProducerCore(
            core_config,
            rng,
            wall_offset=wall_offset,
            sequencing=None if self._txn is None else self._txn.sequencer,
            handle_class=RecordHandle,  # made as RecordHandles: no class swap per send
        )
        self._append = self._core.append
        self._append_value = self._core.accumulator.append_value
        self._sender = Sender(
            self._core, selector, clock, nursery, self._notify_progress, self._on_fatal, buggify
        )
        self._new_event = self._sender.primitives.event
        self._progress = self._new_event()
        self._calls = 0
        # Cancel scopes of sends waiting for a topic's metadata: closing cancels them.
        self._metadata_waits: set[anyio.CancelScope] = set()
        # Records of topics whose metadata has not come yet, queued in call order
        # (_pending.py), and whether this producer keeps them (send() returns at once)
        # once a broker has answered, rather than waiting in send() until they are placed.
        self._waiting = {}
        self._keeps = self._txn is None and not callable(config.partitioner)
        # Set once close begins: send() refuses from then on.
        self._closing = False
        self._closed = False
        self._interceptors = tuple(config.interceptors)
        # OpenTelemetry (client/_telemetry.py): None unless configured, and then every
        # send() takes the slow path, where the record's span starts.
        self._telemetry = telemetry_for(
            config.telemetry, config.client_id, headers=config.telemetry_headers
        )
        # The open transaction's span (TransactionalProducerMixin), when telemetry is on.
        self._txn_span: Any = None
        self._key_serializer = config.key_serializer
        self._value_serializer = config.value_serializer
        # Serializers or interceptors: every send() goes through _prepare.
        self._slow = (
            bool(self._interceptors)
            or self._telemetry is not None
            or (self._key_serializer is not None or self._value_serializer is not None)
        )
        # send() must leave its fast path (one test per send): kept by refresh_fast_path.
        self._detour = True
        if self._txn is not None:
            self._txn.attach(self)  # starts the coordinator loop
        self.refresh_fast_path()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "closing" if self._closing else "open"
        return f"<Producer {state} {self._sender!r}>"

    def _start(self, metrics_interval: float) -> None:
        self._nursery.start_soon(self._sender.run, name="kafka-producer-sender")
        if metrics_interval > 0:
            self._nursery.start_soon(self._log_metrics, metrics_interval)

    # -- sending ---------------------------------------------------------------------

    async def send(
        self,
        topic: str | ProducerRecord,
        value: Any = None,
        *,
        key: Any = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
        expected_offset: int | None = None,
    ) -> RecordHandle:
        """Append one record; returns its handle once buffer space was found.

        `timestamp` is the create time in ms since the epoch (None: now); `headers` a
        list of (str, bytes | str | None) pairs or a dict (a str value is sent as UTF-8,
        as confluent-kafka does). A `ProducerRecord` in `topic`'s place takes
        `partition=` and `timestamp=` beside it (they replace its own), not a value, key
        or headers. A record that cannot be sent fails here, alone: `TypeError` naming
        the field (value, key, a header, partition, timestamp), `ValueError` for a
        timestamp outside 0 to 2**63 - 1, `InvalidTopicError` for a name Kafka forbids,
        or whatever a serializer or a custom partitioner raised. Also raises
        `BufferFullError`, `RecordTooLargeError`, `InvalidPartitionError`,
        `ProducerClosedError` or the producer's fatal error.

        A topic the producer has no metadata for yet is not waited for: the record is
        kept, its handle returned at once, and it is appended when the metadata comes,
        in call order with the topic's other records (`_pending.py`). Its handle then
        fails with `UnknownTopicError` if the brokers say the topic does not exist or
        the metadata does not come within `max_block` (`BrokerConnectionError` when no
        broker ever answered), with `InvalidPartitionError` for a partition the topic
        does not have. A transactional producer, one with a custom partitioner, and any
        producer before a broker has first answered wait for the metadata instead and
        raise those errors from `send()`; their records too are appended in call order.

        `expected_offset=N` (with `partition=`): a CAS write, see client/_cas.py.
        """
        # -- CAS (client/_cas.py) --
        if expected_offset is not None:
            return await self._send_conditional(
                topic, value, key, headers, partition, timestamp, expected_offset
            )
        # -- end CAS --
        if topic.__class__ is ProducerRecord:  # the same fast path as the positional form
            if (
                value is not None
                or key is not None
                or headers is not None
                or partition is not None
                or timestamp is not None
            ):  # fields beside the record: record_fields merges or refuses them
                return await self._send_slow(topic, value, key, headers, partition, timestamp)
            topic, value, key, headers, partition, timestamp = topic
            if not headers:
                headers = None
        # The fast path: every test below is one comparison; anything unusual (a
        # subclass of ProducerRecord, serializers, interceptors, closing, a fatal error,
        # a value that is not bytes, an unknown topic, a full buffer) takes _send_slow.
        if (
            self._detour
            or topic.__class__ is not str
            or value.__class__ is not bytes
            or (key is not None and key.__class__ is not bytes)
        ):
            return await self._send_slow(topic, value, key, headers, partition, timestamp)
        if headers is None and partition is None and timestamp is None:
            extras = key is not None
        else:
            headers = check_extras(headers, partition, timestamp)
            extras = True
        self._calls += 1
        if not self._calls & _CHECKPOINT_MASK:
            # Before the append: a cancellation here leaves nothing appended.
            await self._checkpoint()
        try:
            if extras:
                handle = self._append(topic, value, key, headers, partition, timestamp, self._now())
            else:  # the commonest record: three arguments, no tests for what it lacks
                handle = self._append_value(topic, value, self._now())
        except UnknownTopicError:
            handle = None
        except KafkaError as exc:
            self._send_raised(topic, partition, exc)
            raise
        if handle is None:
            return await self._send_slow(topic, value, key, headers, partition, timestamp)
        if handle.index == 0:
            self._opened(handle.batch)
        return handle  # type: ignore[return-value]

    async def _send_slow(
        self,
        topic: str | ProducerRecord,
        value: Any,
        key: Any,
        headers: Headers | None,
        partition: int | None,
        timestamp: int | None,
    ) -> RecordHandle:
        if topic.__class__ is not str:
            topic, value, key, headers, partition, timestamp = record_fields(
                topic, value, key, headers, partition, timestamp
            )
        if self._closing or self._sender.fatal_error is not None:
            self._refuse()
        if self._txn is not None:
            self._txn.check_send()  # outside a transaction: refused, with the reason
        if self._slow:
            topic, value, key, headers, partition, timestamp = self._prepare(
                topic, value, key, headers, partition, timestamp
            )
        else:
            check_types(value, key)
        # bytearray and memoryview: copied, so the caller may reuse the buffer, and a
        # key must be hashable (the partitioner caches key hashes).
        if value is not None and value.__class__ is not bytes:
            value = bytes(value)
        if key is not None and key.__class__ is not bytes:
            key = bytes(key)
        span = None
        if self._telemetry is not None:
            span, headers = self._telemetry.start_send(topic, key, headers)
        try:
            if headers is not None or partition is not None or timestamp is not None:
                headers = check_extras(headers, partition, timestamp)
            self._calls += 1
            if not self._calls & (_CHECKPOINT_EVERY - 1):
                await self._checkpoint()  # before the append (see the module doc)
            try:
                handle = await self._append_waiting(
                    topic, value, key, headers, partition, timestamp
                )
            except KafkaError as exc:
                self._send_raised(topic, partition, exc)
                raise
        except BaseException as exc:
            if span is not None:
                self._telemetry.fail(span, topic, exc)  # type: ignore[union-attr]
            raise
        if span is not None:
            self._telemetry.watch(handle, span, topic)  # type: ignore[union-attr]
        return handle  # type: ignore[return-value]

    async def send_and_wait(
        self, topic: str | ProducerRecord, value: Any = None, **kwargs: Any
    ) -> Any:
        """`send()`, then wait for the record's outcome (returns `Acknowledged`)."""
        handle = await self.send(topic, value, **kwargs)
        self._sender.wake()
        return await handle

    def _prepare(
        self,
        topic: str,
        value: Any,
        key: Any,
        headers: Headers | None,
        partition: int | None,
        timestamp: int | None,
    ) -> tuple[str, Any, Any, Headers | None, int | None, int | None]:
        """Interceptors' on_send, then the serializers (the slow path of send())."""
        if self._interceptors:
            record = ProducerRecord(topic, value, key, headers or (), partition, timestamp)
            for interceptor in self._interceptors:
                on_send = getattr(interceptor, "on_send", None)
                if on_send is None:
                    continue
                try:
                    changed = on_send(record)
                except Exception:
                    # Java's rule: an interceptor's failure is logged, never the send's.
                    logger.exception("interceptor %r failed in on_send", interceptor)
                    continue
                record = check_interceptor_result(interceptor, changed)
            topic, value, key = record.topic, record.value, record.key
            headers = record.headers or None
            partition, timestamp = record.partition, record.timestamp
        if self._value_serializer is not None:
            value = self._value_serializer(value)
        if self._key_serializer is not None and key is not None:
            key = self._key_serializer(key)
        check_types(value, key)
        return topic, value, key, headers, partition, timestamp

    def _opened(self, batch: ProducerBatch) -> None:
        """A send opened a new batch: wake the sender (linger starts, or the previous
        batch is full) and hook the interceptors' acknowledgements onto it."""
        self._sender.wake_event.set()
        if self._txn is not None:
            self._txn.batch_opened(batch)  # AddPartitionsToTxn during the linger
        if self._interceptors:
            batch.add_done_hook(self._acknowledge)

    def _acknowledge(self, batch: ProducerBatch) -> None:
        for interceptor in self._interceptors:
            on_ack = getattr(interceptor, "on_acknowledgement", None)
            if on_ack is None:
                continue
            for index in range(len(batch.records)):
                try:
                    on_ack(batch.outcome(index))
                except Exception:
                    logger.exception("interceptor %r failed in on_acknowledgement", interceptor)

    def _send_raised(self, topic: str, partition: int | None, error: KafkaError) -> None:
        """send() raised: in a transaction the record is not in it, so the transaction
        must not commit without it (Java's maybeTransitionToErrorState;
        simulations/regressions/transactional-lite-62.toml)."""
        if self._txn is not None:
            self._txn.send_failed(topic, partition, error)

    def refresh_fast_path(self) -> None:
        """Recompute whether `send()` may take its fast path: not with serializers or
        interceptors, not while closing or after a fatal error, and in a transactional
        producer only inside a transaction (the slow path then says why not). Called
        whenever one of those changes; the one writer of `_detour`."""
        txn = self._txn
        self._detour = (
            self._slow
            or self._closing
            or self._sender.fatal_error is not None
            or (txn is not None and not txn.in_transaction)
        )

    def _on_fatal(self) -> None:
        self.refresh_fast_path()
        self._settle_all_waiting(self._sender.fatal_error)

    def _refuse(self) -> None:
        if self._sender.fatal_error is not None:
            raise self._sender.fatal_error
        raise ProducerClosedError("the producer is closed; nothing more can be sent with it")

    async def _append_waiting(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: Headers | None,
        partition: int | None,
        timestamp: int | None,
    ) -> DeliveryHandle:
        """The append that must wait: metadata for the topic, or buffer space."""
        deadline = self._now() + self.config.max_block
        size = len(value or b"") + len(key or b"")
        while True:
            if self._closing or self._sender.fatal_error is not None:
                self._refuse()
            try:
                handle = self._append(topic, value, key, headers, partition, timestamp, self._now())
            except UnknownTopicError:
                # Into the topic's queue, behind the records sent before (_pending.py).
                handle = await self._queue(
                    topic, value, key, headers, partition, timestamp, deadline
                )
                if handle is not None:
                    return handle
            else:
                if handle is not None:
                    if handle.index == 0:
                        self._opened(handle.batch)
                    return handle
            await self._wait_for_room(deadline, size, None)

    async def _wait_for_room(
        self, deadline: float, size: int, appended: list[BatchSpan] | None
    ) -> None:
        accumulator = self._core.accumulator
        if self.config.buffer_full_strategy is BufferFullStrategy.DROP:
            raise self._buffer_full(size, 0.0, appended)
        self._sender.wake()  # the accumulator is exhausted: everything is sendable now
        progress = self._progress
        with anyio.CancelScope(deadline=deadline):
            await progress.wait()
            return
        if self._closing:
            self._refuse()
        if not accumulator.has_room(max(size, 1)):
            raise self._buffer_full(size, self.config.max_block, appended)

    def _buffer_full(
        self, size: int, waited: float, appended: list[BatchSpan] | None
    ) -> BufferFullError:
        accumulator = self._core.accumulator
        what = "a record" if size < 0 else f"a record of about {size} bytes"
        return BufferFullError(
            f"buffer_memory={self.config.buffer_memory} bytes is full "
            f"({accumulator.buffer_used} in use by unsent and unacknowledged batches) and "
            f"{what} found no room after waiting {waited:.3f} s "
            f"(max_block={self.config.max_block}, buffer_full_strategy="
            f"{self.config.buffer_full_strategy.value}); the brokers are slower than the "
            "producer, or unreachable",
            appended=None if appended is None else BulkDelivery(merge_spans(appended)),
        )

    # -- flush, close ----------------------------------------------------------------

    def _notify_progress(self) -> None:
        event, self._progress = self._progress, self._new_event()
        event.set()

    # -- metrics ---------------------------------------------------------------------

    def wall_clock(self) -> float:
        """Epoch seconds as this producer stamps records: `time.time()`, or the
        `wall_clock` it was opened with (the simulator's virtual one)."""
        return self._core.accumulator.wall_offset + self._clock.now()

    def seams(self) -> dict[str, Any]:
        """This producer's clock, random generator, wall clock and fault hook, as
        `open_producer` takes them: a producer opened beside it with `**seams()` keeps
        time, draws and faults as it does (one simulator run stays one run)."""
        return {
            "clock": self._clock,
            "rng": self.selector.rng,
            "wall_clock": self.wall_clock,
            "buggify": self._sender.buggify,
        }

    def metrics(self) -> MetricsSnapshot:
        return self._core.metrics_snapshot()

    async def _log_metrics(self, interval: float) -> None:
        while True:
            await anyio.sleep(interval)
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("producer metrics: %s", self.metrics())


def _fast_now(clock: Clock) -> Callable[[], float]:
    """`clock.now`, or for the loop's own clock the loop's clock function itself: the
    same value as `anyio.current_time()` with no backend dispatch per `send()`."""
    if isinstance(clock, LoopClock):
        return loop_time()
    return clock.now


__all__ = ["Producer"]
