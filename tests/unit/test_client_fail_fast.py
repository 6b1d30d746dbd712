"""send() fails fast when waiting cannot help, in virtual time (MockClock, autojump).

An invalid topic name fails before any request; a topic the brokers say does not exist
(auto-creation off) or is invalid fails once metadata says so, well before `max_block`;
when no broker ever answered, the connection is blamed, not the topic.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing

from trio_kafka import (
    BrokerConnectionError,
    InvalidPartitionError,
    InvalidTopicError,
    KafkaError,
    ProducerClosedError,
    UnknownTopicError,
    open_producer,
)
from trio_kafka.broker import BLACKHOLE, ClusterOptions, HookCall
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol.messages.metadata import MetadataRequest
from trio_kafka.testing import MemoryTransport, make_cluster, producer_for

MAX_BLOCK = 60.0


@pytest.mark.parametrize(
    ("topic", "why"),
    [
        ("bad topic name!", "it contains ' !'"),
        ("", "it is empty"),
        (".", "'.' and '..' are not allowed"),
        ("..", "'.' and '..' are not allowed"),
        ("x" * 250, "it is 250 characters long (at most 249)"),
        ("caf\u00e9", "it contains 'é'"),
    ],
)
async def test_an_invalid_topic_name_fails_at_once_naming_it(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery, topic: str, why: str
) -> None:
    transport = MemoryTransport(make_cluster(topics={"t": 1}), nursery)
    async with producer_for(transport, max_block=MAX_BLOCK) as producer:
        start = trio.current_time()
        with pytest.raises(InvalidTopicError) as info:
            await producer.send(topic, b"v")
        assert trio.current_time() == start  # no metadata round trip, no waiting
        assert repr(topic) in str(info.value) and why in str(info.value)
        assert info.value.topic == topic
        await producer.send_and_wait("t", b"the producer lives")


async def test_a_missing_topic_with_auto_creation_off_fails_once_metadata_says_so(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = make_cluster(topics={"t": 1}, options=ClusterOptions(auto_create_topics=False))
    metadata_requests: list[int] = []
    cluster.add_hook(MetadataRequest, lambda call: metadata_requests.append(1))
    async with producer_for(MemoryTransport(cluster, nursery), max_block=MAX_BLOCK) as producer:
        start = trio.current_time()
        with pytest.raises(UnknownTopicError) as info:
            await producer.send("missing", b"v")
        waited = trio.current_time() - start
        await producer.send_and_wait("t", b"the producer lives")
    assert waited < 5.0, f"waited {waited} s of virtual time, max_block is {MAX_BLOCK}"
    assert len(metadata_requests) >= 3  # a few answers, not one
    message = str(info.value)
    assert "'missing'" in message and "UNKNOWN_TOPIC_OR_PARTITION" in message
    assert "Create it" in message


async def test_a_topic_the_broker_calls_invalid_fails_at_once(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    def invalid(call: HookCall) -> Any:
        response = call.response
        topics = [
            attrs.evolve(t, error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, partitions=[])
            if t.name == "reserved"
            else t
            for t in response.topics
        ]
        return attrs.evolve(response, topics=topics)

    cluster = make_cluster(topics={"t": 1})
    cluster.add_hook(MetadataRequest, invalid, after=True)
    async with producer_for(MemoryTransport(cluster, nursery), max_block=MAX_BLOCK) as producer:
        start = trio.current_time()
        with pytest.raises(InvalidTopicError) as info:
            await producer.send("reserved", b"v")
        assert trio.current_time() - start < 1.0
        await producer.send_and_wait("t", b"the producer lives")
    assert "'reserved'" in str(info.value) and "INVALID_TOPIC_EXCEPTION" in str(info.value)


@attrs.define(eq=False)
class SilentTransport:
    """Connects, then never answers a byte (a port of something that is not Kafka)."""

    streams: list[Any] = attrs.field(factory=list)

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        client, server = trio.testing.memory_stream_pair()
        self.streams.append(server)  # kept open, never read
        return client


@attrs.define(eq=False)
class HangingTransport:
    """A connect that never completes (a firewall dropping SYNs)."""

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        await trio.sleep_forever()
        raise AssertionError("unreachable")


@pytest.mark.parametrize("transport", [SilentTransport(), HangingTransport()])
async def test_no_broker_ever_answered_blames_the_connection_even_with_a_small_max_block(
    autojump_clock: trio.testing.MockClock, transport: Any
) -> None:
    async with open_producer(
        bootstrap="broker0:9092", transport=transport, max_block=0.5
    ) as producer:
        with pytest.raises(BrokerConnectionError) as info:
            await producer.send("events", b"v")
    message = str(info.value)
    assert "broker0:9092" in message and "'events'" in message
    assert "Create it" not in message


@pytest.mark.parametrize(
    ("offsets", "kind", "named"),
    [
        ({("nope", 0): 5}, UnknownTopicError, "'nope'"),
        ({("in", 0): 5, ("in", 7): 5}, InvalidPartitionError, "partition 7 of topic 'in'"),
        ({("bad name", 0): 5}, InvalidTopicError, "'bad name'"),
    ],
)
async def test_send_offsets_to_a_missing_topic_or_partition_fails_at_once_naming_it(
    autojump_clock: trio.testing.MockClock,
    nursery: trio.Nursery,
    offsets: dict[tuple[str, int], int],
    kind: type[Exception],
    named: str,
) -> None:
    cluster = make_cluster(
        topics={"t": 1, "in": 2}, options=ClusterOptions(auto_create_topics=False)
    )
    async with producer_for(
        MemoryTransport(cluster, nursery),
        max_block=MAX_BLOCK,
        transactional_id="tx",
        transaction_timeout=60.0,
    ) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        await producer.send("t", b"v")
        start = trio.current_time()
        with pytest.raises(kind) as info:
            await producer.send_offsets_to_transaction(offsets, "group")
        assert trio.current_time() - start < 5.0  # not the transaction timeout
        assert named in str(info.value)
        # The refused call left the transaction as it was: it still commits.
        await producer.send_offsets_to_transaction({("in", 1): 3}, "group")
        await producer.commit_transaction()


async def test_a_record_waiting_for_its_topic_fails_at_the_close_timeout_unwritten(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = make_cluster(topics={"t": 1})
    async with producer_for(MemoryTransport(cluster, nursery), max_block=MAX_BLOCK) as producer:
        await producer.send_and_wait("t", b"warm up")
        cluster.add_hook(MetadataRequest, lambda call: BLACKHOLE)  # no answer, ever
        start = trio.current_time()
        handle = await producer.send("unanswered", b"v")
        assert trio.current_time() == start  # send() does not wait for the metadata
        await trio.sleep(1.0)
        closing = trio.current_time()
        await producer.aclose(timeout=2.0)
        # close gave it its timeout (as any record not settled yet), not max_block
        assert trio.current_time() - closing == pytest.approx(2.0)
    with pytest.raises(ProducerClosedError, match=r"'unanswered'.*not written"):
        await handle


async def test_a_send_many_waiting_for_metadata_is_released_by_aclose(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = make_cluster(topics={"t": 1})
    async with producer_for(MemoryTransport(cluster, nursery), max_block=MAX_BLOCK) as producer:
        await producer.send_and_wait("t", b"warm up")
        cluster.add_hook(MetadataRequest, lambda call: BLACKHOLE)  # no answer, ever
        outcome: list[BaseException] = []

        async def waiting_send() -> None:
            try:
                await producer.send_many([b"v"], topic="unanswered")
            except KafkaError as exc:
                outcome.append(exc)

        async with trio.open_nursery() as inner:
            inner.start_soon(waiting_send)
            await trio.sleep(1.0)
            start = trio.current_time()
            await producer.aclose()
        assert trio.current_time() - start < 1.0  # released by the close, not max_block
        assert len(outcome) == 1 and isinstance(outcome[0], ProducerClosedError), outcome
