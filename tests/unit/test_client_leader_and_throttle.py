"""The sender and the broker's hints, over memory streams to the mock broker, in virtual
time: KIP-951 (a NOT_LEADER_OR_FOLLOWER answer names the new leader and its endpoint:
the retry goes there at once, without the retry backoff and without waiting for a
Metadata refresh) and KIP-219 (a response's throttle_time_ms: nothing more is sent to
that broker until it has passed)."""

from __future__ import annotations

from typing import Any

import attrs
import trio
import trio.testing

from trio_kafka.broker import HookCall
from trio_kafka.protocol.messages.metadata import MetadataRequest
from trio_kafka.protocol.messages.produce import ProduceRequest
from trio_kafka.testing import MemoryTransport, make_cluster, producer_for


async def test_a_moved_leader_named_in_the_answer_gets_the_retry_at_once(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = make_cluster(brokers=2, topics={"t": 1})
    cluster.move_leader("t", 0, 0)
    transport = MemoryTransport(cluster, nursery)
    produced: list[tuple[int, float]] = []
    cluster.add_hook(
        ProduceRequest, lambda call: produced.append((call.node_id, trio.current_time()))
    )
    async with producer_for(
        transport, linger=0.0, retry_backoff=5.0, retry_backoff_max=5.0
    ) as producer:
        await producer.send_and_wait("t", b"first")
        # The leader moves; every Metadata answer from now on is stale (the old leader),
        # so only the Produce answer's CurrentLeader can tell the producer.
        cluster.move_leader("t", 0, 1)

        def stale(call: HookCall) -> Any:
            response = call.response
            topics = [
                attrs.evolve(
                    t,
                    partitions=[attrs.evolve(p, leader_id=0, leader_epoch=0) for p in t.partitions],
                )
                for t in response.topics
            ]
            return attrs.evolve(response, topics=topics)

        cluster.add_hook(MetadataRequest, stale, after=True)
        start = trio.current_time()
        with trio.fail_after(4.0):  # less than one retry_backoff (virtual time)
            ack = await producer.send_and_wait("t", b"second")
    assert ack.offset == 1
    assert [node for node, _ in produced] == [0, 0, 1]
    assert produced[2][1] - start < 5.0  # no backoff before the retry to node 1


async def test_a_throttled_broker_gets_nothing_until_the_throttle_time_passed(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = make_cluster(topics={"t": 1})
    transport = MemoryTransport(cluster, nursery)
    answered: list[float] = []
    sent: list[float] = []

    def throttle(call: HookCall) -> Any:
        answered.append(trio.current_time())
        return attrs.evolve(call.response, throttle_time_ms=3000)

    async with producer_for(transport, linger=0.0) as producer:
        await producer.send_and_wait("t", b"warm up")
        cluster.add_hook(ProduceRequest, throttle, after=True, times=1)
        cluster.add_hook(ProduceRequest, lambda call: sent.append(trio.current_time()))
        await producer.send_and_wait("t", b"throttled")
        second = await producer.send_and_wait("t", b"after the throttle")
    assert second.offset == 2
    assert len(answered) == 1 and len(sent) == 2
    assert sent[1] >= answered[0] + 3.0  # the broker's 3 s were waited out
