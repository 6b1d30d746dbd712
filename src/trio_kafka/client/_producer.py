"""`Producer`: the idempotent (and transactional) producer for trio and asyncio, as its
user calls it (`open_producer()` in `_open.py` makes one).

Theory of operation
-------------------
`Producer` is the user-facing half: `send()` appends to the core's accumulator and
returns a `RecordHandle` at once; the `Sender` task (`_sender.py`) does all I/O. The hot
path of `send()` is a core append and a counter, with no anyio call: it yields to the
event loop only every 256 calls (`SEND_CHECKPOINT_EVERY`; DESIGN.md: a checkpoint per call caps at ~215k calls/s
on trio), through the backend's own checkpoint looked up once at open, or when it must
wait (buffer full, topic metadata). That checkpoint comes before the append, so a
cancelled `send()` (trio, or asyncio's `task.cancel()`) has appended nothing: a record
is either in the buffer with its handle returned, or not sent at all. It wakes the
sender only when the append opened a new batch (handle index 0), so waking costs once
per batch.

What `send()` checks: a record the wire cannot carry must fail alone, at `send()`, with
a `TypeError` or `InvalidTopicError` naming what is wrong: once it is in a batch, the
batch's encoding would fail in the sender, where it would take the batch's other records
with it. The checks are split by cost. The fast path compares the classes of topic,
value and key; the checks below (`_check_extras` and the rest) run only when the record
has headers, an explicit partition or timestamp, when the topic is not in the metadata
yet (`trio_kafka.net.check_topic_name`, in `KafkaSelector.wait_for_topic`, so every
client checks it), or for a custom partitioner's answer. Headers follow
confluent-kafka's rule: a list of (key, value) pairs or a dict; keys `str`; values
`bytes` (or `bytearray`, `memoryview`), `str` (sent as UTF-8) or None.

A record for a topic without metadata goes to `UnknownTopics` (`_unknown_topics.py`),
which keeps it in call order until the metadata comes, and owns every wait for a
topic's metadata. `send(..., expected_offset=N)` is a CAS write: checked (`cas_gate`,
see `_cas.py`), then appended as a batch of its own that must land at offset N.
`send_many` appends values for one topic through the core's bulk append
(`ProducerCore.append_many`, in chunks of `_BULK_CHUNK`), anything else one `send()`
each; it returns a `BulkDelivery` of batch spans (cancelling it: docs/asyncio.md).

Waiting (flush, close, a send blocked on `buffer_memory`) is on `_progress`, an Event
replaced each time batches reach a final state.

Closing (`aclose()`, or leaving `async with open_producer(...)`): abort an open
transaction, stop lingering, wait up to `close_timeout` for every batch to settle, then
settle the rest without waiting: requests still out become Ambiguous (they may have been
written), queued batches fail with `ProducerClosedError`; then the tasks are cancelled.
The tasks run in a nursery of their own (`_open.py`), so `aclose()` inside the block
closes the producer without cancelling the block. Leaving the block with an exception
closes with a zero timeout. Nothing waits on the network past the timeout.

Transactions (Java's `initTransactions`, `beginTransaction`, `commitTransaction`, ...):
each call checks the producer is transactional and hands the work to its
`TransactionDriver` (`_transactions.py`), which owns the coordinator exchange.
`HandedOffTransaction` is an open transaction one process leaves for another to end.
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from typing import Any, NoReturn

import anyio
import anyio.lowlevel
import attrs

from trio_kafka.client._cas import CasGate, cas_gate
from trio_kafka.client._handles import BulkDelivery, RecordHandle
from trio_kafka.client._sender import Sender
from trio_kafka.client._telemetry import telemetry_for
from trio_kafka.client._transactions import (
    TopicPartition,
    TransactionDriver,
    transaction_manager,
)
from trio_kafka.client._unknown_topics import UnknownTopics
from trio_kafka.core import (
    BatchSpan,
    BufferFullStrategy,
    DeliveryHandle,
    GroupMetadata,
    Harness,
    Headers,
    MetricsSnapshot,
    OffsetAndMetadata,
    ProducerBatch,
    ProducerConfig,
    ProducerCore,
    ProducerRecord,
    Sequencer,
    TxnState,
    record_size,
)
from trio_kafka.errors import (
    AbortableError,
    BufferFullError,
    ConfigError,
    KafkaError,
    ProducerClosedError,
    RecordTooLargeError,
    UnknownTopicError,
)
from trio_kafka.net import (
    Clock,
    KafkaSelector,
    LoopClock,
    TaskGroup,
    check_topic_name,
    checkpoint_function,
    loop_time,
    loop_time_parts,
)
from trio_kafka.records import HEADER_SIZE

logger = logging.getLogger("trio_kafka.producer")

# send() checkpoints once per this many calls (a power of two: the test is a mask), as
# an await of a done handle does (`AWAIT_CHECKPOINT_EVERY`). 256, not 64: a trio
# checkpoint is a scheduler round (~4-6 us with the sender's tasks), and at 64 the rounds
# and the sender's wakes they bring cost ~13% of a record's CPU (benchmarks.md, "A
# cheaper record"); 256 sends are still well under a millisecond.
SEND_CHECKPOINT_EVERY = 256
_CHECKPOINT_MASK = SEND_CHECKPOINT_EVERY - 1
# send_many's values per bulk append.
_BULK_CHUNK = 8192
_BYTES_OR_NONE = frozenset((bytes, type(None)))
# The size `_wait_for_room` is told when a bulk chunk found no room (no one record's size).
_RECORD_SIZE_UNKNOWN = -1


@attrs.frozen
class HandedOffTransaction:
    """An open transaction one process left for another to end (picklable)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


class Producer:
    """Created by `open_producer()`; see the module doc."""

    #: The configuration it was opened with.
    config: ProducerConfig
    #: The selector that owns its connections and metadata (shareable: `open_producer(selector=)`).
    selector: KafkaSelector

    def __init__(
        self,
        config: ProducerConfig,
        selector: KafkaSelector,
        clock: Clock,
        rng: random.Random,
        wall_offset: float,
        nursery: TaskGroup,
        harness: Harness | None = None,
    ) -> None:
        self.config = config
        self.selector = selector
        self._clock = clock
        self._now = _fast_now(clock)
        # The same reading for send()'s fast path as a C function and an offset to add
        # (`loop_time_parts`): no Python frame per record on trio's own clock.
        self._time, self._time_offset = _fast_now_parts(clock)
        # The running backend's checkpoint, looked up once (no anyio dispatch per send).
        self._checkpoint = checkpoint_function()
        # The task group of the producer's own tasks (closing cancels it).
        self._nursery = nursery
        # Transactions (client/_transactions.py): None unless transactional_id is set.
        # A test harness's rules and fault hook (core/_rules.py), handed to what we build.
        self._harness = harness = Harness() if harness is None else harness
        # The manager comes first (the core's sequencing hooks), its driver once the
        # sender exists.
        txn_manager = transaction_manager(config, harness.rules)
        core_config = config
        if callable(config.partitioner):
            core_config = attrs.evolve(config, partitioner=_checked_partitioner(config.partitioner))
        # The sans-IO core (accumulator, sequencing) and the task that does the I/O.
        self._core = ProducerCore(
            core_config,
            rng,
            wall_offset=wall_offset,
            sequencing=(
                None
                if txn_manager is None
                else Sequencer(is_transactional=True, hooks=txn_manager, rules=harness.rules)
            ),
            handle_class=RecordHandle,  # made as RecordHandles: no class swap per send
            rules=harness.rules,
        )
        # The core's appends, bound once.
        self._append = self._core.append
        self._append_value = self._core.accumulator.append_value
        self._sender = Sender(
            self._core,
            selector,
            clock,
            nursery,
            self._notify_progress,
            self._on_fatal,
            harness.buggify,
        )
        self._txn: TransactionDriver | None = None
        if txn_manager is not None:
            self._txn = TransactionDriver(
                txn_manager,
                config,
                selector=selector,
                core=self._core,
                sender=self._sender,
                clock=clock,
                tasks=nursery,
                state_changed=self.refresh_fast_path,
            )
        self._new_event = self._sender.primitives.event
        # Set when batches reach a final state (replaced each time: `_notify_progress`).
        self._progress = self._new_event()
        # The selector's CAS gate, once a CAS send has asked for it (client/_cas.py).
        self._cas_gate: CasGate | None = None
        # send() calls so far (it checkpoints every SEND_CHECKPOINT_EVERY).
        self._calls = 0
        # Set once close begins: send() refuses from then on.
        self._closing = False
        self._closed = False
        self._interceptors = tuple(config.interceptors)
        # Records of topics whose metadata has not come yet, and the waits for it. They
        # are kept (send() returns at once) once a broker has answered, except in a
        # transactional producer and with a custom partitioner (_unknown_topics.py).
        self._unknown_topics = UnknownTopics(
            self._core,
            self._sender,
            selector,
            nursery,
            self._now,
            keeps=self._txn is None and not callable(config.partitioner),
            refuse=self._refuse,
            opened=self._opened,
            failed=self._acknowledge if self._interceptors else None,
            progress=self._notify_progress,
            buffer_full=self._buffer_full,
            check_send=None if self._txn is None else self._txn.check_send,
        )
        # OpenTelemetry (client/_telemetry.py): None unless configured, and then every
        # send() takes the slow path, where the record's span starts.
        self._telemetry = telemetry_for(
            config.telemetry, config.client_id, headers=config.telemetry_headers
        )
        # The open transaction's span, when telemetry is on.
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
            self._txn.start()  # the coordinator loop
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
        in call order with the topic's other records (`_unknown_topics.py`). Its handle
        then fails with `UnknownTopicError` if the brokers say the topic does not exist
        or the metadata does not come within `max_block` (`BrokerConnectionError` when
        no broker ever answered), with `InvalidPartitionError` for a partition the topic
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
            ):  # fields beside the record: _record_fields merges or refuses them
                return await self._send_slow(topic, value, key, headers, partition, timestamp)
            record = topic  # (its fields by name: a struct's slots, read in C)
            topic = record.topic
            value = record.value
            key = record.key
            headers = record.headers or None
            partition = record.partition
            timestamp = record.timestamp
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
            headers = _check_extras(headers, partition, timestamp)
            extras = True
        self._calls += 1
        if not self._calls & _CHECKPOINT_MASK:
            # Before the append: a cancellation here leaves nothing appended.
            await self._checkpoint()
        try:
            if extras:
                handle = self._append(
                    topic,
                    value,
                    key,
                    headers,
                    partition,
                    timestamp,
                    self._time() + self._time_offset,
                )
            else:  # the commonest record: three arguments, no tests for what it lacks
                handle = self._append_value(topic, value, self._time() + self._time_offset)
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
            topic, value, key, headers, partition, timestamp = _record_fields(
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
            _check_types(value, key)
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
                headers = _check_extras(headers, partition, timestamp)
            self._calls += 1
            if not self._calls & _CHECKPOINT_MASK:
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
                record = _check_interceptor_result(interceptor, changed)
            topic, value, key = record.topic, record.value, record.key
            headers = record.headers or None
            partition, timestamp = record.partition, record.timestamp
        if self._value_serializer is not None:
            value = self._value_serializer(value)
        if self._key_serializer is not None and key is not None:
            key = self._key_serializer(key)
        _check_types(value, key)
        return topic, value, key, headers, partition, timestamp

    def _withdraw_unsent(self, handle: RecordHandle, error: KafkaError) -> bool:
        """For `ConditionalWriter`: fail the CAS batch `handle`'s record went to, unsent,
        if it has not left yet (`ProducerCore.withdraw`); False once it has."""
        return self._core.withdraw(handle.batch, error)

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
        self._unknown_topics.settle_all(self._sender.fatal_error)

    def _refuse(self) -> NoReturn:
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
                # Into the topic's queue, behind the records sent before.
                handle = await self._unknown_topics.queue(
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
            appended=None if appended is None else BulkDelivery(_merge_spans(appended)),
        )

    # -- a CAS send (expected_offset=) -----------------------------------------------

    async def _send_conditional(
        self,
        topic: str | ProducerRecord,
        value: Any,
        key: Any,
        headers: Headers | None,
        partition: int | None,
        timestamp: int | None,
        expected_offset: int,
    ) -> RecordHandle:
        """`send(..., expected_offset=N)`: checked, then appended as a batch of its own
        that must land at offset N (see client/_cas.py)."""
        if topic.__class__ is not str:
            topic, value, key, headers, partition, timestamp = _record_fields(
                topic, value, key, headers, partition, timestamp
            )
        if partition is None:
            raise ConfigError(
                f"expected_offset={expected_offset} needs partition=: an expected offset only "
                "means something within one partition (the partitioner cannot choose it)"
            )
        if isinstance(expected_offset, bool) or not isinstance(expected_offset, int):
            raise ConfigError(f"expected_offset must be an int, not {expected_offset!r}")
        if expected_offset < 0:
            raise ConfigError(
                f"expected_offset={expected_offset} is not an offset: pass the offset (>= 0) "
                "the record must land at, or leave expected_offset out"
            )
        if self._closing or self._sender.fatal_error is not None:
            self._refuse()
        if self._txn is not None:
            self._txn.check_send()  # a transactional producer: only inside a transaction
        if self._slow:
            topic, value, key, headers, _, timestamp = self._prepare(
                topic, value, key, headers, partition, timestamp
            )
        else:
            _check_types(value, key)
        headers = _check_extras(headers, partition, timestamp)
        deadline = self._now() + self.config.max_block
        gate = self._cas_gate
        if gate is None:  # (looked up once: a lookup per CAS send made a weak reference)
            gate = self._cas_gate = cas_gate(self.selector)
        if gate.checked_leader(topic, partition) is None:  # (known and passed: no await)
            await gate.check(topic, partition, timeout=max(deadline - self._now(), 0.0))
        cas_batch_bytes = self._core.accumulator.cas_batch_bytes
        if topic not in cas_batch_bytes:
            limit = gate.max_message_bytes(topic)
            if limit is not None:  # the batch's header is not in its records' bytes
                cas_batch_bytes[topic] = max(limit - HEADER_SIZE, 1)
        size = len(value or b"") + len(key or b"")
        self._calls += 1
        if not self._calls & _CHECKPOINT_MASK:
            # Before the append (see the module doc); not every call, as for the other
            # sends: a run of CAS sends (a commit log's appends) then fills one batch.
            await self._checkpoint()
        while True:
            if self._closing or self._sender.fatal_error is not None:
                self._refuse()
            try:
                handle = self._core.append(
                    topic, value, key, headers, partition, timestamp, self._now(), expected_offset
                )
            except UnknownTopicError:
                await self._unknown_topics.wait_for_topic(topic, deadline)
                continue
            if handle is not None:
                break
            await self._wait_for_room(deadline, size, None)
        if handle.index == 0:
            self._opened(handle.batch)
        return handle  # type: ignore[return-value]  # the core makes RecordHandles

    # -- many records in one call ----------------------------------------------------

    async def send_many(
        self,
        records: Iterable[Any],
        *,
        topic: str | None = None,
        partition: int | None = None,
        keys: Sequence[bytes | None] | None = None,
    ) -> BulkDelivery:
        """Append many records in one call.

        With `topic`, `records` are values and go through the core's bulk append: far
        less work per record than `send()`. They are unkeyed and spread by the sticky
        partitioner, or with `partition=` all go to that partition, filling its batches
        to `batch_size` (then `keys=`, one key or None per value, gives them keys; they
        choose no partition). Without `topic`, `records` are `ProducerRecord`s. Returns a
        `BulkDelivery` (`await` it for the acknowledged count).

        Every record is checked before the first is appended: a record `send()` would
        refuse (a value, key, header, topic name, partition or timestamp it cannot send)
        refuses the whole call, naming the record ("send_many: record 3: ..."), and
        nothing of it is appended. What a serializer, an interceptor or the metadata
        (a partition the topic lacks) refuses of a `ProducerRecord` is found as it is
        appended: the records before it are then sent.
        """
        if topic is None:
            if partition is not None or keys is not None:
                raise TypeError("send_many: partition= and keys= go with topic= (values)")
            return await self._send_many_records(records, None)
        if keys is not None and partition is None:
            raise TypeError(
                "send_many: keys= needs partition= (without it, send keyed records with "
                "send() or as ProducerRecords, so the partitioner sees their keys)"
            )
        values = records if isinstance(records, list) else list(records)
        if keys is not None and len(keys) != len(values):
            raise ValueError(f"send_many: {len(keys)} keys for {len(values)} values")
        if self._slow:
            return await self._send_many_records(values, topic, partition, keys)
        if self._txn is not None:
            self._txn.check_send()
        _check_extras(None, partition, None)
        if not {*map(type, values)} <= _BYTES_OR_NONE:
            _check_each(values, lambda value: _check_types(value, None))
            values = _as_bytes(values)  # bytearray, memoryview: copied, as send() does
        if keys is not None and not {*map(type, keys)} <= _BYTES_OR_NONE:
            _check_each(keys, lambda key: _check_types(b"", key))
            keys = _as_bytes(keys)
        spans: list[BatchSpan] = []
        position = 0
        deadline = self._now() + self.config.max_block
        while position < len(values):
            if self._closing or self._sender.fatal_error is not None:
                self._refuse()
            end = position + _BULK_CHUNK
            chunk = values[position:end]
            try:
                new_spans, taken = self._core.append_many(
                    topic,
                    chunk,
                    self._now(),
                    partition=partition,
                    keys=None if keys is None else keys[position:end],
                )
            except UnknownTopicError:
                await self._unknown_topics.wait_for_topic(topic, deadline)
                continue
            except KafkaError as exc:
                self._send_raised(topic, partition, exc)
                raise
            for span in new_spans:
                if span.start == 0:
                    self._opened(span.batch)
            spans.extend(new_spans)
            position += taken
            self._sender.wake()
            if taken < len(chunk):
                await self._wait_for_room(deadline, _RECORD_SIZE_UNKNOWN, spans)
            else:
                # Shielded: the chunk is appended, and a trio cancellation here would
                # lose its spans (docs/asyncio.md: what cancelling send_many means).
                await anyio.lowlevel.cancel_shielded_checkpoint()
        return BulkDelivery(_merge_spans(spans))

    async def _send_many_records(
        self,
        records: Iterable[Any],
        topic: str | None,
        partition: int | None = None,
        keys: Sequence[bytes | None] | None = None,
    ) -> BulkDelivery:
        records = records if isinstance(records, list) else list(records)
        self._check_many(records, topic, partition, keys)
        spans: list[BatchSpan] = []
        for index, record in enumerate(records):
            if topic is None:
                handle = await self.send(record)
            else:
                key = None if keys is None else keys[index]
                handle = await self.send(topic, record, key=key, partition=partition)
            if spans and spans[-1].batch is handle.batch and spans[-1].stop == handle.index:
                last = spans[-1]
                spans[-1] = BatchSpan(last.batch, last.start, handle.index + 1)
            else:
                spans.append(BatchSpan(handle.batch, handle.index, handle.index + 1))
        return BulkDelivery(spans)

    def _check_many(
        self,
        records: list[Any],
        topic: str | None,
        partition: int | None,
        keys: Sequence[bytes | None] | None,
    ) -> None:
        """What `send()` would refuse of any of `records`, raised before the first is
        appended and naming it: a bad record refuses the call, so a retry of the whole
        call cannot write the good ones twice (they were appended one by one, the
        BulkDelivery lost with the error). Not checked here: what a serializer or an
        interceptor does (they run as each record is sent)."""
        config = self.config
        for index, record in enumerate(records):
            if topic is None:
                if not isinstance(record, ProducerRecord):
                    raise TypeError(
                        f"send_many: record {index} is a {type(record).__name__}, not a "
                        "ProducerRecord: without topic=, records are ProducerRecords "
                        "(pass topic= to send values)"
                    )
                value, key, headers = record.value, record.key, record.headers or None
                part, timestamp, name = record.partition, record.timestamp, record.topic
            else:
                value, key, headers = record, None if keys is None else keys[index], None
                part, timestamp, name = partition, None, topic
            try:
                if not isinstance(name, str):
                    raise TypeError(f"topic must be a str, not {type(name).__name__}")
                check_topic_name(name)
                checked_record(config, value, key, headers)
                _check_extras(None, part, timestamp)
            except KafkaError as exc:  # (InvalidTopicError: its message names the topic)
                exc.add_note(f"send_many: record {index}; nothing of the call was appended")
                raise
            except TypeError as exc:
                raise TypeError(f"send_many: record {index}: {exc}") from None
            except ValueError as exc:
                raise ValueError(f"send_many: record {index}: {exc}") from None

    # -- topics ----------------------------------------------------------------------

    async def wait_for_topics(
        self, topics: Iterable[str], *, timeout: float | None = None
    ) -> dict[str, int]:
        """Learn the metadata of `topics` before sending to them, in one Metadata request
        for all those not known yet, then wait for each as `send()` would, for at most
        `timeout` seconds in all (default `max_block`). Returns each topic's partition
        count. Raises what a first `send()` to the topic would: `InvalidTopicError`,
        `UnknownTopicError` (a topic the brokers say does not exist),
        `BrokerConnectionError` (no broker answers).

        For a producer about to write to many topics: a first send to a topic waits for
        its metadata, one round trip per topic (as the Java client's `send()` does);
        this asks once for all of them."""
        if isinstance(topics, str | bytes):
            raise TypeError(
                f"topics must be an iterable of topic names, not a {type(topics).__name__} "
                f"({topics!r}): wait_for_topics([{topics!r}])"
            )
        names = list(dict.fromkeys(topics))
        for name in names:
            if not isinstance(name, str):
                raise TypeError(f"a topic name must be a str, not {type(name).__name__}: {name!r}")
        if self._closing or self._closed or self._sender.fatal_error is not None:
            self._refuse()
        wait = self.config.max_block if timeout is None else timeout
        deadline = self._now() + wait
        metadata = self.selector.metadata
        unknown = []
        for name in names:
            known = metadata.topic(name)
            if known is None or not known.is_usable:
                check_topic_name(name)
                unknown.append(name)
        if unknown:
            await self._unknown_topics.ask(unknown, wait)
            if self._closing or self._closed:
                self._refuse()
        for name in names:
            await self._unknown_topics.wait_for_topic(name, deadline)
        found = self.selector.metadata
        return {name: found.topics[name].partition_count for name in names}

    # -- flush, close ----------------------------------------------------------------

    def _notify_progress(self) -> None:
        event, self._progress = self._progress, self._new_event()
        event.set()

    async def flush(self) -> None:
        """Send everything appended so far now and wait until every record has settled.

        Raises `ProducerClosedError` once the producer is closed."""
        if self._closed:
            self._refuse()
        core = self._core
        core.begin_flush()
        try:
            self._sender.wake()
            while (
                core.has_unfinished or self._unknown_topics.any_waiting
            ) and self._sender.fatal_error is None:
                await self._progress.wait()
            await self._checkpoint()
        finally:
            core.end_flush()

    async def aclose(self, timeout: float | None = None) -> None:
        """Close the producer and return: abort an open transaction (as Java's `close`
        does), flush for up to `timeout` (default `close_timeout`), then settle the rest
        without waiting (see the module doc) and stop the tasks. Callable anywhere, also
        inside `async with open_producer(...)` (whose exit is then a no-op); later
        `send()` and `flush()` raise `ProducerClosedError`."""
        if self._closed or self._closing:
            await self._checkpoint()
            return
        timeout = self.config.close_timeout if timeout is None else timeout
        if timeout < 0:
            raise ValueError(f"aclose(timeout={timeout}) is not allowed: it must be >= 0")
        with anyio.move_on_after(timeout):
            if self._txn is not None:
                await self._txn.abort_bounded()
            self._closing = True
            self.refresh_fast_path()
            core = self._core
            core.close()
            self._sender.wake()
            while (
                core.has_unfinished or self._unknown_topics.any_waiting
            ) and self._sender.fatal_error is None:
                await self._progress.wait()
        self._settle_everything(timeout)

    def _settle_everything(self, timeout: float) -> None:
        """Close without waiting: requests still out become Ambiguous, everything
        queued fails with `ProducerClosedError`, the producer's tasks are cancelled."""
        if self._closed:
            return
        self._closed = True
        self._closing = True
        self.refresh_fast_path()
        self._core.close()
        error = ProducerClosedError(
            "the producer closed before this record was acknowledged (within its close "
            f"timeout of {timeout} s)"
        )
        self._sender.closing = True
        self._unknown_topics.settle_all(None, timeout)
        for node in list(self._sender.nodes.values()):
            node.settle_all(error)
        self._core.fail_all(error)
        self._notify_progress()
        self._unknown_topics.cancel_waits()
        self._nursery.cancel_scope.cancel()

    # -- transactions ----------------------------------------------------------------

    def _transactions(self) -> TransactionDriver:
        if self._txn is None:
            raise ConfigError(
                "this producer has no transactional_id: open it with "
                "open_producer(..., transactional_id='...') to use transactions"
            )
        return self._txn

    async def init_transactions(self, timeout: float | None = None) -> None:
        """Find the transaction coordinator and get a producer id and epoch, fencing
        any earlier producer with the same transactional id (Java's initTransactions).

        Also what to await after `TransactionOutcomeUnknownError`: it returns once the
        re-initialisation (epoch bump) has finished."""
        await self._transactions().init(timeout)

    def begin_transaction(self) -> None:
        """Start a transaction: `send()` is allowed until commit or abort."""
        driver = self._transactions()
        driver.begin()
        if self._telemetry is not None:
            self._txn_span = self._telemetry.begin_transaction(driver.manager.transactional_id)

    async def _ended(self, outcome: str, end: Callable[[], Awaitable[None]]) -> None:
        """Commit or abort (`end`), ending the transaction's span with its outcome."""
        span, self._txn_span = self._txn_span, None
        try:
            await end()
        except BaseException as exc:
            if span is not None:
                self._telemetry.end_transaction(span, outcome, exc)  # type: ignore[union-attr]
            raise
        if span is not None:
            self._telemetry.end_transaction(span, outcome, None)  # type: ignore[union-attr]

    async def commit_transaction(self) -> None:
        """Send everything appended, then commit. Raises an `AbortableError`
        (abort and go on), a `FatalError` (close the producer) or
        `TransactionOutcomeUnknownError` (may or may not be committed)."""
        await self._ended("commit", self._transactions().commit)

    async def abort_transaction(self) -> None:
        """Abort: records not yet sent fail with `TransactionAbortedError`; those
        written are never shown to read_committed consumers."""
        await self._ended("abort", self._transactions().abort)

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_metadata: GroupMetadata | str,
    ) -> None:
        """Commit a consumer group's positions with this transaction (and only with it).

        `offsets`: (topic, partition) -> the next offset to read (or OffsetAndMetadata);
        `group_metadata`: the consumer's `GroupMetadata` (KIP-447: generation, member
        id, group instance id) or just the group id."""
        await self._transactions().send_offsets(offsets, group_metadata)

    async def hand_off_transaction(self) -> HandedOffTransaction:
        """Flush, check that every record of the open transaction was acknowledged, and
        leave the transaction open for another process to end with
        `complete_transaction` (a Spark task writes, the driver commits). This producer
        can then send nothing more, and closing it does not abort the transaction: the
        coordinator aborts it after `transaction_timeout` unless it is ended before."""
        driver = self._transactions()
        await self.flush()
        producer_id, epoch = driver.manager.hand_off()
        driver.update_detour()
        return HandedOffTransaction(driver.manager.transactional_id, producer_id, epoch)

    async def complete_transaction(
        self, transaction: HandedOffTransaction, *, commit: bool = True
    ) -> None:
        """End a transaction another producer handed off (`hand_off_transaction`), on a
        producer opened with the same `transactional_id` and not initialised (its
        `init_transactions()` would abort it). Raises like `commit_transaction`; a
        `FatalError` (fenced, or past the coordinator's timeout) means this id's
        transaction cannot be committed any more."""
        driver = self._transactions()
        if transaction.transactional_id != driver.manager.transactional_id:
            raise ConfigError(
                f"complete_transaction: the transaction belongs to transactional id "
                f"{transaction.transactional_id!r}, this producer is "
                f"{driver.manager.transactional_id!r}"
            )
        driver.manager.adopt(transaction.producer_id, transaction.producer_epoch)
        if commit:
            await driver.commit()
        else:
            await driver.abort()

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """Begin a transaction; commit on normal exit, abort on an exception or a
        cancellation (shielded, bounded by the driver's `abort_timeout`).

        After an unknown commit outcome it first waits for the re-initialisation, and
        after an abort that outlived `abort_timeout` (it goes on in the background) for
        that abort: beginning then raised IllegalTransactionStateError (seen on Apache
        Kafka, two ConditionalWriters racing, an abort held up by the other's fencing)."""
        driver = self._transactions()
        if driver.manager.state is TxnState.INITIALIZING:
            await driver.init()
        elif driver.manager.state.is_aborting:
            await driver.abort()
        self.begin_transaction()
        span = self._txn_span
        try:
            if span is None:
                yield
            else:
                with self._telemetry.current(span):  # type: ignore[union-attr]
                    yield
        except BaseException:
            await self._ended("abort", driver.abort_bounded)
            raise
        try:
            await self._ended("commit", driver.commit)
        except AbortableError:
            await driver.abort_bounded()
            raise

    # -- clocks, seams, metrics ------------------------------------------------------

    def wall_clock(self) -> float:
        """Epoch seconds as this producer stamps records: `time.time()`, or the
        `wall_clock` it was opened with (the simulator's virtual one)."""
        return self._core.accumulator.wall_offset + self._clock.now()

    def seams(self) -> dict[str, Any]:
        """This producer's clock, random generator, wall clock and harness, as
        `open_producer` takes them: a producer opened beside it with `**seams()` keeps
        time, draws, rules and faults as it does (one simulator run stays one run)."""
        return {
            "clock": self._clock,
            "rng": self.selector.rng,
            "wall_clock": self.wall_clock,
            "harness": self._harness,
        }

    def metrics(self) -> MetricsSnapshot:
        return self._core.metrics_snapshot()

    async def _log_metrics(self, interval: float) -> None:
        while True:
            await anyio.sleep(interval)
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("producer metrics: %s", self.metrics())


# -- for the rest of client/ (package-internal: not methods, so users never see them) --


@contextlib.asynccontextmanager
async def running(producer: Producer, metrics_interval: float) -> AsyncIterator[Producer]:
    """Package-internal (`open_producer`'s): start `producer`'s tasks, hand it to the
    block, and close it on the way out (see the module doc). Leaving with an exception
    closes at once, with a zero timeout (Java's close(Duration.ZERO): no flush, and an
    open transaction is left to the coordinator's transaction timeout); so does a close
    that is itself cut short (asyncio's task.cancel() goes through anyio's shield), which
    still settles every record (Ambiguous or Failed), never leaves a handle pending."""
    producer._start(metrics_interval)
    try:
        yield producer
    except BaseException:
        producer._settle_everything(0.0)
        raise
    try:
        with anyio.CancelScope(shield=True):
            await producer.aclose()
    except BaseException:
        producer._settle_everything(0.0)
        raise


def transaction_commit_sent(producer: Producer) -> bool:
    """Package-internal (the conditional writer's): whether the EndTxn(commit) of
    `producer`'s current transaction was sent (or was about to be). Until it is, a failed
    transaction is certainly not committed. Raises `ConfigError` for a producer that
    is not transactional."""
    return producer._transactions().commit_sent


def _fast_now(clock: Clock) -> Callable[[], float]:
    """`clock.now`, or for the loop's own clock the loop's clock function itself: the
    same value as `anyio.current_time()` with no backend dispatch per `send()`."""
    if isinstance(clock, LoopClock):
        return loop_time()
    return clock.now


def _fast_now_parts(clock: Clock) -> tuple[Callable[[], float], float]:
    """`_fast_now(clock)` as a function and an offset to add (`loop_time_parts`)."""
    if isinstance(clock, LoopClock):
        return loop_time_parts()
    return clock.now, 0.0


def _merge_spans(spans: list[BatchSpan]) -> list[BatchSpan]:
    """Join consecutive spans of the same batch (bulk chunks split them)."""
    merged: list[BatchSpan] = []
    for span in spans:
        if merged and merged[-1].batch is span.batch and merged[-1].stop == span.start:
            merged[-1] = BatchSpan(span.batch, merged[-1].start, span.stop)
        else:
            merged.append(span)
    return merged


# -- what send() checks (see the module doc) -----------------------------------------

_Header = tuple[str, bytes | None]
_BINARY = (bytes, bytearray, memoryview)
_VALUE_TYPES = (bytes, bytearray, memoryview, type(None))
# The largest timestamp a record batch holds (an int64 of ms).
_MAX_TIMESTAMP = 2**63 - 1


def _check_extras(headers: Any, partition: Any, timestamp: Any) -> Any:
    """Check a record's headers, partition and timestamp; returns the headers as the
    encoder takes them (None when there are none)."""
    if partition is not None and partition.__class__ is not int:
        raise TypeError(
            f"partition must be an int or None, not {type(partition).__name__} ({partition!r})"
        )
    if timestamp is not None:
        if timestamp.__class__ is not int:
            raise TypeError(
                f"timestamp must be an int (ms since the epoch) or None, not "
                f"{type(timestamp).__name__} ({timestamp!r})"
            )
        if not 0 <= timestamp <= _MAX_TIMESTAMP:
            # Java's ProducerRecord refuses a negative one too; one past int64 would
            # fail the encoding of its whole batch in the sender, not this record alone.
            raise ValueError(
                f"timestamp={timestamp} is not allowed: it must be ms since the epoch, "
                f"0 to {_MAX_TIMESTAMP} (or None: now)"
            )
    if headers is None:
        return None
    return _check_headers(headers)


def _check_headers(headers: Any) -> Any:
    """`headers` as the encoder takes them: as given when already a list or tuple of
    (str, bytes | None) tuples (no copy: the common case), converted otherwise, or a
    `TypeError` naming the header that cannot be sent."""
    if headers.__class__ is list or headers.__class__ is tuple:
        for pair in headers:
            if (
                pair.__class__ is not tuple
                or len(pair) != 2
                or pair[0].__class__ is not str
                or (pair[1] is not None and pair[1].__class__ is not bytes)
            ):
                break
        else:
            return headers or None
    return _converted_headers(headers)


def _converted_headers(headers: Any) -> tuple[_Header, ...] | None:
    if isinstance(headers, Mapping):
        pairs: Any = list(headers.items())
    elif isinstance(headers, list | tuple):
        pairs = headers
    else:
        raise TypeError(
            f"headers must be a list of (key, value) pairs or a dict, not {type(headers).__name__}"
        )
    checked: list[_Header] = []
    for index, pair in enumerate(pairs):
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            what = type(pair).__name__
            if isinstance(pair, tuple | list):
                what += f" of length {len(pair)}"
            raise TypeError(f"header {index} must be a (key, value) pair, not {what}")
        name, value = pair
        if name.__class__ is not str:
            raise TypeError(
                f"header {index}'s key must be str, not {type(name).__name__} ({name!r})"
            )
        if value is None or value.__class__ is bytes:
            checked.append((name, value))
        elif isinstance(value, str):
            checked.append((name, value.encode("utf-8")))
        elif isinstance(value, _BINARY):
            checked.append((name, bytes(value)))
        else:
            raise TypeError(
                f"header {name!r} value must be bytes, str or None, not {type(value).__name__}"
            )
    return tuple(checked) or None


def _check_interceptor_result(interceptor: object, record: object) -> ProducerRecord:
    if not isinstance(record, ProducerRecord):
        raise TypeError(
            f"interceptor {interceptor!r}: on_send must return a ProducerRecord, not "
            f"{type(record).__name__}"
        )
    return record


def _checked_partitioner(partitioner: Callable[..., Any]) -> Callable[..., int]:
    """The user's partitioner, with its answer checked: anything but an int would
    reach the encoder (and fail the whole batch) instead of failing this record."""

    def partition(record: ProducerRecord, cluster: Any) -> int:
        chosen = partitioner(record, cluster)
        if chosen.__class__ is not int:
            raise TypeError(
                f"the custom partitioner returned {type(chosen).__name__} ({chosen!r}) for "
                f"a record to {record.topic!r}: it must return an int"
            )
        return chosen

    partition.__wrapped__ = partitioner  # type: ignore[attr-defined]
    return partition


def _record_fields(
    record: object,
    value: Any = None,
    key: Any = None,
    headers: Any = None,
    partition: int | None = None,
    timestamp: int | None = None,
) -> tuple[str, Any, Any, Sequence[_Header] | None, int | None, int | None]:
    """A `ProducerRecord`'s fields as `send()` takes them (no headers: None), with
    `partition=` and `timestamp=` given beside it in place of the record's (as the
    blocking facade takes them). A value, key or headers beside it would be one too
    many (which counts?): a `TypeError`, as is anything else in `topic`'s place."""
    if not isinstance(record, ProducerRecord):
        raise TypeError(f"topic must be a str or a ProducerRecord, not {type(record).__name__}")
    if value is not None or key is not None or headers is not None:
        given = [
            n for n, v in (("value", value), ("key", key), ("headers", headers)) if v is not None
        ]
        raise TypeError(
            f"send() got a ProducerRecord and {', '.join(given)} beside it: pass either a "
            "ProducerRecord or topic, value, key=..., not both"
        )
    return (
        record.topic,
        record.value,
        record.key,
        record.headers or None,
        record.partition if partition is None else partition,
        record.timestamp if timestamp is None else timestamp,
    )


def checked_record(
    config: ProducerConfig, value: Any, key: Any, headers: Any, added: int = 0
) -> Any:
    """What `send()` would refuse of a record with this value, key and headers, raised
    before anything is sent (`TypeError` naming the field or header, and
    `RecordTooLargeError` over `max_request_size`, with `added` bytes of headers the
    caller adds counted); returns the headers as the encoder takes them. For a caller
    that commits to a record before it sends it (a `ConditionalWriter` claims the
    record's offset): a bad record then fails alone. A value or key with a serializer
    configured is the serializer's to check."""
    if config.value_serializer is None and not isinstance(value, _VALUE_TYPES):
        _check_types(value, None)
    if config.key_serializer is None and not isinstance(key, _VALUE_TYPES):
        _check_types(None, key)
    checked = None if headers is None else _check_headers(headers)
    if config.value_serializer is None and config.key_serializer is None:
        size = record_size(value, key, checked) + added
        if size > config.max_request_size:
            raise RecordTooLargeError(
                f"a record of {size} bytes is larger than max_request_size="
                f"{config.max_request_size}"
            )
    return checked


def _check_each(items: Sequence[Any], check: Callable[[Any], None]) -> None:
    """`check` each of a `send_many` call's values or keys; its `TypeError` names the
    record."""
    for index, item in enumerate(items):
        try:
            check(item)
        except TypeError as exc:
            raise TypeError(f"send_many: record {index}: {exc}") from None


def _check_types(value: Any, key: Any) -> None:
    if not isinstance(value, _VALUE_TYPES):
        raise TypeError(
            f"value must be bytes or None, not {type(value).__name__}: pass bytes, or set "
            "value_serializer"
        )
    if not isinstance(key, _VALUE_TYPES):
        raise TypeError(
            f"key must be bytes or None, not {type(key).__name__}: pass bytes, or set "
            "key_serializer"
        )


def _as_bytes(items: Sequence[Any]) -> list[bytes | None]:
    """bytes-like items as bytes (a copy: the caller may reuse its buffers)."""
    return [None if item is None else bytes(item) for item in items]


__all__ = ["HandedOffTransaction", "Producer"]
