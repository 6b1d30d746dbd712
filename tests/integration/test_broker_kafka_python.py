"""kafka-python, a second independent client, against the mock broker over TCP."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

kafka = pytest.importorskip("kafka")
from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka.admin import KafkaAdminClient, NewTopic  # noqa: E402

from trio_kafka.broker import ThreadedCluster, run_in_thread  # noqa: E402


@pytest.fixture(scope="module")
def cluster() -> Iterator[ThreadedCluster]:
    with run_in_thread(3) as c:
        yield c


def create(cluster: ThreadedCluster, partitions: int = 3) -> str:
    name = f"kp-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()
    return name


def read_all(
    cluster: ThreadedCluster, topic: str, partitions: int, isolation: str, expect: int
) -> list[bytes]:
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap,
        isolation_level=isolation,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        consumer_timeout_ms=1500,
    )
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    consumer.seek_to_beginning()
    values: list[bytes] = []
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=200)
            for records in batch.values():
                values.extend(r.value for r in records)
            if len(values) >= expect and not batch:
                break
    finally:
        consumer.close()
    return values


def test_idempotent_producer_reports_offsets(cluster: ThreadedCluster) -> None:
    topic = create(cluster, 3)
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap, enable_idempotence=True, acks="all", linger_ms=5
    )
    futures = [producer.send(topic, key=str(i).encode(), value=b"v%d" % i) for i in range(2000)]
    producer.flush(30)
    metas = [f.get(10) for f in futures]
    producer.close()
    by_partition: dict[int, list[int]] = {}
    for m in metas:
        by_partition.setdefault(m.partition, []).append(m.offset)
    assert sum(len(v) for v in by_partition.values()) == 2000
    for offsets in by_partition.values():
        assert sorted(offsets) == list(range(len(offsets)))
    assert sorted(read_all(cluster, topic, 3, "read_uncommitted", 2000)) == sorted(
        b"v%d" % i for i in range(2000)
    )


def test_transactions_and_isolation_levels(cluster: ThreadedCluster) -> None:
    topic = create(cluster, 3)
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap, transactional_id=f"kp-tx-{uuid.uuid4().hex[:6]}"
    )
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(150):
        producer.send(topic, key=str(i).encode(), value=b"committed-%d" % i)
    producer.commit_transaction()
    producer.begin_transaction()
    for i in range(100):
        producer.send(topic, key=str(i).encode(), value=b"aborted-%d" % i)
    producer.flush()
    producer.abort_transaction()
    producer.close()
    committed = read_all(cluster, topic, 3, "read_committed", 150)
    assert sorted(committed) == sorted(b"committed-%d" % i for i in range(150))
    everything = read_all(cluster, topic, 3, "read_uncommitted", 250)
    assert len(everything) == 250
    assert sum(v.startswith(b"aborted-") for v in everything) == 100


def test_group_consumer_subscribes_and_commits(cluster: ThreadedCluster) -> None:
    topic = create(cluster, 2)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap)
    for i in range(20):
        producer.send(topic, value=b"m%d" % i)
    producer.flush()
    producer.close()
    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=cluster.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < 20 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            got.extend(r.value for r in records)
    consumer.commit()
    committed = {p: consumer.committed(TopicPartition(topic, p)) for p in range(2)}
    consumer.close()
    assert sorted(got) == sorted(b"m%d" % i for i in range(20))
    assert sum(v or 0 for v in committed.values()) == 20
