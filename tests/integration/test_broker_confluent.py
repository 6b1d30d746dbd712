"""confluent-kafka (librdkafka) against the mock broker over real TCP."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.integration._helpers import consume_all as read_topic  # noqa: E402
from trio_kafka.broker import ThreadedCluster, run_in_thread  # noqa: E402

QUIET = {"log_level": 0, "logger": lambda *a: None}


@pytest.fixture(scope="module")
def cluster() -> Iterator[ThreadedCluster]:
    with run_in_thread(3) as c:
        yield c


def create(
    cluster: ThreadedCluster, partitions: int = 3, configs: dict[str, str] | None = None
) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=configs or {})])
    futures[name].result(10)
    return name


def consume_all(
    cluster: ThreadedCluster, topic: str, partitions: int, isolation: str, expect: int
) -> list[bytes]:
    return read_topic(cluster.bootstrap, topic, partitions, isolation, at_least=expect)


def test_idempotent_producer_10000_records_with_offsets(cluster: ThreadedCluster) -> None:
    topic = create(cluster, 3)
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            **QUIET,
        }
    )
    reports: list[tuple[int, int, bytes]] = []
    errors: list[object] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            reports.append((msg.partition(), msg.offset(), msg.value()))  # type: ignore[attr-defined]

    for i in range(10_000):
        producer.produce(topic, key=str(i).encode(), value=b"v%d" % i, on_delivery=on_delivery)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []
    assert len(reports) == 10_000
    by_partition: dict[int, list[int]] = {}
    for partition, offset, _ in reports:
        by_partition.setdefault(partition, []).append(offset)
    assert set(by_partition) == {0, 1, 2}
    for partition, offsets in by_partition.items():
        assert sorted(offsets) == list(range(len(offsets)))
        # The broker's log holds exactly these records, at these offsets.
        stored = cluster.call(cluster.cluster.decoded, topic, partition)
        assert sum(b.record_count for b in stored) == len(offsets)
    stored_values = {
        r.offset: r.value
        for b in cluster.call(cluster.cluster.decoded, topic, 0)
        for r in b.records
    }
    for partition, offset, value in reports:
        if partition == 0:
            assert stored_values[offset] == value


def test_transactions_commit_and_abort_and_isolation_levels(cluster: ThreadedCluster) -> None:
    topic = create(cluster, 3)
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "transactional.id": f"tx-{uuid.uuid4().hex[:6]}",
            "linger.ms": 5,
            **QUIET,
        }
    )
    producer.init_transactions(10)
    producer.begin_transaction()
    for i in range(300):
        producer.produce(topic, key=str(i).encode(), value=b"committed-%d" % i)
    producer.commit_transaction(10)
    producer.begin_transaction()
    for i in range(200):
        producer.produce(topic, key=str(i).encode(), value=b"aborted-%d" % i)
    producer.flush(10)
    producer.abort_transaction(10)
    producer.begin_transaction()
    for i in range(100):
        producer.produce(topic, key=str(i).encode(), value=b"late-%d" % i)
    producer.commit_transaction(10)

    committed = consume_all(cluster, topic, 3, "read_committed", 400)
    assert sorted(committed) == sorted(
        [b"committed-%d" % i for i in range(300)] + [b"late-%d" % i for i in range(100)]
    )
    everything = consume_all(cluster, topic, 3, "read_uncommitted", 600)
    assert len(everything) == 600
    assert sum(v.startswith(b"aborted-") for v in everything) == 200


def test_transactional_offsets_are_visible_to_committed(cluster: ThreadedCluster) -> None:
    topic = create(cluster, 1)
    group = f"g-{uuid.uuid4().hex[:6]}"
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "transactional.id": f"tx-{uuid.uuid4().hex[:6]}",
            **QUIET,
        }
    )
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(topic, value=b"x")
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, **QUIET})
    producer.send_offsets_to_transaction(
        [TopicPartition(topic, 0, 42)], consumer.consumer_group_metadata(), 10
    )
    producer.commit_transaction(10)
    (tp,) = consumer.committed([TopicPartition(topic, 0)], 10)
    consumer.close()
    assert tp.offset == 42


def test_a_second_instance_fences_the_first(cluster: ThreadedCluster) -> None:
    topic = create(cluster, 1)
    txn_id = f"tx-{uuid.uuid4().hex[:6]}"
    conf = {"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id, **QUIET}
    first = Producer(conf)
    first.init_transactions(10)
    first.begin_transaction()
    first.produce(topic, value=b"zombie")
    first.flush(10)
    second = Producer(conf)
    second.init_transactions(10)  # aborts the first's transaction, bumps the epoch
    with pytest.raises(confluent_kafka.KafkaException) as info:
        first.commit_transaction(10)
    assert info.value.args[0].fatal() or info.value.args[0].code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    )
    assert consume_all(cluster, topic, 1, "read_committed", 0) == []


def test_group_consumer_subscribe_and_commit(cluster: ThreadedCluster) -> None:
    topic = create(cluster, 2)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, **QUIET})
    # Both partitions get records: librdkafka's sticky partitioner could put all 20 in
    # one, and a partition the consumer never read from has no position to commit.
    for i in range(20):
        producer.produce(topic, value=b"m%d" % i, partition=i % 2)
    producer.flush(10)
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **QUIET,
        }
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < 20 and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            got.append(msg.value())
    consumer.commit(asynchronous=False)
    committed = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], 10)
    consumer.close()
    assert sorted(got) == sorted(b"m%d" % i for i in range(20))
    assert [tp.offset for tp in committed] == [10, 10]
