"""Failover on a real 3-node Apache Kafka cluster (KRaft, replication factor 3,
min.insync.replicas=2): the leader of every partition being written is SIGKILLed while an
idempotent producer (acks=all) writes keyed records; the producer keeps going.

Every record is acknowledged within `BOUND` seconds of the kill, not `delivery_timeout`
(120 s), the log holds each record once, at the offset its acknowledgement named, and
each partition keeps the order records were sent in. Before the fix a failed connect to
the dead leader never asked for metadata, so the batches waited for it until
delivery_timeout; now each failed connect (rate-limited by retry_backoff) asks, and the
batches move once the controller has fenced the node (broker.session.timeout.ms=3000 in
`kafka_cluster`) and elected another leader.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import trio

from tests.integration._helpers import read_partitions
from trio_kafka import Acknowledged, RecordHandle, open_producer
from trio_kafka.errors import ErrorCode
from trio_kafka.net import open_selector
from trio_kafka.protocol.messages.create_topics import (
    CreatableReplicaAssignment,
    CreatableTopic,
    CreateTopicsRequest,
)
from trio_kafka.testing import KafkaCluster, kafka_cluster

pytestmark = pytest.mark.kafka

TOPIC = "failover"
PARTITIONS = 3
KEYS = 12
#: Seconds after the kill by which every record must be acknowledged (generous for a
#: loaded machine; the failover itself took ~4 s with the fix, 120 s without).
BOUND = 30.0
BEFORE_KILL = 2.0
AFTER_KILL = 8.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[KafkaCluster]:
    with kafka_cluster(3, startup_timeout=180) as started:
        yield started


async def create_topic_led_by(bootstrap: str, leader: int, others: list[int]) -> list[int]:
    """The topic, every partition's preferred leader `leader`; returns the leaders the
    Metadata answer names (the test kills the node they name, not the one asked for)."""
    async with open_selector(bootstrap) as selector:
        response = await selector.request(
            selector.least_loaded_node(),
            CreateTopicsRequest(
                topics=[
                    CreatableTopic(
                        name=TOPIC,
                        num_partitions=-1,
                        replication_factor=-1,
                        assignments=[
                            CreatableReplicaAssignment(p, [leader, *others])
                            for p in range(PARTITIONS)
                        ],
                    )
                ],
                timeout_ms=30_000,
            ),
        )
        assert response.topics[0].error_code == ErrorCode.NONE, response
        with trio.fail_after(60):
            while True:
                await selector.refresh_metadata([TOPIC])
                topic = selector.metadata.topic(TOPIC)
                if topic is not None and topic.is_usable:
                    leaders = [p.leader for p in topic.partitions]
                    if all(n >= 0 for n in leaders):
                        return leaders
                await trio.sleep(0.2)


async def test_killing_the_leader_does_not_stall_the_idempotent_producer(
    cluster: KafkaCluster,
) -> None:
    ids = [node.node_id for node in cluster.nodes]
    leaders = await create_topic_led_by(cluster.bootstrap, ids[0], ids[1:])
    assert len(set(leaders)) == 1, f"partitions led by {leaders}"
    victim = cluster.node(leaders[0])

    sent: list[tuple[int, float]] = []  # (record number, trio clock time sent)
    acked: dict[int, tuple[float, Acknowledged]] = {}
    killed_at = math.inf

    async def wait_for(number: int, handle: RecordHandle) -> None:
        outcome = await handle
        acked[number] = (trio.current_time(), outcome)

    async with open_producer(cluster.bootstrap, acks="all", enable_idempotence=True) as producer:
        async with trio.open_nursery() as nursery:
            number = 0
            start = trio.current_time()
            while trio.current_time() - start < BEFORE_KILL + AFTER_KILL:
                if killed_at == math.inf and trio.current_time() - start >= BEFORE_KILL:
                    await trio.to_thread.run_sync(victim.kill)
                    killed_at = trio.current_time()
                key = b"k%02d" % (number % KEYS)
                handle = await producer.send(TOPIC, b"%06d" % number, key=key)
                sent.append((number, trio.current_time()))
                nursery.start_soon(wait_for, number, handle)
                number += 1
                await trio.sleep(0.005)
            # Each record by BOUND after the kill, or the test fails now (not after
            # delivery_timeout: without the fix the producer waits that long).
            with trio.move_on_at(killed_at + BOUND) as bounded:
                await producer.flush()
            if bounded.cancelled_caught:
                nursery.cancel_scope.cancel()  # (else each waiter takes its settled outcome)
                await producer.aclose(timeout=0)  # fail now, not after close_timeout
        missing = [n for n, _ in sent if n not in acked]
        assert not missing, (
            f"{len(missing)} of {len(sent)} records not acknowledged {BOUND} s after "
            f"node {victim.node_id} was killed (first: {missing[:5]})"
        )
    waits = [acked[n][0] - max(at, killed_at) for n, at in sent]
    print(
        f"node {victim.node_id} killed; {len(sent)} records, the longest wait for an "
        f"acknowledgement after the kill {max(waits):.2f} s"
    )
    assert all(isinstance(outcome, Acknowledged) for _, outcome in acked.values())

    await trio.to_thread.run_sync(victim.start)
    log = await trio.to_thread.run_sync(read_partitions, cluster.bootstrap, TOPIC, PARTITIONS)
    values = [value for _, _, value in log]
    assert sorted(values) == sorted(b"%06d" % n for n, _ in sent), "lost or duplicated"
    where = {(p, o): v for p, o, v in log}
    for n, (_, ack) in acked.items():
        if ack.offset >= 0:  # (-1: a deduplicated retry whose offset the broker forgot)
            assert where[(ack.partition, ack.offset)] == b"%06d" % n
    for partition in range(PARTITIONS):
        in_log = [v for p, _, v in sorted(log) if p == partition]
        assert in_log == sorted(in_log), f"partition {partition} out of send order"
