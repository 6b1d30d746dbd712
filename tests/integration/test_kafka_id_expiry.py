"""Producers idle past the broker's expiry of their ids, on Apache Kafka 4.4 (a node of its
own whose expiries are seconds, not days, checked every second).

- An idempotent producer idle past `producer.id.expiration.ms` (1 day by default) goes
  on writing, in order, once.
- A transactional producer idle past `transactional.id.expiration.ms` (7 days by
  default): the coordinator has forgotten its transactional id, so its next
  transaction's Produce is answered INVALID_PRODUCER_ID_MAPPING. That transaction fails
  (abortable, nothing of it is visible) and the producer goes on with a new producer id,
  as Java's producer does. It used to stop for good: the code was classed fatal.
"""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

from tests.integration._helpers import consume_all, create_topic
from trio_kafka.client import open_producer
from trio_kafka.errors import AbortableError, ErrorCode
from trio_kafka.testing import KafkaNode, kafka_broker

pytestmark = pytest.mark.kafka

#: Expiries the test can wait out, checked every second.
EXPIRY = {
    "producer.id.expiration.ms": "2000",
    "producer.id.expiration.check.interval.ms": "1000",
    "transactional.id.expiration.ms": "2000",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "1000",
}
#: Past the expiry and two of its checks.
IDLE = 6.0


@pytest.fixture(scope="module")
def kafka_quick_expiry() -> Iterator[KafkaNode]:
    with kafka_broker(server_properties=EXPIRY) as node:
        yield node


async def test_an_idempotent_producer_writes_on_after_its_id_expired(
    kafka_quick_expiry: KafkaNode,
) -> None:
    bootstrap = kafka_quick_expiry.bootstrap
    await create_topic(bootstrap, "idle-idempotent", 1)
    async with open_producer(bootstrap) as producer:
        for value in (b"a0", b"a1"):
            await producer.send_and_wait("idle-idempotent", value, partition=0)
        await anyio.sleep(IDLE)
        with anyio.fail_after(30):
            for value in (b"b0", b"b1"):
                await producer.send_and_wait("idle-idempotent", value, partition=0)
    seen = await anyio.to_thread.run_sync(
        consume_all, bootstrap, "idle-idempotent", 1, "read_committed"
    )
    assert seen == [b"a0", b"a1", b"b0", b"b1"]


async def test_a_transactional_producer_goes_on_after_its_transactional_id_expired(
    kafka_quick_expiry: KafkaNode,
) -> None:
    bootstrap = kafka_quick_expiry.bootstrap
    topic = "idle-transactional"
    await create_topic(bootstrap, topic, 1)
    async with open_producer(bootstrap, transactional_id="idle-txn") as producer:
        await producer.init_transactions()
        async with producer.transaction():
            await producer.send_and_wait(topic, b"before", partition=0)
        await anyio.sleep(IDLE)
        with anyio.fail_after(30):
            with pytest.raises(AbortableError) as caught:
                async with producer.transaction():
                    await producer.send_and_wait(topic, b"expired", partition=0)
            assert getattr(caught.value, "code", None) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
            async with producer.transaction():
                await producer.send_and_wait(topic, b"after", partition=0)
    seen = await anyio.to_thread.run_sync(consume_all, bootstrap, topic, 1, "read_committed")
    assert seen == [b"before", b"after"]
