"""`trio-kafka tail` shows the last records of a partition on every broker: the end it
counts back from is the one its read stops at (the Fetch high watermark).

Before the fix `tail` took the end from ListOffsets, which Tansu answers with the last
batch's base offset + 1: ten records written in one batch showed as one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import trio
from click.testing import CliRunner

from tests.integration._helpers import QUIET, create_topic
from trio_kafka.broker import run_in_thread
from trio_kafka.cli import main
from trio_kafka.client import open_producer
from trio_kafka.testing import KafkaNode, TansuBroker

confluent_kafka = pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def mock() -> Iterator[str]:
    with run_in_thread(1) as cluster:
        yield cluster.bootstrap


def write_one_batch(bootstrap: str, count: int) -> str:
    """A new topic whose partition 0 holds `count` records in a single batch (written
    by confluent-kafka: the same writer for every broker)."""
    topic = f"tail-{uuid.uuid4().hex[:8]}"
    trio.run(create_topic, bootstrap, topic, 1)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 200, **QUIET}
    )
    for i in range(count):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0)
    assert producer.flush(30) == 0
    return topic


def tail(bootstrap: str, topic: str, *options: str) -> list[str]:
    result = CliRunner().invoke(
        main, ["tail", "--topic", topic, "--bootstrap", bootstrap, *options]
    )
    assert result.exit_code == 0, result.output
    return [line for line in result.output.splitlines() if line.startswith("0:")]


def check_tail(bootstrap: str) -> None:
    topic = write_one_batch(bootstrap, 10)
    assert tail(bootstrap, topic) == [f"0:{i}\tk{i}\tv{i}" for i in range(10)]
    assert tail(bootstrap, topic, "-n", "3") == [f"0:{i}\tk{i}\tv{i}" for i in (7, 8, 9)]


@pytest.mark.tansu
def test_tail_shows_every_record_of_a_batch_on_tansu(tansu: TansuBroker) -> None:
    check_tail(tansu.bootstrap)


def test_tail_shows_every_record_of_a_batch_on_the_mock_broker(mock: str) -> None:
    check_tail(mock)


def test_tail_shows_every_record_of_a_batch_on_apache_kafka(kafka: KafkaNode) -> None:
    check_tail(kafka.bootstrap)


async def _one_record_transactions(bootstrap: str, count: int, aborted: int) -> str:
    """A new topic whose partition 0 holds `count` committed records, each in a
    transaction of its own (as a transactional commit log writes them: a commit marker
    after each), then one aborted record; its value `aborted-<aborted>`."""
    topic = f"tail-txn-{uuid.uuid4().hex[:8]}"
    await create_topic(bootstrap, topic, 1)
    async with open_producer(bootstrap, transactional_id=f"{topic}-writer") as producer:
        await producer.init_transactions()
        for i in range(count):
            async with producer.transaction():
                await producer.send(topic, b"v%d" % i, key=b"k%d" % i, partition=0)
        producer.begin_transaction()
        await producer.send(topic, b"aborted-%d" % aborted, partition=0)
        await producer.flush()
        await producer.abort_transaction()
    return topic


def test_tail_counts_records_not_offsets_and_hides_aborted_ones_on_apache_kafka(
    kafka: KafkaNode,
) -> None:
    """On a topic written in transactions every commit marker takes an offset: `-n 3`
    counted back three offsets and printed one record (and `tail` read uncommitted, so
    a record of an aborted transaction showed as if it were in the log)."""
    topic = trio.run(_one_record_transactions, kafka.bootstrap, 6, 6)
    committed = [f"0:{2 * i}\tk{i}\tv{i}" for i in range(6)]  # (a marker after each)
    assert tail(kafka.bootstrap, topic, "-n", "3") == committed[3:]
    assert tail(kafka.bootstrap, topic) == committed
    assert tail(kafka.bootstrap, topic, "--from-beginning") == committed
    everything = tail(kafka.bootstrap, topic, "-n", "2", "--isolation", "read_uncommitted")
    assert everything == [committed[-1], "0:12\tnull\taborted-6"]
