"""Our selector against Tansu: ApiVersions, Metadata and CreateTopics round trips.

Run with `-s` to see the versions negotiated.
"""

from __future__ import annotations

import pytest

from tests.integration._helpers import tansu_per_backend
from trio_kafka.errors import BrokerConnectionError, ErrorCode, UnknownTopicError
from trio_kafka.net import open_selector
from trio_kafka.protocol import REQUEST_CLASSES
from trio_kafka.protocol.messages.api_versions import ApiVersionsRequest
from trio_kafka.protocol.messages.create_topics import CreatableTopic, CreateTopicsRequest
from trio_kafka.testing import TansuBroker

# On trio, then on asyncio (issue 16; tests/conftest.py).
pytestmark = [pytest.mark.tansu, pytest.mark.anyio]
tansu = tansu_per_backend()


async def test_api_versions_negotiates_the_highest_common_version(tansu: TansuBroker) -> None:
    async with open_selector(tansu.bootstrap) as selector:
        [bootstrap] = selector.node_ids
        connection = await selector.connection(bootstrap)
        info = selector.api_versions(bootstrap)
        assert info is not None
        print(f"\nTansu answered ApiVersions v{info.api_versions_version}")
        print(f"supported features: {dict(info.supported_features)}")
        print(f"finalized features: {dict(info.finalized_features)}")
        for api_key, version in sorted(info.negotiated.items()):
            ours = REQUEST_CLASSES[api_key]
            theirs = info.broker_versions[api_key]
            print(
                f"  {ours.__name__.removesuffix('Request'):22} key {api_key:2}: v{version}"
                f"  (ours {ours.MIN_VERSION}-{ours.MAX_VERSION}, Tansu {theirs[0]}-{theirs[1]})"
            )
            assert version == min(ours.MAX_VERSION, theirs[1])
        assert connection.api_versions == dict(info.negotiated)
        for api_key in (0, 3, 18, 19, 22):  # Produce, Metadata, ApiVersions, CreateTopics, InitPid
            assert api_key in info.negotiated
        assert not info.supports_cas  # Tansu does not have our extension
        assert "ready 1" in repr(selector)


async def test_metadata_lists_the_broker_and_topics(tansu: TansuBroker) -> None:
    async with open_selector(tansu.bootstrap) as selector:
        metadata = await selector.refresh_metadata()
        [broker] = metadata.brokers.values()
        assert (broker.host, broker.port) == ("127.0.0.1", tansu.port)
        assert broker.node_id in selector.node_ids
        print(f"\nTansu metadata: {metadata!r}, broker {broker}")


async def test_create_topics_then_the_topic_appears_in_metadata(tansu: TansuBroker) -> None:
    async with open_selector(tansu.bootstrap) as selector:
        node = selector.least_loaded_node()
        response = await selector.request(
            node,
            CreateTopicsRequest(
                topics=[CreatableTopic(name="net-orders", num_partitions=3, replication_factor=1)],
                timeout_ms=5000,
            ),
        )
        [result] = response.topics
        assert (result.name, result.error_code) == ("net-orders", ErrorCode.NONE)
        topic = await selector.wait_for_topic("net-orders", timeout=5)
        assert topic.partition_count == 3
        for partition in topic.partitions:
            leader = selector.metadata.leader_for("net-orders", partition.partition)
            assert leader is not None and leader.port == tansu.port
        print(f"\nnet-orders: {topic.partitions}")
        again = await selector.request(
            node,
            CreateTopicsRequest(
                topics=[CreatableTopic(name="net-orders", num_partitions=3, replication_factor=1)]
            ),
        )
        assert again.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS


async def test_a_missing_topic_is_a_clear_error(tansu: TansuBroker) -> None:
    async with open_selector(tansu.bootstrap, allow_auto_create_topics=False) as selector:
        with pytest.raises(UnknownTopicError, match="Create it") as info:
            await selector.wait_for_topic("net-no-such-topic", timeout=0.5)
        print(f"\n{info.value}")


async def test_an_unreachable_bootstrap_names_every_address(tansu: TansuBroker) -> None:
    async with open_selector("127.0.0.1:1,127.0.0.1:2") as selector:
        with pytest.raises(BrokerConnectionError) as info:
            await selector.refresh_metadata()
        message = str(info.value)
        assert "127.0.0.1:1" in message and "127.0.0.1:2" in message
        assert "refused" in message.lower()
        print(f"\n{message}")


async def test_pipelined_requests_on_one_connection_are_answered_in_order(
    tansu: TansuBroker,
) -> None:
    async with open_selector(tansu.bootstrap, max_in_flight=5) as selector:
        metadata = await selector.refresh_metadata()
        [node] = metadata.brokers
        connection = await selector.connection(node)
        pendings = [
            await connection.send(ApiVersionsRequest(), version=version)
            for version in [0, 1, 2, 3, 4] * 4
        ]
        responses = [await pending for pending in pendings]
        assert [p.correlation_id for p in pendings] == sorted(p.correlation_id for p in pendings)
        assert all(r.error_code == ErrorCode.NONE for r in responses)
        assert connection.in_flight == 0 and connection.is_open
