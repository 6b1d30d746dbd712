"""The base offset a produced batch carries: -1 ("no expectation") only to a broker with
the expected-offset extension (docs/cas.md), 0 to every other.

Apache Kafka 4.4 refuses a batch whose base offset is not 0 with INVALID_RECORD ("The
baseOffset of the record batch in the append to t-0 should be 0, but it is -1"): every
record our producer sent it failed so, until the producer sent 0 to brokers that do not
advertise `expected.offset.cas` (tests/integration/test_producer_real.py shows it on
Kafka). Here the mock broker plays a broker without the extension by leaving the
feature out of its ApiVersions answer."""

from __future__ import annotations

import attrs
import pytest

from tests.integration._backends import mock_cluster
from trio_kafka.broker import HookCall
from trio_kafka.client import open_producer
from trio_kafka.protocol.messages.api_versions import ApiVersionsRequest
from trio_kafka.protocol.messages.produce import ProduceRequest

#: Each test runs on trio, then on asyncio (issue 16; tests/conftest.py).
pytestmark = pytest.mark.anyio


def _without_cas(call: HookCall) -> object:
    features = [f for f in call.response.supported_features if f.name != "expected.offset.cas"]
    return attrs.evolve(call.response, supported_features=features)


@pytest.mark.parametrize(("advertised", "base_offset"), [(True, -1), (False, 0)])
async def test_a_batch_without_expectation_carries_the_base_offset_its_broker_wants(
    advertised: bool, base_offset: int
) -> None:
    async with mock_cluster(topics={"t": 1}) as cluster:
        if not advertised:
            cluster.add_hook(ApiVersionsRequest, _without_cas, after=True)
        sent: list[int] = []

        def record(call: HookCall) -> None:
            for topic in call.request.topic_data:
                for partition in topic.partition_data:
                    sent.append(int.from_bytes(bytes(partition.records[:8]), "big", signed=True))

        cluster.add_hook(ProduceRequest, record)
        async with open_producer(cluster.bootstrap, linger=0) as producer:
            first = await producer.send_and_wait("t", b"one")
            second = await producer.send_and_wait("t", b"two")
        assert (first.offset, second.offset) == (0, 1)
        assert sent == [base_offset, base_offset]
