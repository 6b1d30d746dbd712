"""`UnknownTopics`: a producer's records and waits for topics it has no metadata for yet.

Theory of operation
-------------------
The Java client's `send()` waits for a new topic's metadata (up to `max.block.ms`): a
round trip per new topic, queued behind the Produce requests on the same connection, so
a first record to each of 1,000 topics spends seconds waiting (aiokafka#943 reports the
same of aiokafka). librdkafka's `produce()` never waits. Neither does this one: a record
for a topic the producer has no metadata for is kept here, its buffer bytes held, and
its handle is returned at once; the topic's later records queue behind it. One task per
such topic waits for the metadata (the selector asks for every topic named while a
request is out in the next one: a thousand new topics cost a request or two). When it
comes, the records are appended, in send order, in one step with nothing else running
between, and the core sees the topic from that step on (`Sender.held` keeps it from the
core until then): a record sent later cannot pass one sent earlier.

The handles: every kept record's handle points at the topic's *waiting batch* (a
`ProducerBatch` that is never sent, partition -1), which on placement `follow`s the
batches its records went to (the way a split batch follows its pieces), so `await
handle`, `outcome`, `add_done_callback` and the blocking producer's futures work on it
unchanged. A record the placement refuses (an explicit partition the topic does not
have) fails alone; if the metadata never comes (`max_block`), the topic does not exist,
the producer closes first or stops with a fatal error, every kept record of the topic
fails with that error: none was written.

`send()` still waits for the metadata, as Java's does, in a transactional producer
(its records belong to the transaction open at the send, which a record placed later
could outlive), with a custom partitioner (its exceptions are `send()`'s to raise, and
it needs the partition count), and while no broker has answered yet (an unreachable
address or a wrong security setting is then the error `send()` raises, where a user
sees it first). But its record joins the same queue first, as a *waiting* record
(`WaitingRecord`), and is placed with the others, in call order; its `send()` then
returns the handle (or raises the error) the placement gave it. Java appends when the
waiting thread wakes, so sends from several threads waiting on one topic land in the
order the threads happen to wake (a user trial saw m4, m2, m0, m1, m3, m5 from six
tasks: tests/unit/test_client_send_order.py). Each waiting send keeps its own wait
(its own `max_block`, its errors; closing cancels it); whichever wait sees the metadata
first places the whole queue and ends the others' waits. A waiting send that times
out or is cancelled leaves the queue with nothing appended; when a wait learns the
topic does not exist or is invalid, every record queued for it fails then, in one step.
Metadata that has come but that the core cannot use yet (a partition without a leader)
is waited out with the one backoff (`ExponentialBackoff`, `retry_backoff` growing to
`retry_backoff_max`).

So per partition, records are written in the order of their `send()` calls, whatever
the metadata state. A `send()` takes its place when it is called (past its one
checkpoint every 256 calls, which comes before anything is appended), except when the
buffer is full: it takes its place once room is found, as Java's does.

The sends that cannot be kept (CAS, `send_many`, `wait_for_topics`) wait here too
(`wait_for_topic`: behind the topic's queue, then for its metadata). Every wait for a
topic's metadata registers its cancel scope, so closing the producer ends them all
(`cancel_waits`), as Java's close wakes a send in `waitOnMetadata`.

The producer owns one `UnknownTopics` and gives it what it needs of the producer as
callables (`refuse`, `opened`, ...): this object decides nothing about sends that do
not concern a topic without metadata.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, NoReturn

import anyio

from trio_kafka.client._handles import RecordHandle
from trio_kafka.client._sender import Sender
from trio_kafka.core import (
    BatchSpan,
    DeliveryHandle,
    ExponentialBackoff,
    Headers,
    ProducerBatch,
    ProducerCore,
    record_size,
)
from trio_kafka.errors import (
    BrokerConnectionError,
    InvalidTopicError,
    KafkaError,
    ProducerClosedError,
    TopicAuthorizationError,
    UnknownTopicError,
)
from trio_kafka.net import (
    Event,
    KafkaSelector,
    TaskGroup,
    check_topic_name,
)


class WaitingRecord:
    """A record whose `send()` waits until it is placed (a transactional producer's, a
    custom partitioner's, any before a broker has answered): its fields, and what
    became of it."""

    __slots__ = ("fields", "outcome", "scope", "size")

    def __init__(self, fields: tuple[Any, ...], size: int) -> None:
        # (value, key, headers, partition, timestamp), as send() checked them.
        self.fields = fields
        # Buffer bytes held for it.
        self.size = size
        # Set once, by whoever placed or failed it: its handle, or why it was not
        # appended (raised by its send()).
        self.outcome: DeliveryHandle | BaseException | None = None
        # Its send()'s wait for the metadata, ended early when another task places or
        # fails the record (owned by that send()).
        self.scope: anyio.CancelScope | None = None

    def settle(self, outcome: DeliveryHandle | BaseException) -> None:
        self.outcome = outcome
        if self.scope is not None:
            self.scope.cancel()


class WaitingTopic:
    """A topic's records kept until its metadata comes: the *kept* ones (their handles
    returned at once) in `batch`, and the `waiting` ones, each at its place among them.
    Call order is kept-batch order with each waiting record before the kept record
    whose index it names."""

    __slots__ = ("batch", "kept_size", "partitions", "placed", "size", "waiting")

    def __init__(self, placed: Event) -> None:
        # The kept records (values, create times, extras) and their handles' batch;
        # None until the first (and again after they failed while waiting ones stay).
        self.batch: ProducerBatch | None = None
        # Each kept record's explicit partition, or None.
        self.partitions: list[int | None] = []
        # Buffer bytes held for every record of the queue, and for the kept ones.
        self.size = 0
        self.kept_size = 0
        # (how many kept records were sent before it, the record), in call order.
        self.waiting: list[tuple[int, WaitingRecord]] = []
        # Set once the records are placed or failed.
        self.placed = placed

    def kept(self) -> int:
        return 0 if self.batch is None else len(self.batch.values)


class UnknownTopics:
    """The records queued for topics without metadata, and every wait for a topic's
    metadata, of one producer (see the module doc)."""

    def __init__(
        self,
        core: ProducerCore,
        sender: Sender,
        selector: KafkaSelector,
        nursery: TaskGroup,
        now: Callable[[], float],
        *,
        keeps: bool,
        refuse: Callable[[], NoReturn],
        opened: Callable[[ProducerBatch], None],
        failed: Callable[[ProducerBatch], None] | None,
        progress: Callable[[], None],
        buffer_full: Callable[[int, float, list[BatchSpan] | None], KafkaError],
        check_send: Callable[[], None] | None,
    ) -> None:
        self._core = core
        self._config = core.config
        self._sender = sender
        self._selector = selector
        # The producer's task group: one task per topic whose kept records wait.
        self._nursery = nursery
        self._now = now
        self._new_event = sender.primitives.event
        # Whether records are kept (send() returns at once) once a broker has answered,
        # or every send() waits until its record is placed (module doc).
        self._keeps = keeps
        # The producer's: raise why nothing more can be sent (closed, or its fatal error).
        self._refuse = refuse
        # The producer's: an append opened a new batch (wake the sender, add the
        # partition to the transaction, hook the interceptors).
        self._opened = opened
        # The producer's interceptors' acknowledgements of a failed batch (None: none).
        self._failed = failed
        # The producer's: batches reached a final state, or records left the queue.
        self._progress = progress
        self._buffer_full = buffer_full
        # The transaction's check that a record may be appended now (None: no transaction).
        self._check_send = check_send
        self._backoff = ExponentialBackoff.of(self._config)
        # Records of topics whose metadata has not come yet, by topic, in call order.
        self._waiting: dict[str, WaitingTopic] = {}
        # Cancel scopes of the waits for a topic's metadata: closing cancels them.
        self._metadata_waits: set[anyio.CancelScope] = set()

    @property
    def any_waiting(self) -> bool:
        """Whether records wait for a topic's metadata (flush and close wait for them)."""
        return bool(self._waiting)

    # -- waiting for metadata ----------------------------------------------------------

    async def ask(self, topics: list[str], timeout: float) -> None:
        """One Metadata request for `topics`, for at most `timeout` (closing cancels
        it); a failure is left to the waits that follow, topic by topic."""
        with anyio.move_on_after(timeout) as scope:
            self._metadata_waits.add(scope)
            try:
                with contextlib.suppress(BrokerConnectionError):
                    await self._selector.refresh_metadata(topics)
            finally:
                self._metadata_waits.discard(scope)

    async def wait_for_topic(self, topic: str, deadline: float) -> None:
        """Wait as a send that cannot be kept does (CAS, `send_many`, a transaction):
        behind the records kept for the topic, then for its metadata."""
        waiting = self._waiting.get(topic)
        if waiting is not None:
            await waiting.placed.wait()
        await self._wait_for_metadata(topic, deadline)

    async def _wait_for_metadata(self, topic: str, deadline: float) -> None:
        selector = self._selector
        timeout = max(deadline - self._now(), 0.0)
        try:
            with anyio.CancelScope() as scope:
                self._metadata_waits.add(scope)
                try:
                    await selector.wait_for_topic(topic, timeout=timeout)
                finally:
                    self._metadata_waits.discard(scope)
            if scope.cancelled_caught:
                self._refuse()
        except UnknownTopicError as exc:
            # A bootstrap address is often also a metadata broker's: name each once.
            tried = ", ".join(dict.fromkeys(selector.node_address(n) for n in selector.node_ids))
            raise UnknownTopicError(f"{exc}. Brokers known: {tried}", topic=topic) from None
        self._sender.sync_metadata()

    def cancel_waits(self) -> None:
        """Closing: end every wait for a topic's metadata."""
        for scope in self._metadata_waits:
            scope.cancel()

    # -- queueing ------------------------------------------------------------------------

    async def queue(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: Headers | None,
        partition: int | None,
        timestamp: int | None,
        deadline: float,
    ) -> DeliveryHandle | None:
        """Queue a record of a topic the core does not know yet (its `append` raised
        `UnknownTopicError`) behind the topic's earlier ones: kept (its handle returned
        at once), or waited for until placed. None when the buffer has no room for it
        (the caller waits for room, as for any record)."""
        accumulator = self._core.accumulator
        size = record_size(value, key, headers)
        if accumulator.buffer_used + size > accumulator.buffer_limit:
            accumulator.no_room(size)  # (raises RecordTooLargeError past buffer_memory)
            return None
        waiting = self._waiting.get(topic)
        if waiting is None:
            check_topic_name(topic)  # InvalidTopicError here, from send()
            waiting = WaitingTopic(self._new_event())
            self._waiting[topic] = waiting
            self._sender.held.add(topic)
        waiting.size += size
        accumulator.buffer_used += size
        if self._keeps and self._selector.metadata.updated_at is not None:
            return self._keep(topic, waiting, value, key, headers, partition, timestamp, size)
        # A transaction's records belong to it, a custom partitioner's error is send()'s,
        # and until a broker answers, an unreachable cluster or a wrong security setting
        # is too: send() waits, its record in the queue all the same.
        record = WaitingRecord((value, key, headers, partition, timestamp), size)
        waiting.waiting.append((waiting.kept(), record))
        return await self._wait_until_placed(topic, waiting, record, deadline)

    def _keep(
        self,
        topic: str,
        waiting: WaitingTopic,
        value: bytes | None,
        key: bytes | None,
        headers: Headers | None,
        partition: int | None,
        timestamp: int | None,
        size: int,
    ) -> RecordHandle:
        now = self._now()
        batch = waiting.batch
        if batch is None:
            batch = waiting.batch = ProducerBatch(
                topic, -1, 0, now, self._core.accumulator.wall_offset
            )
            deadline = now + self._config.max_block
            self._nursery.start_soon(self._place_when_known, topic, waiting, batch, deadline)
        index = len(batch.values)
        batch.values.append(value)
        if now >= batch.tick:
            batch.stamp(index, now)
        if key is not None or headers or timestamp is not None:
            batch.set_extras(index, timestamp, key, headers)
        waiting.partitions.append(partition)
        waiting.kept_size += size
        return RecordHandle(batch, index)

    async def _wait_until_placed(
        self, topic: str, waiting: WaitingTopic, record: WaitingRecord, deadline: float
    ) -> DeliveryHandle:
        """A waiting record's send(): wait for the metadata as Java's send() does (its
        own `max_block`, its errors, closing cancels it), but do not append on waking:
        place the queue, whose order is call order, not the order tasks wake in."""
        try:
            with anyio.CancelScope() as record.scope:  # (cancelled once it is settled)
                attempts = 0
                while True:
                    await self._wait_for_metadata(topic, deadline)
                    if record.outcome is None:
                        self._place_known()
                    if record.outcome is not None:
                        break
                    # (metadata the core cannot use yet, a partition without a leader)
                    await anyio.sleep(self._backoff.backoff(attempts, self._selector.rng))
                    attempts += 1
        except BaseException as exc:
            if record.outcome is None:
                if isinstance(exc, KafkaError) and self._gone(exc, deadline):
                    self._settle_waiting(topic, exc)  # every record queued for it
                else:
                    self._withdraw(topic, waiting, record)  # appended nothing
                raise
            if not isinstance(exc, KafkaError):
                # Cancelled after another task placed it (asyncio can cancel a task
                # whose event was set): it will be written, its handle is lost.
                raise
        outcome = record.outcome
        assert outcome is not None  # (its scope is cancelled only once it is settled)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _gone(self, error: KafkaError, deadline: float) -> bool:
        """Whether a wait for the topic ended before its deadline because the brokers
        say the topic does not exist, is invalid or is not for this client: every record queued for it fails
        then, in one step (a timeout fails only the records whose `max_block` passed;
        it raises `UnknownTopicError` too, at the deadline give or take a rounding)."""
        return (
            isinstance(error, UnknownTopicError | InvalidTopicError | TopicAuthorizationError)
            and self._now() < deadline - 0.001
        )

    def _withdraw(self, topic: str, waiting: WaitingTopic, record: WaitingRecord) -> None:
        """A waiting record's send() failed or was cancelled before it was placed: out
        of the queue, its buffer bytes freed."""
        waiting.waiting = [entry for entry in waiting.waiting if entry[1] is not record]
        waiting.size -= record.size
        self._core.accumulator.buffer_used -= record.size
        if self._waiting.get(topic) is waiting and not waiting.waiting and waiting.batch is None:
            del self._waiting[topic]
            self._sender.release([topic])  # (the core may know it already)
            waiting.placed.set()
        self._progress()

    # -- placing -------------------------------------------------------------------------

    async def _place_when_known(
        self, topic: str, waiting: WaitingTopic, batch: ProducerBatch, deadline: float
    ) -> None:
        """The kept records' wait for the metadata (one task per topic)."""

        def mine() -> bool:  # (not placed by another's wake, nor failed and renewed)
            return self._waiting.get(topic) is waiting and waiting.batch is batch

        attempts = 0
        while True:
            try:
                await self._wait_for_metadata(topic, deadline)
            except KafkaError as exc:
                if mine():
                    if self._gone(exc, deadline):
                        self._settle_waiting(topic, exc)
                    else:
                        self._settle_kept(topic, waiting, exc)
                return
            if not mine():
                return  # settled meanwhile (closed, or a fatal error)
            fatal = self._sender.fatal_error
            if fatal is not None:
                self._settle_waiting(topic, fatal)
                return
            self._place_known()
            if not mine():
                return  # placed
            # (metadata the core cannot use yet, a partition without a leader: wait on)
            await anyio.sleep(self._backoff.backoff(attempts, self._selector.rng))
            attempts += 1

    def _place_known(self) -> None:
        """Place the records of every waiting topic the metadata now has, in one step:
        one Metadata answer often brings hundreds of them (each topic's task, when it
        wakes, then finds its records placed), and the core is given the new snapshot
        once, not once per topic."""
        metadata = self._selector.metadata
        known = []
        for topic in self._waiting:
            found = metadata.topic(topic)
            if found is not None and found.is_usable:
                known.append(topic)
        self._sender.release(known)
        cluster = self._core.cluster
        for topic in known:
            if cluster.num_partitions(topic):
                self._place(topic, self._waiting[topic])
            else:
                self._sender.held.add(topic)

    def _place(self, topic: str, waiting: WaitingTopic) -> None:
        """Append the queue's records in call order, with nothing else running between
        (the core sees the topic from now on); point the kept records' batch at where
        they went, and give each waiting record its handle or its error."""
        del self._waiting[topic]
        self._core.accumulator.buffer_used -= waiting.size  # each append holds its own again
        now = self._now()
        batch = waiting.batch
        kept = waiting.kept()
        queued = waiting.waiting
        pieces: list[tuple[int, ProducerBatch, int]] = []
        next_waiting = 0
        for index in range(kept + 1):
            while next_waiting < len(queued) and queued[next_waiting][0] == index:
                self._place_waiting(topic, queued[next_waiting][1], now)
                next_waiting += 1
            if index < kept:
                assert batch is not None
                handle = self._place_kept(topic, waiting, batch, index, now)
                last = pieces[-1] if pieces else None
                if (
                    last is None
                    or last[1] is not handle.batch
                    or last[2] + index - last[0] != handle.index
                ):
                    pieces.append((index, handle.batch, handle.index))
        if batch is not None:
            batch.follow(pieces)
        waiting.placed.set()
        self._sender.wake()
        self._progress()

    def _place_waiting(self, topic: str, record: WaitingRecord, now: float) -> None:
        value, key, headers, partition, timestamp = record.fields
        try:
            if self._check_send is not None:
                self._check_send()  # (the transaction may have ended meanwhile)
            handle = self._core.append(topic, value, key, headers, partition, timestamp, now)
        except Exception as exc:  # raised by its send(), as if it had appended itself
            record.settle(exc)
            return
        if handle is None:  # (cannot happen: its bytes were held for it)
            record.settle(self._buffer_full(record.size, 0.0, None))
            return
        if handle.index == 0:
            self._opened(handle.batch)
        record.settle(handle)

    def _place_kept(
        self, topic: str, waiting: WaitingTopic, batch: ProducerBatch, index: int, now: float
    ) -> DeliveryHandle:
        extras, keys = batch.extras, batch.keys
        timestamp, key, headers = extras.get(index, (None, None, None)) if extras else (None,) * 3
        if key is None and keys is not None and index < len(keys):
            key = keys[index]  # (a key alone is kept in the batch's key list)
        value = batch.values[index]
        partition = waiting.partitions[index]
        try:
            handle = self._core.append(topic, value, key, headers, partition, timestamp, now)
        except Exception as exc:  # an explicit partition the topic does not have
            error = exc if isinstance(exc, KafkaError) else _not_appended(topic, exc)
            return self._failed_alone(batch, index, partition, error, now)
        if handle is None:  # (cannot happen: its bytes were held for it)
            error = self._buffer_full(record_size(value, key, headers), 0.0, None)
            return self._failed_alone(batch, index, partition, error, now)
        if handle.index == 0:
            self._opened(handle.batch)
        return handle

    # -- failing -------------------------------------------------------------------------

    def _failed_alone(
        self,
        batch: ProducerBatch,
        index: int,
        partition: int | None,
        error: KafkaError,
        now: float,
    ) -> DeliveryHandle:
        """Kept record `index` of `batch` could not be appended: it fails alone, in a
        batch of its own."""
        where = -1 if partition is None else partition
        alone = ProducerBatch(batch.topic, where, 0, now, batch.wall_offset)
        alone.values.append(batch.values[index])
        alone.stamp(0, now)
        alone.fail(error)
        if self._failed is not None:
            self._failed(alone)
        return DeliveryHandle(alone, 0)

    def _settle_kept(self, topic: str, waiting: WaitingTopic, error: KafkaError) -> None:
        """The kept records' wait failed: they fail with `error` (none was written);
        the waiting records' sends, each waiting on its own, decide for theirs."""
        if not waiting.waiting:
            self._settle_waiting(topic, error)
            return
        batch = waiting.batch
        assert batch is not None
        self._core.accumulator.buffer_used -= waiting.kept_size
        waiting.size -= waiting.kept_size
        waiting.batch, waiting.partitions, waiting.kept_size = None, [], 0
        # Sent before any later kept record: each now goes before kept record 0.
        waiting.waiting = [(0, record) for _, record in waiting.waiting]
        self._fail_kept(batch, error)
        self._progress()

    def _settle_waiting(self, topic: str, error: KafkaError) -> None:
        """Fail every record queued for `topic` with `error` (none was written)."""
        waiting = self._waiting.pop(topic, None)
        if waiting is None:
            return
        self._sender.held.discard(topic)
        self._core.accumulator.buffer_used -= waiting.size
        for _, record in waiting.waiting:
            record.settle(error)
        if waiting.batch is not None:
            self._fail_kept(waiting.batch, error)
        waiting.placed.set()
        self._progress()

    def _fail_kept(self, batch: ProducerBatch, error: KafkaError) -> None:
        batch.fail(error)
        if self._failed is not None:
            self._failed(batch)

    def settle_all(self, error: KafkaError | None = None, timeout: float = 0.0) -> None:
        """Closing (`error` None: a ProducerClosedError naming the topic) or a fatal
        error: fail every queued record."""
        why = ""
        if error is None and self._selector.metadata.updated_at is None:
            servers = ",".join(f"{h}:{p}" for h, p in self._selector.config.bootstrap_servers)
            why = f" (no Kafka broker has answered yet: is one running at {servers}?)"
        for topic in list(self._waiting):
            self._settle_waiting(
                topic,
                error
                or ProducerClosedError(
                    f"the producer closed (close timeout {timeout} s) before the metadata "
                    f"of topic {topic!r} came{why}; this record was not written"
                ),
            )


def _not_appended(topic: str, exc: Exception) -> KafkaError:
    """Not a refusal of the producer's (a value smuggled in after send()'s checks, a
    bug): this record fails, alone, with it as the cause."""
    error = KafkaError(f"a record kept for topic {topic!r} could not be appended: {exc!r}")
    error.__cause__ = exc
    return error


__all__ = ["UnknownTopics"]
