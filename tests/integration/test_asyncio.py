"""The client in asyncio programs (issue 16): what an asyncio user sees, checked against
real brokers.

- An asyncio program (`asyncio.run`) sends 100,000 keyed records to Apache Kafka 4.4 and
  to Tansu and awaits
  every handle; a confluent-kafka consumer reads each back exactly once, at the offset its
  handle reported.
- Cancellation never loses a record's fate: a cancelled `await handle` leaves the record
  to be delivered (and the handle answers later); a cancelled sender (asyncio's
  `task.cancel()`, or a cancel scope on either backend) got a handle for every record it
  appended, and the log holds exactly those records.
- The same producer under uvloop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from tests.integration._backends import mock_cluster
from tests.integration._helpers import create_topic, read_partitions
from tests.integration._real import RealBroker
from trio_kafka.broker import Delay
from trio_kafka.client import Acknowledged, Ambiguous, RecordHandle, open_producer
from trio_kafka.protocol.messages.produce import ProduceRequest
from trio_kafka.testing import log_values

RECORDS = 100_000
PARTITIONS = 4


def read_back(bootstrap: str, topic: str, partitions: int) -> dict[bytes, list[tuple[int, int]]]:
    """value -> every (partition, offset) it was read at (confluent-kafka, to the ends)."""
    seen: dict[bytes, list[tuple[int, int]]] = {}
    for partition, offset, value in read_partitions(bootstrap, topic, partitions):
        seen.setdefault(value, []).append((partition, offset))
    return seen


def test_an_asyncio_program_sends_100k_keyed_records_read_back_once_at_their_offsets(
    real_broker: RealBroker,
) -> None:
    topic = real_broker.name("asyncio-keyed")

    async def main() -> list[Acknowledged]:
        await create_topic(real_broker.bootstrap, topic, PARTITIONS)
        async with open_producer(real_broker.bootstrap, linger=0.005) as producer:
            handles = [
                await producer.send(topic, b"%08d" % i, key=b"customer-%d" % (i % 101))
                for i in range(RECORDS)
            ]
            return [await handle for handle in handles]  # every outcome observed

    acks = asyncio.run(main())
    seen = read_back(real_broker.bootstrap, topic, PARTITIONS)
    assert len(seen) == RECORDS
    partition_of_key: dict[int, int] = {}
    for i, ack in enumerate(acks):
        places = seen[b"%08d" % i]
        assert len(places) == 1, f"record {i} read {len(places)} times: {places}"
        assert places[0] == (ack.partition, ack.offset), f"record {i}"
        # One key, one partition (the murmur2 partitioner, as Java and librdkafka).
        assert partition_of_key.setdefault(i % 101, ack.partition) == ack.partition


def _slow_produce(seconds: float) -> Any:
    return lambda call: Delay(seconds) if isinstance(call.request, ProduceRequest) else None


async def _cancelled_await_leaves_the_record_delivered(cancel: Callable[[Any], None]) -> None:
    async with mock_cluster(topics={"t": 1}) as cluster:
        cluster.add_hook(ProduceRequest, _slow_produce(0.3), times=1)
        async with open_producer(cluster.bootstrap) as producer:
            handle = await producer.send("t", b"awaited, then cancelled")
            waiter = asyncio.ensure_future(handle.wait())
            await asyncio.sleep(0.05)  # the request is in flight, held by the broker
            cancel(waiter)
            with pytest.raises(asyncio.CancelledError):
                await waiter
            assert not handle.done()
            ack = await handle  # the same handle answers once the broker does
        assert log_values(cluster, "t", 0) == [b"awaited, then cancelled"]
        assert ack.offset == 0


def test_asyncio_task_cancel_of_an_await_leaves_the_record_delivered() -> None:
    asyncio.run(_cancelled_await_leaves_the_record_delivered(lambda task: task.cancel()))


async def _sender_cancelled(cancel_after: int, blocked: bool) -> None:
    """A task sends until it is cancelled (asyncio's task.cancel()); every record it got a
    handle for is delivered, at the handle's offset, and no other record is written."""
    options: dict[str, Any] = {"linger": 0.001}
    if blocked:
        # A tiny buffer and a slow broker: the cancel finds send() waiting for room.
        options.update(buffer_memory=4096, batch_size=1024, max_block=30.0)
    async with mock_cluster(topics={"t": 1}) as cluster:
        if blocked:
            cluster.add_hook(ProduceRequest, _slow_produce(0.2))
        async with open_producer(cluster.bootstrap, **options) as producer:
            handles: list[RecordHandle] = []

            async def sender() -> None:
                i = 0
                while True:
                    handles.append(await producer.send("t", b"record %06d" % i))
                    i += 1

            task = asyncio.ensure_future(sender())
            while len(handles) < cancel_after:
                await asyncio.sleep(0.001)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            acks = [await h for h in handles]
        written = log_values(cluster, "t", 0)
        assert written == [b"record %06d" % i for i in range(len(handles))]
        assert [a.offset for a in acks] == list(range(len(handles)))


@pytest.mark.parametrize("blocked", [False, True], ids=["at-a-checkpoint", "waiting-for-room"])
def test_asyncio_task_cancel_of_a_sender_loses_no_record(blocked: bool) -> None:
    asyncio.run(_sender_cancelled(cancel_after=20 if blocked else 1000, blocked=blocked))


@pytest.mark.anyio
async def test_a_cancel_scope_around_sends_loses_no_record_on_either_backend() -> None:
    """The same as above with anyio's cancel scope (trio's Cancelled, asyncio's
    CancelledError underneath)."""
    async with mock_cluster(topics={"t": 1}) as cluster:
        async with open_producer(cluster.bootstrap, linger=0.001) as producer:
            handles: list[RecordHandle] = []
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tasks:

                    async def sender() -> None:
                        i = 0
                        while True:
                            handles.append(await producer.send("t", b"r%06d" % i))
                            i += 1

                    tasks.start_soon(sender)
                    while len(handles) < 1000:
                        await anyio.sleep(0.001)
                    scope.cancel()
            acks = [await h for h in handles]
        assert log_values(cluster, "t", 0) == [b"r%06d" % i for i in range(len(handles))]
        assert [a.offset for a in acks] == list(range(len(handles)))


def test_the_producer_runs_under_uvloop() -> None:
    pytest.importorskip("uvloop")

    async def main() -> tuple[str, list[int]]:
        async with mock_cluster(topics={"t": 2}) as cluster:
            async with open_producer(cluster.bootstrap) as producer:
                handles = [await producer.send("t", b"%d" % i, key=b"k") for i in range(5000)]
                acks = [await h for h in handles]
            loop = type(asyncio.get_running_loop()).__module__
        return loop, [a.offset for a in acks]

    loop, offsets = anyio.run(main, backend="asyncio", backend_options={"use_uvloop": True})
    assert loop.startswith("uvloop")
    assert offsets == list(range(5000))  # one key: one partition, in send order


async def _close_cut_short() -> RecordHandle:
    async with mock_cluster(topics={"t": 1}) as cluster:
        cluster.add_hook(ProduceRequest, _slow_produce(2.0), times=1)
        handles: list[RecordHandle] = []

        async def app() -> None:
            async with open_producer(cluster.bootstrap, close_timeout=30.0) as producer:
                handles.append(await producer.send("t", b"in flight at the cancel"))
            # Leaving the block: the close waits for the slow broker...

        task = asyncio.ensure_future(app())
        await asyncio.sleep(0.5)  # ...and is cancelled there (anyio's shield cannot stop it)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return handles[0]


def test_asyncio_task_cancel_of_the_close_settles_every_record() -> None:
    handle = asyncio.run(_close_cut_short())
    assert handle.done()
    assert isinstance(handle.outcome, Ambiguous)  # written, answer not seen: may be in the log
