"""CAS against Tansu, a broker without the extension: refused with a clear error, and
nothing is written."""

from __future__ import annotations

import pytest

from tests.integration._helpers import tansu_per_backend
from trio_kafka.client import create_topic, open_conditional_writer, open_producer
from trio_kafka.client._reader import PartitionReader
from trio_kafka.errors import CasNotSupportedError
from trio_kafka.net import open_selector
from trio_kafka.testing import TansuBroker

# On trio, then on asyncio (issue 16; tests/conftest.py).
pytestmark = [pytest.mark.tansu, pytest.mark.anyio]
tansu = tansu_per_backend()


async def test_a_cas_send_to_tansu_is_refused_and_writes_nothing(tansu: TansuBroker) -> None:
    async with open_selector(tansu.bootstrap) as selector:
        await create_topic(selector, "cas-refused", 1, cas=False, replication_factor=1)
        async with open_producer(selector=selector, linger=0) as producer:
            with pytest.raises(CasNotSupportedError) as info:
                await producer.send("cas-refused", b"x", partition=0, expected_offset=0)
            message = str(info.value)
            assert "expected.offset.cas" in message
            assert "send without expected_offset" in message
            with pytest.raises(CasNotSupportedError):
                async with open_conditional_writer("cas-refused", 0, producer=producer):
                    pass
        reader = PartitionReader(selector)
        assert await reader.read_all("cas-refused", 0) == []
