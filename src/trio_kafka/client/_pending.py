"""Records sent to a topic before its metadata came: `send()` does not wait for it.

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

`send()` still waits, as before, in a transactional producer (its records belong to the
transaction open at the send, which a record placed later could outlive), with a custom
partitioner (its exceptions are `send()`'s to raise, and it needs the partition count),
and while no broker has answered yet (an unreachable address or a wrong security
setting is then the error `send()` raises, where a user sees it first).
"""

from __future__ import annotations

import anyio

from trio_kafka.client._handles import RecordHandle
from trio_kafka.client._producer_base import ProducerBase
from trio_kafka.client._waiting_topic import WaitingTopic
from trio_kafka.errors import KafkaError, ProducerClosedError
from trio_kafka.net import check_topic_name
from trio_kafka.producer import (
    DeliveryHandle,
    Headers,
    ProducerBatch,
    record_size,
)


class PendingTopicsMixin(ProducerBase):
    """Keeping, placing and failing the records of topics waiting for metadata."""

    def _hold(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: Headers | None,
        partition: int | None,
        timestamp: int | None,
    ) -> RecordHandle | None:
        """Keep a record of a topic the core does not know yet (its `append` raised
        `UnknownTopicError`); its handle, or None when the buffer has no room for it
        (the caller waits for room, as for any record)."""
        accumulator = self._core.accumulator
        size = record_size(value, key, headers)
        if accumulator.buffer_used + size > accumulator.buffer_limit:
            accumulator.no_room(size)  # (raises RecordTooLargeError past buffer_memory)
            return None
        waiting = self._waiting.get(topic)
        now = self._now()
        if waiting is None:
            check_topic_name(topic)  # InvalidTopicError here, from send()
            waiting = WaitingTopic(topic, now, accumulator.wall_offset, self._new_event())
            self._waiting[topic] = waiting
            self._sender.held.add(topic)
            deadline = now + self.config.max_block
            self._nursery.start_soon(self._place_when_known, topic, waiting, deadline)
        batch = waiting.batch
        index = len(batch.values)
        batch.values.append(value)
        if now >= batch.tick:
            batch.stamp(index, now)
        if key is not None or headers or timestamp is not None:
            batch.set_extras(index, timestamp, key, headers)
        waiting.partitions.append(partition)
        waiting.size += size
        accumulator.buffer_used += size
        return RecordHandle(batch, index)

    async def _place_when_known(self, topic: str, waiting: WaitingTopic, deadline: float) -> None:
        while True:
            try:
                await self._wait_for_metadata(topic, deadline)
            except KafkaError as exc:
                if self._waiting.get(topic) is waiting:  # (not placed by another's wake)
                    self._settle_waiting(topic, exc)
                return
            if self._waiting.get(topic) is not waiting:
                return  # settled meanwhile (closed, or a fatal error)
            fatal = self._sender.fatal_error
            if fatal is not None:
                self._settle_waiting(topic, fatal)
                return
            self._place_known()
            if self._waiting.get(topic) is not waiting:
                return  # placed
            # (metadata the core cannot use yet, a partition without a leader: wait on)
            await anyio.sleep(self.config.retry_backoff)

    def _place_known(self) -> None:
        """Place the records of every waiting topic the metadata now has, in one step:
        one Metadata answer often brings hundreds of them (each topic's task, when it
        wakes, then finds its records placed), and the core is given the new snapshot
        once, not once per topic."""
        metadata = self.selector.metadata
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
        """Append the kept records in send order, with nothing else running between
        (the core sees the topic from now on), and point their batch at where they
        went."""
        del self._waiting[topic]
        accumulator = self._core.accumulator
        accumulator.buffer_used -= waiting.size  # each append holds its own again
        batch = waiting.batch
        extras, keys = batch.extras, batch.keys
        append = self._append
        now = self._now()
        pieces: list[tuple[int, ProducerBatch, int]] = []
        for index, value in enumerate(batch.values):
            timestamp, key, headers = (
                extras.get(index, (None, None, None)) if extras else (None, None, None)
            )
            if key is None and keys is not None and index < len(keys):
                key = keys[index]  # (a key alone is kept in the batch's key list)
            partition = waiting.partitions[index]
            try:
                handle: DeliveryHandle | None = append(
                    topic, value, key, headers, partition, timestamp, now
                )
            except Exception as exc:  # an explicit partition the topic does not have
                error = exc if isinstance(exc, KafkaError) else _not_appended(topic, exc)
                handle = self._failed_alone(batch, index, partition, error, now)
            else:
                if handle is None:  # (cannot happen: its bytes were held for it)
                    error = self._buffer_full(record_size(value, key, headers), 0.0, None)
                    handle = self._failed_alone(batch, index, partition, error, now)
                elif handle.index == 0:
                    self._opened(handle.batch)
            last = pieces[-1] if pieces else None
            if (
                last is None
                or last[1] is not handle.batch
                or last[2] + index - last[0] != handle.index
            ):
                pieces.append((index, handle.batch, handle.index))
        batch.follow(pieces)
        waiting.placed.set()
        self._sender.wake()
        self._notify_progress()

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
        if self._interceptors:
            self._acknowledge(alone)
        return DeliveryHandle(alone, 0)

    def _settle_waiting(self, topic: str, error: KafkaError) -> None:
        """Fail every record kept for `topic` with `error` (none was written)."""
        waiting = self._waiting.pop(topic, None)
        if waiting is None:
            return
        self._sender.held.discard(topic)
        self._core.accumulator.buffer_used -= waiting.size
        waiting.batch.fail(error)
        if self._interceptors:
            self._acknowledge(waiting.batch)
        waiting.placed.set()
        self._notify_progress()

    def _settle_all_waiting(self, error: KafkaError | None = None, timeout: float = 0.0) -> None:
        """Closing (`error` None: a ProducerClosedError naming the topic) or a fatal
        error: fail every kept record."""
        why = ""
        if error is None and self.selector.metadata.updated_at is None:
            servers = ",".join(f"{h}:{p}" for h, p in self.selector.config.bootstrap_servers)
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


__all__ = ["PendingTopicsMixin"]
