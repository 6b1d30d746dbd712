"""The CAS backend of `BulkLoader` (client/_bulk.py): one task per partition drives the
partition's `LoadPipeline` (producer/_load.py), which decides every write.

Theory of operation
-------------------
The feeder wakes a partition's task for each batch its pipeline sealed, through a
zero-capacity channel (`_Partition`), so a partition has at most its window plus one
batch in memory. The task (`_CasPartition`) sends `next_send` batches to the leader
(`send_to_leader`, the client's one leader call in `_leader_calls.py`, one batch a
request, so each answer settles exactly one batch), awaits answers oldest first and
feeds them to `on_answer`; it asks for an idempotent producer id when the pipeline needs
one (`init_idempotent_producer_id`, `_producer_id.py`: the producer's own loop, with the
loader's `transaction_timeout`), sleeps `poll_delay`, refreshes metadata when told, and
reads the record `read_offset` names after a mismatch. It knows its loader as a
`CasLoader` (what it uses of it), so this module does not import the loader's.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

import anyio

from trio_kafka.client._leader_calls import send_to_leader
from trio_kafka.client._producer_id import init_idempotent_producer_id
from trio_kafka.client._reader import PartitionReader
from trio_kafka.errors import (
    ConcurrentWriteError,
    KafkaError,
)
from trio_kafka.net import ExponentialBackoff, KafkaSelector
from trio_kafka.producer._load import LoadBatch, LoadPipeline, Step
from trio_kafka.producer._rows import row_of
from trio_kafka.protocol.messages.produce import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)


class CasLoader(Protocol):
    """What a partition task uses of its `BulkLoader` (client/_bulk.py)."""

    selector: KafkaSelector
    topic: str
    request_timeout: float
    transaction_timeout: float
    reader: PartitionReader
    _load: bytes
    _backoff: ExponentialBackoff

    def _progress(self, records: int, size: int) -> None: ...


def one_batch_request(
    topic: str,
    partition: int,
    data: bytes,
    *,
    timeout: float,
    transactional_id: str | None = None,
) -> ProduceRequest:
    """An acks=all Produce of one record batch to one partition: how loads write, one
    batch a request, so each answer settles exactly one batch."""
    return ProduceRequest(
        transactional_id=transactional_id,
        acks=-1,
        timeout_ms=int(timeout * 1000),
        topic_data=[
            TopicProduceData(
                name=topic, partition_data=[PartitionProduceData(index=partition, records=data)]
            )
        ],
    )


class _Partition:
    """One partition's task: woken by the feeder for each sealed batch."""

    def __init__(self, loader: CasLoader, pipe: LoadPipeline) -> None:
        self.loader = loader
        self.pipe = pipe
        self._send, self._receive = anyio.create_memory_object_stream[None](0)

    async def fed(self, sealed: int) -> None:
        """The feeder added rows to the pipeline, sealing `sealed` batches."""
        for _ in range(sealed):
            await self.sealed()

    async def sealed(self) -> None:
        try:
            await self._send.send(None)
        except anyio.BrokenResourceError:
            # The partition's task ended with an error (only that closes its end early):
            # the task group is cancelling us to raise it; wait for that, adding nothing
            # of ours to the group (trio's channel left the send waiting, cancelled).
            await anyio.sleep_forever()

    async def close_input(self) -> None:
        await self._send.aclose()

    def discard(self) -> None:
        """Close both ends (anyio's streams warn when dropped open; a task cancelled
        before it started never closed its end)."""
        self._send.close()
        self._receive.close()

    async def run(self) -> None:
        raise NotImplementedError


class _CasPartition(_Partition):
    """Drives a CAS pipeline (see the module doc)."""

    def __init__(self, loader: CasLoader, pipe: LoadPipeline) -> None:
        super().__init__(loader, pipe)
        # batch -> the pending response of its request in flight, or the KafkaError
        # that kept it from leaving.
        self._pending: dict[LoadBatch, Any] = {}

    async def run(self) -> None:
        pipe = self.pipe
        async with self._receive:
            async for _ in self._receive:
                await self._pump()
                while self._must_settle():
                    await self._step()
        while not pipe.done:
            await self._step()

    def _must_settle(self) -> bool:
        pipe = self.pipe
        oldest = pipe.oldest_in_flight()
        if oldest is None:
            return pipe.queued > 0 and pipe.next_send(self.loader.selector.clock.now()) is None
        if len(pipe.in_flight) >= pipe.max_in_flight or pipe.queued > pipe.max_in_flight:
            return True
        pending = self._pending.get(oldest)
        return isinstance(pending, KafkaError) or (pending is not None and pending.done())

    async def _pump(self) -> None:
        loader, pipe = self.loader, self.pipe
        clock = loader.selector.clock
        while (batch := pipe.next_send(clock.now())) is not None:
            request = one_batch_request(
                loader.topic, pipe.partition, batch.data, timeout=loader.request_timeout
            )
            try:
                self._pending[batch] = await send_to_leader(
                    loader.selector,
                    loader.topic,
                    pipe.partition,
                    request,
                    timeout=loader.request_timeout,
                    backoff=loader._backoff,
                )
            except KafkaError as exc:
                self._pending[batch] = exc

    async def _step(self) -> None:
        """Make progress once: take the oldest answer, or do what the pipeline waits for."""
        loader, pipe = self.loader, self.pipe
        selector = loader.selector
        clock = selector.clock
        if (failed := pipe.error) is not None:
            raise failed
        batch = pipe.oldest_in_flight()
        if batch is None:
            if pipe.needs_producer_id:
                got = await init_idempotent_producer_id(
                    selector,
                    timeout=loader.request_timeout,
                    transaction_timeout=loader.transaction_timeout,
                    backoff=loader._backoff,
                    attempts=20,
                )
                assert got is not None  # wanted throughout: a None needs `wanted()` False
                pipe.set_producer(*got)
            delay = pipe.poll_delay(clock.now())
            if delay > 0:
                await anyio.sleep(delay)
            if pipe.refresh_metadata:
                with contextlib.suppress(KafkaError):
                    await selector.refresh_metadata([loader.topic])
                pipe.metadata_refreshed()
            await self._pump()
            return
        code, message, log_end = await self._answer(batch)
        step = pipe.on_answer(batch, code, clock.now(), message)
        if step is Step.READ:
            record = await loader.reader.read_at(
                loader.topic, pipe.partition, pipe.read_offset(batch)
            )
            row = row_of(record, loader._load) if record is not None else None
            step = pipe.on_read(batch, row, log_end)
        if step is Step.FAIL:
            error = pipe.error
            assert error is not None
            if isinstance(error, ConcurrentWriteError):
                error.foreign_record = await loader.reader.read_at(
                    loader.topic, pipe.partition, batch.expected_offset
                )
            raise error
        if step is Step.ACKNOWLEDGED:
            loader._progress(batch.count, batch.size)
        await self._pump()

    async def _answer(self, batch: LoadBatch) -> tuple[int | None, str, int]:
        """(the partition's error code or None when no answer came, message, log end)."""
        pending = self._pending.pop(batch)
        if isinstance(pending, KafkaError):
            return None, str(pending), -1
        try:
            response = await pending.wait()
        except KafkaError as exc:
            return None, str(exc), -1
        answer = response.responses[0].partition_responses[0]
        return answer.error_code, answer.error_message or "", answer.base_offset


__all__ = [
    "CasLoader",
    "one_batch_request",
]
