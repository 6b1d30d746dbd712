"""Transactions v1 on Apache Kafka 4.4 with `transaction.version=0` finalized: the
producer adds each partition with AddPartitionsToTxn, ends with EndTxn v4 or lower (v5
belongs to KIP-890's v2: Kafka answered our v5 with UNSUPPORTED_VERSION here, and the
producer stopped), and keeps its epoch across commits. The v2 path is
tests/integration/test_transactions_real.py on the shared node."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

from tests.integration._helpers import consume_all, create_topic
from tests.integration._real import RecordingTransport
from tests.integration.test_transactions_real import run_three_transactions
from trio_kafka.client import open_producer
from trio_kafka.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from trio_kafka.protocol.messages.end_txn import EndTxnRequest
from trio_kafka.testing import KafkaNode, kafka_broker

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def kafka_v1() -> Iterator[KafkaNode]:
    with kafka_broker(transaction_version=0) as node:
        yield node


async def test_transactions_v1_add_partitions_and_keep_the_epoch(kafka_v1: KafkaNode) -> None:
    topic = "txn-v1"
    await create_topic(kafka_v1.bootstrap, topic, 2)
    transport = RecordingTransport()
    async with open_producer(
        bootstrap=kafka_v1.bootstrap, transport=transport, transactional_id=topic
    ) as producer:
        with anyio.fail_after(60):
            epochs = await run_three_transactions(producer, topic)
    assert producer._txn is not None and not producer._txn.manager.transaction_v2
    assert epochs == [epochs[0]] * 4
    # At least one AddPartitionsToTxn per transaction (one or two: a partition whose
    # record comes while the first is in flight goes in a second; more when Kafka answers
    # CONCURRENT_TRANSACTIONS while the previous commit's markers are being written, which
    # the client retries after its backoff: 7 in a fresh-clone run), three EndTxn.
    assert 3 <= transport.count(AddPartitionsToTxnRequest.API_KEY) <= 20
    assert transport.count(EndTxnRequest.API_KEY) == 3
    assert max(transport.versions(EndTxnRequest.API_KEY)) <= 4
    seen = await anyio.to_thread.run_sync(
        consume_all, kafka_v1.bootstrap, topic, 2, "read_committed"
    )
    assert sorted(seen) == [b"c0-0", b"c0-1", b"c2-0", b"c2-1"]
