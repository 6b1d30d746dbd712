"""Per partition, records land in the order of their `send()` calls, whatever the
metadata state: sends that wait for a topic's metadata (before a broker's first answer,
in a transactional producer, with a custom partitioner) join the topic's one queue of
waiting records (client/_unknown_topics.py) and are appended in call order when it comes,
not in the order the scheduler wakes their tasks.

The user trial behind it: six tasks each `send("ord", ..., partition=0)`, 100 ms
apart, before any broker answered (it started 1 s later); 10 runs of 10 landed out of
call order (m4, m2, m0, m1, m3, m5): each send waited on its own metadata retry loop
and appended when it woke.

Virtual time (trio's autojump clock) against the in-memory mock broker.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import trio
import trio.testing

from trio_kafka import BrokerConnectionError, UnknownTopicError
from trio_kafka.broker import ClusterOptions, Delay
from trio_kafka.protocol.messages.metadata import MetadataRequest
from trio_kafka.testing import MemoryTransport, log_values, make_cluster, producer_for

TASKS = 6
APART = 0.1  # seconds between the tasks' sends
BROKER_LATE = 1.0  # the broker starts this long after the first send


async def send_from_tasks(
    producer: Any, topic: str, handles: list[Any], **fields: Any
) -> list[bytes]:
    """TASKS tasks, task i sending b"m<i>" at i * APART; returns the values in call order."""

    async def one(i: int) -> None:
        await trio.sleep(i * APART)
        handles.append(await producer.send(topic, b"m%d" % i, **fields))

    async with trio.open_nursery() as tasks:
        for i in range(TASKS):
            tasks.start_soon(one, i)
    return [b"m%d" % i for i in range(TASKS)]


async def late_broker_run(nursery: trio.Nursery, partitions: int, **fields: Any) -> None:
    """The trial: the sends come before any broker answers; it starts BROKER_LATE later."""
    cluster = make_cluster(topics={"ord": partitions})
    transport = MemoryTransport(cluster, nursery, refuse=True)

    async def start_broker() -> None:
        await trio.sleep(BROKER_LATE)
        transport.refuse = False

    nursery.start_soon(start_broker)
    handles: list[Any] = []
    async with producer_for(transport) as producer:
        sent = await send_from_tasks(producer, "ord", handles, **fields)
        outcomes = [await handle for handle in handles]
    where = {outcome.partition for outcome in outcomes}
    assert len(where) == 1, where  # (each variant sends to one partition)
    assert log_values(cluster, "ord", where.pop()) == sent


async def test_sends_before_a_broker_answers_land_in_call_order(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    await late_broker_run(nursery, 1, partition=0)


async def test_keyed_sends_before_a_broker_answers_land_in_call_order(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    await late_broker_run(nursery, 3, key=b"one key")


async def test_sends_with_a_custom_partitioner_land_in_call_order(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = make_cluster(topics={"known": 1, "ord": 2})
    cluster.add_hook(MetadataRequest, lambda call: Delay(BROKER_LATE))
    handles: list[Any] = []
    options: dict[str, Any] = {"partitioner": lambda record, view: 1}
    async with producer_for(MemoryTransport(cluster, nursery), **options) as producer:
        sent = await send_from_tasks(producer, "ord", handles)
        outcomes = [await handle for handle in handles]
    assert {outcome.partition for outcome in outcomes} == {1}
    assert log_values(cluster, "ord", 1) == sent


async def test_transactional_sends_to_a_new_topic_land_in_call_order(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = make_cluster(topics={"known": 1, "ord": 1})
    handles: list[Any] = []
    options: dict[str, Any] = {"transactional_id": "tx"}
    async with producer_for(MemoryTransport(cluster, nursery), **options) as producer:
        await producer.init_transactions()
        cluster.add_hook(MetadataRequest, lambda call: Delay(BROKER_LATE))
        async with producer.transaction():
            sent = await send_from_tasks(producer, "ord", handles, partition=0)
    assert log_values(cluster, "ord", 0) == sent


async def test_a_send_after_the_metadata_came_does_not_pass_the_waiting_ones(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    # Sends waiting for the metadata (a custom partitioner's), then, as it arrives, a new
    # task calling send() in every scheduling round: whichever round one lands in (the
    # metadata known but the waiting records not appended yet, between, after), it must
    # not pass the sends called before it.
    cluster = make_cluster(topics={"known": 1, "ord": 1})
    gate = trio.Event()

    async def held_answer(call: Any) -> None:
        request: MetadataRequest = call.request
        if request.topics is not None and "ord" in [t.name for t in request.topics]:
            await gate.wait()

    cluster.add_hook(MetadataRequest, held_answer)
    options: dict[str, Any] = {"partitioner": lambda record, view: 0}
    called: list[bytes] = []
    async with producer_for(MemoryTransport(cluster, nursery), **options) as producer:
        await producer.send_and_wait("known", b"warm up")

        async def one(value: bytes) -> None:
            called.append(value)  # (send() takes its place before its first wait)
            await producer.send("ord", value)

        async with trio.open_nursery() as inner:
            for i in range(TASKS):
                inner.start_soon(one, b"waiter %d" % i)
                await trio.sleep(APART)
            gate.set()
            for i in range(40):
                inner.start_soon(one, b"racer %d" % i)
                await trio.sleep(0)
        await producer.flush()
    assert called[:TASKS] == [b"waiter %d" % i for i in range(TASKS)]
    assert log_values(cluster, "ord", 0) == called


@pytest.mark.parametrize("seed", range(8))
async def test_waiting_sends_woken_together_append_in_call_order(
    seed: int,
    monkeypatch: pytest.MonkeyPatch,
    autojump_clock: trio.testing.MockClock,
    nursery: trio.Nursery,
) -> None:
    # One Metadata answer wakes every waiting send at once: trio runs them in an order
    # its scheduler draws (it reverses each batch of runnable tasks half the time). Seeded
    # here, so each seed is one fixed schedule; the records must land in call order under
    # every one.
    monkeypatch.setattr(trio._core._run, "_r", random.Random(seed))
    print(f"trio scheduler seed {seed}")
    cluster = make_cluster(topics={"known": 1, "ord": 1})
    gate = trio.Event()

    async def held_answer(call: Any) -> None:
        request: MetadataRequest = call.request
        if request.topics is not None and "ord" in [t.name for t in request.topics]:
            await gate.wait()

    cluster.add_hook(MetadataRequest, held_answer)
    handles: list[Any] = []
    options: dict[str, Any] = {"transactional_id": "tx"}
    async with producer_for(MemoryTransport(cluster, nursery), **options) as producer:
        await producer.init_transactions()
        async with producer.transaction():

            async def one(i: int) -> None:
                handles.append(await producer.send("ord", b"m%d" % i, partition=0))

            async with trio.open_nursery() as tasks:
                for i in range(TASKS):
                    tasks.start_soon(one, i)
                    await trio.sleep(0)  # (task i calls send() before task i + 1 starts)
                await trio.sleep(APART)
                gate.set()
    assert log_values(cluster, "ord", 0) == [b"m%d" % i for i in range(TASKS)]


async def test_waiting_sends_fail_in_call_order_when_no_broker_answers(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    transport = MemoryTransport(make_cluster(topics={"ord": 1}), nursery, refuse=True)
    failed: list[tuple[int, BaseException]] = []
    async with producer_for(transport, max_block=2.0, close_timeout=0.1) as producer:

        async def one(i: int) -> None:
            await trio.sleep(i * APART)
            try:
                await producer.send("ord", b"m%d" % i, partition=0)
            except BrokerConnectionError as exc:
                failed.append((i, exc))

        async with trio.open_nursery() as tasks:
            for i in range(TASKS):
                tasks.start_soon(one, i)
        assert [i for i, _ in failed] == list(range(TASKS))
        assert all("no Kafka broker answered" in str(exc) for _, exc in failed)
        assert not producer._unknown_topics.any_waiting
        assert producer.metrics().buffer_in_use == 0


async def test_waiting_sends_to_a_missing_topic_all_fail_once_it_is_known_missing(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = make_cluster(topics={"t": 1}, options=ClusterOptions(auto_create_topics=False))
    raised: dict[int, float] = {}
    options: dict[str, Any] = {"partitioner": lambda record, view: 0, "max_block": 5.0}
    async with producer_for(MemoryTransport(cluster, nursery), **options) as producer:
        await producer.send_and_wait("t", b"warm up")

        async def one(i: int) -> None:
            await trio.sleep(i * APART)
            with pytest.raises(UnknownTopicError, match="'missing'"):
                await producer.send("missing", b"m%d" % i)
            raised[i] = trio.current_time()

        async with trio.open_nursery() as tasks:
            for i in range(TASKS):
                tasks.start_soon(one, i)
        # The first send's wait learns the topic is missing: every queued send fails
        # then, before its own max_block.
        assert sorted(raised) == list(range(TASKS))
        assert len(set(raised.values())) == 1
        assert not producer._unknown_topics.any_waiting
        assert producer.metrics().buffer_in_use == 0
        await producer.send_and_wait("t", b"the producer lives")


async def test_a_cancelled_waiting_send_appends_nothing(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = make_cluster(topics={"ord": 1})
    transport = MemoryTransport(cluster, nursery, refuse=True)
    async with producer_for(transport) as producer:
        handles: list[Any] = []

        async def one(i: int) -> None:
            handles.append(await producer.send("ord", b"m%d" % i, partition=0))

        async with trio.open_nursery() as tasks:
            for i in range(3):
                tasks.start_soon(one, i)
                await trio.sleep(APART)
            with trio.move_on_after(APART):
                await producer.send("ord", b"cancelled", partition=0)
            tasks.start_soon(one, 3)
            await trio.sleep(BROKER_LATE)
            transport.refuse = False
        await producer.flush()
        assert producer.metrics().buffer_in_use == 0
    assert log_values(cluster, "ord", 0) == [b"m0", b"m1", b"m2", b"m3"]


async def test_sends_waiting_from_before_the_first_answer_and_kept_after_it_keep_call_order(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    # One queue for both kinds: sends made before any broker answered wait in send();
    # once a broker answered (the topic not created yet), the next sends to the topic
    # are kept (send() returns at once). All of them land in call order.
    options = ClusterOptions(auto_create_topics=False)
    cluster = make_cluster(topics={"known": 1}, options=options)
    transport = MemoryTransport(cluster, nursery, refuse=True)
    kept: dict[int, bool] = {}
    async with producer_for(transport) as producer:

        async def one(i: int) -> None:
            handle = await producer.send("ord", b"m%d" % i, partition=0)
            kept[i] = handle.batch.partition < 0  # (still the queue's: it was kept)

        async with trio.open_nursery() as tasks:
            for i in range(TASKS // 2):
                tasks.start_soon(one, i)
                await trio.sleep(APART)
            transport.refuse = False
            while producer.selector.metadata.updated_at is None:
                await trio.sleep(APART / 10)
            for i in range(TASKS // 2, TASKS):
                tasks.start_soon(one, i)
                await trio.sleep(APART)
            cluster.create_topic("ord", 1)
        await producer.flush()
    assert log_values(cluster, "ord", 0) == [b"m%d" % i for i in range(TASKS)]
    assert [kept[i] for i in range(TASKS)] == [False] * (TASKS // 2) + [True] * (TASKS // 2)
