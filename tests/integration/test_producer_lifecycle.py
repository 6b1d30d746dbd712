"""Closing a producer: anywhere, bounded, and saying what it did.

`aclose()` inside `async with open_producer(...)` closes the producer and returns; the
rest of the block runs, later calls raise `ProducerClosedError`, leaving the block is a
no-op. A close with a transaction open aborts it (as Java's `close()` does).
"""

from __future__ import annotations

import attrs
import pytest
import trio
import trio.testing

from trio_kafka import (
    Acknowledged,
    Ambiguous,
    ProducerClosedError,
    ProducerRecord,
    TopicAuthorizationError,
    UnknownTopicError,
    open_producer,
)
from trio_kafka.broker import BLACKHOLE, ClusterOptions, HookCall, open_cluster
from trio_kafka.errors import ErrorCode, KafkaError
from trio_kafka.protocol.messages.metadata import MetadataRequest
from trio_kafka.protocol.messages.produce import ProduceRequest
from trio_kafka.records import decode_batches
from trio_kafka.testing import MemoryTransport, make_cluster, producer_for


async def test_aclose_inside_the_block_closes_and_the_block_goes_on() -> None:
    after_close: list[str] = []
    async with open_cluster() as cluster:
        async with open_producer(cluster.bootstrap) as producer:
            handle = await producer.send("t", b"before close")
            await producer.aclose()
            after_close.append("the block goes on")
            assert isinstance(handle.outcome, Acknowledged)  # flushed by the close
            with pytest.raises(ProducerClosedError):
                await producer.send("t", b"after close")
            with pytest.raises(ProducerClosedError):
                await producer.send(ProducerRecord("t", b"after close"))
            with pytest.raises(ProducerClosedError):
                await producer.flush()
            await producer.aclose()  # twice: a no-op
            after_close.append("still here")
        assert "closed" in repr(producer)
    assert after_close == ["the block goes on", "still here"]


async def test_aclose_reports_the_timeout_it_was_given() -> None:
    async with open_cluster() as cluster:
        cluster.create_topic("t")
        async with open_producer(cluster.bootstrap, request_timeout=60.0) as producer:
            cluster.add_hook(ProduceRequest, lambda call: BLACKHOLE, after=True)
            handle = await producer.send("t", b"never answered")
            producer._sender.wake()
            await producer.aclose(0.5)
            outcome = handle.outcome
            assert isinstance(outcome, Ambiguous), outcome
            assert "close timeout of 0.5 s" in str(outcome.error)
            assert "30.0" not in str(outcome.error)


async def test_closing_with_an_open_transaction_aborts_it() -> None:
    options = ClusterOptions(transaction_version=1)
    async with open_cluster(options=options) as cluster:
        cluster.create_topic("t")
        async with open_producer(cluster.bootstrap, transactional_id="tx") as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            await producer.send("t", b"in the open transaction")
            await producer.flush()
            await producer.aclose()
        data = b"".join(stored.data for stored in cluster.batches("t", 0))
        batches = decode_batches(data)
        control = [b for b in batches if b.is_control]
        assert len(control) == 1 and control[0].records[0].key is not None
        # The control record's key says ABORT (type 0), not COMMIT (type 1).
        assert control[0].records[0].key[2:4] == b"\x00\x00"


async def test_leaving_the_block_with_an_open_transaction_aborts_it() -> None:
    async with open_cluster() as cluster:
        cluster.create_topic("t")
        async with open_producer(cluster.bootstrap, transactional_id="tx") as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            await producer.send("t", b"in the open transaction")
            await producer.flush()
        batches = decode_batches(b"".join(s.data for s in cluster.batches("t", 0)))
        control = [b for b in batches if b.is_control]
        assert len(control) == 1
        assert control[0].records[0].key is not None
        assert control[0].records[0].key[2:4] == b"\x00\x00"


async def test_a_handle_says_what_it_is() -> None:
    async with open_cluster() as cluster, open_producer(cluster.bootstrap) as producer:
        handle = await producer.send("t", b"v")
        assert repr(handle) == "<RecordHandle t-0#0 pending>"
        await handle
        assert repr(handle) == "<RecordHandle t-0#0 acknowledged offset=0>"


async def test_cancelling_the_block_still_closes_without_hanging() -> None:
    async with open_cluster() as cluster:
        # Cancelled once the record is handed over (not after a fixed 0.2 s, which a
        # loaded machine could spend opening the producer).
        with trio.CancelScope() as scope:
            async with open_producer(cluster.bootstrap) as producer:
                await producer.send("t", b"v")
                scope.cancel()
                await trio.sleep_forever()
        with pytest.raises(ProducerClosedError):
            await producer.send("t", b"after")


async def test_a_cancelled_block_with_a_request_in_flight_ends_cancelled_not_crashed(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    # Found by the simulator (bulk-txn lite seed 13): settling the request in flight on
    # the way out asked for a metadata refresh in the producer's task nursery, already
    # closed by the cancellation: RuntimeError instead of the cancellation. Over memory
    # streams in virtual time, so the request has surely left when the cancel comes.
    cluster = make_cluster(topics={"t": 1})
    cluster.add_hook(ProduceRequest, lambda call: BLACKHOLE)
    with trio.move_on_after(2) as scope:
        async with producer_for(MemoryTransport(cluster, nursery), linger=0) as producer:
            handle = await producer.send("t", b"never answered")
            await handle
    assert scope.cancelled_caught
    assert isinstance(handle.outcome, Ambiguous)


async def test_records_of_a_topic_deleted_under_them_fail_naming_it() -> None:
    """The mock broker as Kafka (tests/integration/test_producer_real.py): records
    appended while the producer still had the topic's metadata fail with
    `UnknownTopicError` within seconds of the topic's deletion, not at
    `delivery_timeout`; the producer goes on with its other topics."""
    options = ClusterOptions(auto_create_topics=False)
    async with (
        open_cluster(options=options, topics={"gone": 2, "kept": 1}) as cluster,
        open_producer(cluster.bootstrap) as producer,
    ):
        await producer.send_and_wait("gone", b"before")
        assert cluster.state.delete_topic("gone") == ErrorCode.NONE
        handles = [await producer.send("gone", b"after", partition=p) for p in (0, 1)]
        started = trio.current_time()
        with trio.fail_after(30):
            for handle in handles:
                with pytest.raises(UnknownTopicError, match="'gone' no longer exists"):
                    await handle
        assert trio.current_time() - started < 10
        await producer.send_and_wait("kept", b"the producer lives")


async def test_a_record_for_an_internal_topic_is_refused_as_kafka_refuses_it() -> None:
    """The mock broker refuses a Produce to Kafka's internal topics as Kafka does
    (INVALID_TOPIC_EXCEPTION, tests/integration/test_producer_real.py), and the record's
    error names the topic and why."""
    async with (
        open_cluster(topics={"__consumer_offsets": 1, "kept": 1}) as cluster,
        open_producer(cluster.bootstrap) as producer,
    ):
        with trio.fail_after(30), pytest.raises(KafkaError) as info:
            await producer.send_and_wait("__consumer_offsets", b"x")
        await producer.send_and_wait("kept", b"the producer lives")
    assert getattr(info.value, "code", None) == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert "topic '__consumer_offsets' is internal to Kafka" in str(info.value)


async def test_a_topic_the_brokers_deny_fails_its_records_at_once_not_at_max_block() -> None:
    """Kafka answers TOPIC_AUTHORIZATION_FAILED in Metadata for a topic the principal may
    not describe (tests/integration/test_kafka_authorization.py, with real ACLs). The mock
    broker has no authorizer, so a hook gives that answer for topic "secret": the send
    that waits (before any answer) and the records kept by a producer that has had one
    fail with `TopicAuthorizationError` at the answer, not after `max_block` (60 s)."""

    def deny(call: HookCall) -> object:
        topics = [
            attrs.evolve(t, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, partitions=[])
            if t.name == "secret"
            else t
            for t in call.response.topics
        ]
        return attrs.evolve(call.response, topics=topics)

    async with open_cluster(topics={"secret": 1, "kept": 1}) as cluster:
        cluster.add_hook(MetadataRequest, deny, after=True)
        started = trio.current_time()
        async with open_producer(cluster.bootstrap) as producer:
            with pytest.raises(TopicAuthorizationError, match="describe topic 'secret'"):
                await producer.send("secret", b"first")  # no answer yet: send() waits
            await producer.send_and_wait("kept", b"an answer came")
            kept = [await producer.send("secret", b"%d" % i) for i in range(3)]
            for handle in kept:
                with pytest.raises(TopicAuthorizationError) as info:
                    await handle
                assert info.value.topic == "secret"
            await producer.send_and_wait("kept", b"the producer lives")
        assert trio.current_time() - started < 10
