"""CAS against the real brokers (Apache Kafka 4.4, Tansu), neither of which has the
extension: refused with a clear error, and nothing is written."""

from __future__ import annotations

import pytest

from tests.integration._real import RealBroker, real_broker_per_backend
from trio_kafka.client import create_topic, open_conditional_writer, open_producer
from trio_kafka.client._reader import PartitionReader
from trio_kafka.errors import CasNotSupportedError
from trio_kafka.net import open_selector

# On trio, then on asyncio (issue 16; tests/conftest.py).
pytestmark = pytest.mark.anyio
real_broker = real_broker_per_backend()


async def test_a_cas_send_to_a_plain_topic_is_refused_and_writes_nothing(
    real_broker: RealBroker,
) -> None:
    topic = real_broker.name("cas-refused")
    async with open_selector(real_broker.bootstrap) as selector:
        await create_topic(selector, topic, 1, cas=False, replication_factor=1)
        async with open_producer(selector=selector, linger=0) as producer:
            with pytest.raises(CasNotSupportedError) as info:
                await producer.send(topic, b"x", partition=0, expected_offset=0)
            message = str(info.value)
            assert "expected.offset.cas" in message
            assert "send without expected_offset" in message
            with pytest.raises(CasNotSupportedError):
                async with open_conditional_writer(topic, 0, producer=producer):
                    pass
        reader = PartitionReader(selector)
        assert await reader.read_all(topic, 0) == []


async def test_creating_a_cas_topic_is_refused_naming_the_remedy(real_broker: RealBroker) -> None:
    """`create_topic(cas=True)` on a broker without the extension: a
    `CasNotSupportedError` naming the broker's features and what to do instead, before
    any request. Kafka answered it INVALID_CONFIG "Unknown topic config name:
    expected.offset.check.enable", which `trio-kafka load` printed at its first run on a
    Kafka cluster."""
    topic = real_broker.name("cas-create")
    # (No auto-creation: the look at the metadata below must not create the topic.)
    async with open_selector(real_broker.bootstrap, allow_auto_create_topics=False) as selector:
        with pytest.raises(CasNotSupportedError) as info:
            await create_topic(selector, topic, 1, cas=True)
        message = str(info.value)
        assert f"cannot create {topic!r} with CAS" in message and "cas=False" in message
        await selector.refresh_metadata([topic])
        assert (
            selector.metadata.topic(topic) is None or not selector.metadata.topic(topic).is_usable
        )


async def test_create_topic_by_default_makes_a_plain_topic_where_cas_is_missing(
    real_broker: RealBroker,
) -> None:
    """The default (`cas=None`) asks for the CAS check only where the broker advertises
    it: on Kafka and Tansu a plain topic, made and written to. It used to be `cas=True`,
    so `create_topic(selector, name)`, the remedy an `UnknownTopicError` names, failed
    on every Apache Kafka cluster."""
    topic = real_broker.name("plain-default")
    async with open_selector(real_broker.bootstrap, allow_auto_create_topics=False) as selector:
        assert await create_topic(selector, topic, 2) is True
        assert await create_topic(selector, topic, 2) is False  # exists: exist_ok
        assert selector.metadata.topic(topic) is not None
    async with open_producer(real_broker.bootstrap) as producer:
        ack = await producer.send_and_wait(topic, b"v", partition=1)
    assert (ack.topic, ack.partition, ack.offset) == (topic, 1, 0)
