"""Our selector against the real brokers (Apache Kafka 4.4, Tansu): ApiVersions,
Metadata and CreateTopics round trips.

Run with `-s` to see the versions negotiated.
"""

from __future__ import annotations

import pytest

from tests.integration._real import RealBroker, real_broker_per_backend
from trio_kafka.errors import BrokerConnectionError, ErrorCode, UnknownTopicError
from trio_kafka.net import open_selector
from trio_kafka.protocol import REQUEST_CLASSES
from trio_kafka.protocol.messages.api_versions import ApiVersionsRequest
from trio_kafka.protocol.messages.create_topics import CreatableTopic, CreateTopicsRequest

# On trio, then on asyncio (issue 16; tests/conftest.py).
pytestmark = pytest.mark.anyio
real_broker = real_broker_per_backend()


async def test_api_versions_negotiates_the_highest_common_version(real_broker: RealBroker) -> None:
    async with open_selector(real_broker.bootstrap) as selector:
        [bootstrap] = selector.node_ids
        connection = await selector.connection(bootstrap)
        info = selector.api_versions(bootstrap)
        assert info is not None
        print(f"\n{real_broker.kind} answered ApiVersions v{info.api_versions_version}")
        print(f"supported features: {dict(info.supported_features)}")
        print(f"finalized features: {dict(info.finalized_features)}")
        for api_key, version in sorted(info.negotiated.items()):
            ours = REQUEST_CLASSES[api_key]
            theirs = info.broker_versions[api_key]
            print(
                f"  {ours.__name__.removesuffix('Request'):22} key {api_key:2}: v{version}"
                f"  (ours {ours.MIN_VERSION}-{ours.MAX_VERSION}, broker {theirs[0]}-{theirs[1]})"
            )
            assert version == min(ours.MAX_VERSION, theirs[1])
        assert connection.api_versions == dict(info.negotiated)
        for api_key in (0, 3, 18, 19, 22):  # Produce, Metadata, ApiVersions, CreateTopics, InitPid
            assert api_key in info.negotiated
        assert not info.supports_cas  # neither has our extension
        if real_broker.is_kafka:  # a fresh 4.4 cluster finalizes transactions v2
            assert info.finalized_level("transaction.version") == 2
        else:
            assert info.finalized_features == {}
        assert "ready 1" in repr(selector)


async def test_metadata_lists_the_broker_and_topics(real_broker: RealBroker) -> None:
    async with open_selector(real_broker.bootstrap) as selector:
        metadata = await selector.refresh_metadata()
        [broker] = metadata.brokers.values()
        assert (broker.host, broker.port) == ("127.0.0.1", real_broker.port)
        assert broker.node_id in selector.node_ids
        print(f"\n{real_broker.kind} metadata: {metadata!r}, broker {broker}")


async def test_create_topics_then_the_topic_appears_in_metadata(real_broker: RealBroker) -> None:
    topic = real_broker.name("net-orders")
    async with open_selector(real_broker.bootstrap) as selector:
        node = selector.least_loaded_node()
        response = await selector.request(
            node,
            CreateTopicsRequest(
                topics=[CreatableTopic(name=topic, num_partitions=3, replication_factor=1)],
                timeout_ms=5000,
            ),
        )
        [result] = response.topics
        assert (result.name, result.error_code) == (topic, ErrorCode.NONE)
        found = await selector.wait_for_topic(topic, timeout=5)
        assert found.partition_count == 3
        for partition in found.partitions:
            leader = selector.metadata.leader_for(topic, partition.partition)
            assert leader is not None and leader.port == real_broker.port
        print(f"\n{topic}: {found.partitions}")
        again = await selector.request(
            node,
            CreateTopicsRequest(
                topics=[CreatableTopic(name=topic, num_partitions=3, replication_factor=1)]
            ),
        )
        assert again.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS


async def test_a_missing_topic_is_a_clear_error(real_broker: RealBroker) -> None:
    async with open_selector(real_broker.bootstrap, allow_auto_create_topics=False) as selector:
        with pytest.raises(UnknownTopicError, match="Create it") as info:
            await selector.wait_for_topic("net-no-such-topic", timeout=0.5)
        print(f"\n{info.value}")


async def test_an_unreachable_bootstrap_names_every_address(real_broker: RealBroker) -> None:
    async with open_selector("127.0.0.1:1,127.0.0.1:2") as selector:
        with pytest.raises(BrokerConnectionError) as info:
            await selector.refresh_metadata()
        message = str(info.value)
        assert "127.0.0.1:1" in message and "127.0.0.1:2" in message
        assert "refused" in message.lower()
        print(f"\n{message}")


async def test_pipelined_requests_on_one_connection_are_answered_in_order(
    real_broker: RealBroker,
) -> None:
    async with open_selector(real_broker.bootstrap, max_in_flight=5) as selector:
        metadata = await selector.refresh_metadata()
        [node] = metadata.brokers
        connection = await selector.connection(node)
        # v3+ names the client: Kafka answers an empty name with INVALID_REQUEST.
        request = ApiVersionsRequest(
            client_software_name="trio-kafka-test", client_software_version="1"
        )
        pendings = [
            await connection.send(request, version=version) for version in [0, 1, 2, 3, 4] * 4
        ]
        responses = [await pending for pending in pendings]
        assert [p.correlation_id for p in pendings] == sorted(p.correlation_id for p in pendings)
        assert all(r.error_code == ErrorCode.NONE for r in responses)
        assert connection.in_flight == 0 and connection.is_open
