"""The trio driver over in-memory streams to the mock broker's handlers, in virtual time.

No sockets: `trio_kafka.testing.MemoryTransport` hands out `trio.testing` memory stream
pairs, the other end served by `Cluster.serve_stream`. `MockClock(autojump_threshold=0)` makes every
timeout instant, so max_block, close_timeout and delivery timeouts are cheap to test.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from trio_kafka.broker import BLACKHOLE, Cluster
from trio_kafka.client import Acknowledged, Ambiguous, Producer, ProducerRecord, open_producer
from trio_kafka.client._producer import SEND_CHECKPOINT_EVERY
from trio_kafka.core import Failed
from trio_kafka.errors import (
    BrokerConnectionError,
    BufferFullError,
    ConfigError,
    InvalidPartitionError,
    ProducerClosedError,
)
from trio_kafka.protocol.messages.produce import ProduceRequest
from trio_kafka.testing import WALL_CLOCK, MemoryTransport, make_cluster, producer_for


async def test_records_are_acknowledged_with_offsets_and_create_time(
    autojump_clock: trio.testing.MockClock,
    cluster_and_transport: tuple[Cluster, MemoryTransport],
) -> None:
    _, transport = cluster_and_transport
    async with producer_for(transport) as producer:
        handles = [await producer.send("t", b"v%d" % i, partition=0) for i in range(10)]
        record = await producer.send(ProducerRecord("t", b"r", partition=0, timestamp=123))
        await producer.flush()
    assert [(await h).offset for h in handles] == list(range(10))
    ack = record.result()
    assert (ack.offset, ack.timestamp) == (10, 123)
    assert handles[0].result().timestamp == int(WALL_CLOCK * 1000)


async def test_log_append_time_comes_from_the_response(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = make_cluster()
    cluster.create_topic("lat", 1, {"message.timestamp.type": "LogAppendTime"})
    transport = MemoryTransport(cluster, nursery)
    async with open_producer(
        bootstrap="broker0:9092", transport=transport, wall_clock=lambda: 1.0
    ) as producer:
        ack = await producer.send_and_wait("lat", b"x")
    assert ack.timestamp == int(WALL_CLOCK * 1000)


async def test_a_producer_opened_with_anothers_seams_keeps_its_wall_clock(
    autojump_clock: trio.testing.MockClock,
    cluster_and_transport: tuple[Cluster, MemoryTransport],
) -> None:
    _, transport = cluster_and_transport
    async with open_producer(
        bootstrap="broker0:9092",
        transport=transport,
        wall_clock=lambda: 5000.0 + trio.current_time(),
    ) as producer:
        await trio.sleep(2.0)
        assert producer.wall_clock() == pytest.approx(5000.0 + trio.current_time())
        async with open_producer(selector=producer.selector, **producer.seams()) as beside:
            await trio.sleep(1.0)
            assert beside.wall_clock() == pytest.approx(producer.wall_clock())
            sent_at = beside.wall_clock()
            ack = await beside.send_and_wait("t", b"x", partition=0)
        assert ack.timestamp == int(sent_at * 1000) == 5_003_000


async def test_send_yields_to_trio_only_every_256_calls(
    autojump_clock: trio.testing.MockClock,
    cluster_and_transport: tuple[Cluster, MemoryTransport],
) -> None:
    _, transport = cluster_and_transport
    async with producer_for(transport, linger=0.9) as producer:
        await producer.send_and_wait("t", b"warm up")  # metadata and producer id
        me = trio.lowlevel.current_task()

        class Steps(trio.abc.Instrument):
            """Counts how often this task is resumed: once per yield to trio."""

            count = 0

            def before_task_step(self, task: trio.lowlevel.Task) -> None:
                if task is me:
                    Steps.count += 1

        trio.lowlevel.add_instrument(Steps())
        await trio.lowlevel.checkpoint()
        before = Steps.count
        for _ in range(SEND_CHECKPOINT_EVERY - 1 - producer._calls % SEND_CHECKPOINT_EVERY):
            await producer.send("t", b"x")
        assert Steps.count == before  # no yield yet
        await producer.send("t", b"x")
        assert Steps.count == before + 1  # the 256th call checkpointed once


async def test_buffer_full_blocks_for_max_block_then_raises(
    autojump_clock: trio.testing.MockClock,
    cluster_and_transport: tuple[Cluster, MemoryTransport],
) -> None:
    cluster, transport = cluster_and_transport
    cluster.add_hook(ProduceRequest, lambda call: BLACKHOLE)
    async with producer_for(
        transport, buffer_memory=4096, batch_size=1024, max_block=2.0, close_timeout=0.0
    ) as producer:
        start = trio.current_time()
        with pytest.raises(BufferFullError, match="buffer_memory=4096"):
            for _ in range(100):
                await producer.send("t", b"x" * 500)
        assert trio.current_time() - start == pytest.approx(2.0, abs=0.5)


async def test_buffer_full_with_drop_raises_at_once(
    autojump_clock: trio.testing.MockClock,
    cluster_and_transport: tuple[Cluster, MemoryTransport],
) -> None:
    cluster, transport = cluster_and_transport
    cluster.add_hook(ProduceRequest, lambda call: BLACKHOLE)
    async with producer_for(
        transport, buffer_memory=4096, buffer_full_strategy="drop", close_timeout=0.0
    ) as producer:
        start = trio.current_time()
        with pytest.raises(BufferFullError, match="drop"):
            for _ in range(100):
                await producer.send("t", b"x" * 500)
        assert trio.current_time() == start


async def test_a_misspelt_option_names_the_right_one(
    autojump_clock: trio.testing.MockClock,
    cluster_and_transport: tuple[Cluster, MemoryTransport],
) -> None:
    _, transport = cluster_and_transport
    with pytest.raises(ConfigError, match="'linger'"):
        async with producer_for(transport, lingr=0.1):
            pass


async def test_acks_0_reports_offset_minus_one(
    autojump_clock: trio.testing.MockClock,
    cluster_and_transport: tuple[Cluster, MemoryTransport],
) -> None:
    cluster, transport = cluster_and_transport
    async with producer_for(transport, acks=0, enable_idempotence=False) as producer:
        handle = await producer.send("t", b"x", partition=1)
        await producer.flush()
    assert handle.result().offset == -1
    assert cluster.state.partition("t", 1).log.log_end_offset == 1  # type: ignore[union-attr]


async def test_serializers_and_interceptors(
    autojump_clock: trio.testing.MockClock,
    cluster_and_transport: tuple[Cluster, MemoryTransport],
) -> None:
    cluster, transport = cluster_and_transport
    acknowledged: list[Any] = []

    class Tag:
        def on_send(self, record: ProducerRecord) -> ProducerRecord:
            return record._replace(headers=[*record.headers, ("via", b"tag")])

        def on_acknowledgement(self, outcome: Any) -> None:
            acknowledged.append(outcome)

    async with producer_for(
        transport,
        value_serializer=lambda v: v.encode(),
        key_serializer=lambda k: k.encode(),
        interceptors=[Tag()],
    ) as producer:
        await producer.send_and_wait("t", "hello", key="k", partition=2)
    [batch] = cluster.decoded("t", 2)
    [record] = batch.records
    assert (record.key, record.value, record.headers) == (b"k", b"hello", (("via", b"tag"),))
    assert [type(o) for o in acknowledged] == [Acknowledged]


async def test_a_value_of_the_wrong_type_is_a_clear_error(
    autojump_clock: trio.testing.MockClock,
    cluster_and_transport: tuple[Cluster, MemoryTransport],
) -> None:
    _, transport = cluster_and_transport
    async with producer_for(transport) as producer:
        with pytest.raises(TypeError, match="value_serializer"):
            await producer.send("t", "text")


async def test_leaving_the_block_with_an_error_fails_unsent_records_at_once(
    autojump_clock: trio.testing.MockClock,
    cluster_and_transport: tuple[Cluster, MemoryTransport],
) -> None:
    _, transport = cluster_and_transport
    with pytest.raises(RuntimeError):
        async with producer_for(transport, linger=0.9) as producer:
            handle = await producer.send("t", b"never sent")
            raise RuntimeError("user code failed")
    outcome = handle.outcome
    assert isinstance(outcome, Failed) and isinstance(outcome.error, ProducerClosedError)
    with pytest.raises(ProducerClosedError):
        await producer.send("t", b"late")


async def test_unreachable_brokers_expire_records_as_failed_not_ambiguous(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = make_cluster(topics={"t": 1})
    transport = MemoryTransport(cluster, nursery)
    async with producer_for(
        transport, delivery_timeout=5.0, request_timeout=2.0, linger=0.0
    ) as producer:
        await producer.send_and_wait("t", b"first")
        transport.refuse = True
        for node in producer.selector.node_ids:
            connection = producer.selector._nodes[node].connection
            if connection is not None:
                await connection.aclose()
        handle = await producer.send("t", b"second")
        outcome = None
        with trio.fail_after(30):
            while not handle.done():
                await trio.sleep(0.5)
        outcome = handle.outcome
    assert isinstance(outcome, Failed), outcome


async def test_close_returns_at_its_timeout_when_the_broker_never_answers(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = make_cluster(topics={"t": 1})
    cluster.add_hook(ProduceRequest, lambda call: BLACKHOLE)
    async with producer_for(MemoryTransport(cluster, nursery), close_timeout=0.3) as producer:
        handle = await producer.send("t", b"x")
        queued = await producer.send("t", b"y" * 20_000)  # a second batch, never sent
        closing = trio.current_time()
    assert trio.current_time() - closing == pytest.approx(0.3)
    assert isinstance(handle.outcome, Ambiguous)  # it left: may have been written
    assert queued.done() and not queued.succeeded()


async def test_no_broker_at_all_fails_sends_at_max_block_and_closes_at_once(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    transport = MemoryTransport(make_cluster(), nursery, refuse=True)
    start = trio.current_time()
    async with producer_for(transport, max_block=0.3, close_timeout=0.3) as producer:
        with pytest.raises(BrokerConnectionError, match="'t'"):
            await producer.send("t", b"x")
        failed = trio.current_time()
    assert failed - start == pytest.approx(0.3)
    assert trio.current_time() == failed  # nothing to flush: no close_timeout spent


async def test_send_many_takes_values_in_bulk(
    autojump_clock: trio.testing.MockClock,
    cluster_and_transport: tuple[Cluster, MemoryTransport],
) -> None:
    _, transport = cluster_and_transport
    async with producer_for(transport, buffer_memory=64 * 1024) as producer:
        bulk = await producer.send_many([b"%05d" % i for i in range(5000)], topic="t")
        assert await bulk == 5000
        assert len(bulk.handles()) == 5000
        assert isinstance(producer, Producer)
        assert "open" in repr(producer)


async def test_send_many_to_a_partition_writes_keys_and_values_in_order(
    autojump_clock: trio.testing.MockClock,
    cluster_and_transport: tuple[Cluster, MemoryTransport],
) -> None:
    cluster, transport = cluster_and_transport
    values = [b"%05d" % i for i in range(3000)]
    keys = [b"k%d" % (i % 7) if i % 3 else None for i in range(3000)]
    async with producer_for(transport, buffer_memory=64 * 1024, batch_size=4096) as producer:
        bulk = await producer.send_many(values, topic="t", partition=2, keys=keys)
        assert await bulk == 3000
    written = [(r.key, r.value) for b in cluster.decoded("t", 2) for r in b.records]
    assert written == list(zip(keys, values, strict=True))
    assert not list(cluster.decoded("t", 0)) and not list(cluster.decoded("t", 1))


async def test_send_many_refuses_bad_keys_and_partitions_by_name(
    autojump_clock: trio.testing.MockClock,
    cluster_and_transport: tuple[Cluster, MemoryTransport],
) -> None:
    _, transport = cluster_and_transport
    async with producer_for(transport) as producer:
        with pytest.raises(TypeError, match="keys= needs partition="):
            await producer.send_many([b"v"], topic="t", keys=[b"k"])
        with pytest.raises(ValueError, match="2 keys for 1 values"):
            await producer.send_many([b"v"], topic="t", partition=0, keys=[b"k", b"l"])
        with pytest.raises(TypeError, match="key must be bytes or None, not str"):
            await producer.send_many([b"v"], topic="t", partition=0, keys=["k"])
        with pytest.raises(TypeError, match="partition must be an int or None, not str"):
            await producer.send_many([b"v"], topic="t", partition="0")  # type: ignore[arg-type]
        with pytest.raises(InvalidPartitionError, match="partition 3 of topic 't'"):
            await producer.send_many([b"v"], topic="t", partition=3)
