"""`send()` to a topic whose metadata has not come yet returns at once (client/_unknown_topics.py):
the record is kept, its handle returned, and placed in send order when the metadata
comes. Before, each first send to a topic waited a metadata round trip (as the Java
client's `send()` does): a first record to each of 1,000 topics waited 1,000 of them.

Virtual time (trio's autojump clock) against the in-memory mock broker.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing

from trio_kafka import BrokerConnectionError, InvalidPartitionError, UnknownTopicError
from trio_kafka.broker import ClusterOptions, Delay
from trio_kafka.core import Acknowledged, Failed
from trio_kafka.core._partitioner import partition_for_key
from trio_kafka.protocol.messages.metadata import MetadataRequest
from trio_kafka.testing import MemoryTransport, make_cluster, producer_for

SLOW_METADATA = 1.0  # seconds each Metadata answer takes below


def slow_metadata_cluster(asked: list[list[str] | None] | None = None, **topics: int) -> Any:
    """A cluster whose Metadata answers take `SLOW_METADATA`; `asked` gets the topics
    each request names (None: all)."""
    cluster = make_cluster(topics={"known": 1, **topics})
    asked = [] if asked is None else asked

    def hook(call: Any) -> Delay:
        request: MetadataRequest = call.request
        asked.append(None if request.topics is None else [t.name for t in request.topics])
        return Delay(SLOW_METADATA)

    cluster.add_hook(MetadataRequest, hook)
    return cluster


@contextlib.asynccontextmanager
async def answered_producer(
    cluster: Any, nursery: trio.Nursery, topic: str = "known", **options: Any
) -> AsyncIterator[Any]:
    """A producer a broker has answered (one record to `topic` acknowledged): its sends
    to topics it has no metadata for are kept, not waited for."""
    async with producer_for(MemoryTransport(cluster, nursery), **options) as producer:
        await producer.send_and_wait(topic, b"warm up")
        yield producer


def written(cluster: Any, topic: str, partition: int) -> list[tuple[bytes | None, bytes]]:
    return [(r.key, r.value) for b in cluster.decoded(topic, partition) for r in b.records]


async def test_sends_to_a_new_topic_return_at_once_and_land_in_send_order(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = slow_metadata_cluster(fresh=3)
    async with answered_producer(cluster, nursery) as producer:
        start = trio.current_time()
        handles = []
        for i in range(3000):  # keyed and unkeyed, some to an explicit partition
            key = b"k%d" % (i % 7) if i % 3 == 0 else None
            partition = 2 if i % 5 == 0 and key is None else None
            handles.append(await producer.send("fresh", b"%d" % i, key=key, partition=partition))
        assert trio.current_time() == start  # no send waited for the metadata
        assert not any(handle.done() for handle in handles)
        outcomes = [await handle for handle in handles]
    assert all(isinstance(outcome, Acknowledged) for outcome in outcomes)
    # Each record at the offset its handle says, and each partition in send order.
    for p in range(3):
        log = written(cluster, "fresh", p)
        mine = [(o.offset, i) for i, o in enumerate(outcomes) if o.partition == p]
        assert [value for _, value in log] == [b"%d" % i for _, i in sorted(mine)]
        assert [offset for offset, _ in mine] == list(range(len(log)))
        assert [i for _, i in mine] == sorted(i for _, i in mine)
    # Keyed records went where the key says (Java's murmur2 partition, as if the metadata
    # had been there), and each record is written with its own key.
    for i, outcome in enumerate(outcomes):
        if i % 3 == 0:
            assert outcome.partition == partition_for_key(b"k%d" % (i % 7), 3), i
    for p in range(3):
        sent = {b"%d" % i: b"k%d" % (i % 7) if i % 3 == 0 else None for i in range(3000)}
        assert all(key == sent[value] for key, value in written(cluster, "fresh", p))


async def test_records_sent_while_the_metadata_comes_do_not_pass_the_kept_ones(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = slow_metadata_cluster(fresh=1)
    async with answered_producer(cluster, nursery) as producer:
        handles = []

        async def keep_sending() -> None:
            for i in range(400):  # across the moment the metadata comes
                handles.append(await producer.send("fresh", b"%d" % i))
                await trio.sleep(SLOW_METADATA / 100)

        async with trio.open_nursery() as inner:
            inner.start_soon(keep_sending)
        offsets = [(await handle).offset for handle in handles]
    assert offsets == list(range(400))
    assert [value for _, value in written(cluster, "fresh", 0)] == [b"%d" % i for i in range(400)]


async def test_no_send_passes_the_kept_records_as_their_metadata_comes(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    # A send in every scheduling round while the metadata arrives: whichever round it
    # lands in (before the kept records are placed, between, after), it must not pass
    # them. (Fails if the topic is shown to the core one checkpoint before the kept
    # records are appended.)
    cluster = make_cluster(topics={"known": 1, "fresh": 1})
    gate = trio.Event()

    async def held_answer(call: Any) -> None:
        request: MetadataRequest = call.request
        if request.topics is not None and "fresh" in [t.name for t in request.topics]:
            await gate.wait()

    cluster.add_hook(MetadataRequest, held_answer)
    async with answered_producer(cluster, nursery) as producer:
        handles = [await producer.send("fresh", b"kept %d" % i) for i in range(10)]

        async def racer() -> None:
            for i in range(300):
                handles.append(await producer.send("fresh", b"racer %d" % i))
                await trio.sleep(0)

        async with trio.open_nursery() as inner:
            inner.start_soon(racer)
            await trio.sleep(0)
            gate.set()
        offsets = [(await handle).offset for handle in handles]
    assert offsets == list(range(len(handles)))


async def test_first_sends_to_many_new_topics_share_a_few_metadata_requests(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    names = [f"topic-{i:04d}" for i in range(1000)]
    asked: list[list[str] | None] = []
    cluster = slow_metadata_cluster(asked, **dict.fromkeys(names, 1))
    async with answered_producer(cluster, nursery) as producer:
        asked.clear()
        start = trio.current_time()
        handles = [await producer.send(name, b"first") for name in names]
        assert trio.current_time() == start
        await producer.flush()
        # Two round trips of the slow metadata (the first new topic's, then all the
        # others named while it was out), not a thousand.
        assert trio.current_time() - start < 4 * SLOW_METADATA
        assert [handle.offset for handle in handles] == [0] * len(names)
    requests = [topics for topics in asked if topics]
    assert len(requests) <= 3, [len(topics) for topics in requests]


async def test_a_kept_record_for_a_partition_the_topic_lacks_fails_alone(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = slow_metadata_cluster(fresh=2)
    async with answered_producer(cluster, nursery) as producer:
        before = await producer.send("fresh", b"before", partition=1)
        assert repr(before) == ("<RecordHandle fresh#0 (waiting for the topic's metadata) pending>")
        bad = await producer.send("fresh", b"bad", partition=5)
        after = await producer.send("fresh", b"after", partition=1)
        with pytest.raises(InvalidPartitionError, match="partition 5 of topic 'fresh'"):
            await bad
        assert (await before).offset == 0 and (await after).offset == 1
        assert repr(after) == "<RecordHandle fresh-1#1 acknowledged offset=1>"
        assert not bad.succeeded() and isinstance(bad.outcome, Failed)
    assert written(cluster, "fresh", 1) == [(None, b"before"), (None, b"after")]


async def test_kept_records_of_a_missing_topic_fail_and_free_their_buffer(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = make_cluster(topics={"t": 1}, options=ClusterOptions(auto_create_topics=False))
    seen: list[Any] = []

    class Interceptor:
        def on_acknowledgement(self, outcome: Any) -> None:
            seen.append(outcome)

    options: dict[str, Any] = {"max_block": 5.0, "interceptors": [Interceptor()]}
    async with answered_producer(cluster, nursery, "t", **options) as producer:
        called: list[Any] = []
        handles = [await producer.send("missing", b"v%d" % i) for i in range(50)]
        handles[7].add_done_callback(lambda handle: called.append(handle.outcome))
        assert producer.metrics().buffer_in_use > 0
        with pytest.raises(UnknownTopicError, match="'missing'"):
            await handles[0]
        assert all(isinstance(handle.outcome, Failed) for handle in handles)
        assert len(called) == 1 and isinstance(called[0], Failed)
        assert producer.metrics().buffer_in_use == 0
        # Interceptors hear of each, as of any record that failed.
        assert sum(isinstance(outcome, Failed) for outcome in seen) == 50
        # The producer goes on, and the same topic may be tried again.
        await producer.send_and_wait("t", b"the producer lives")
        again = await producer.send("missing", b"again")
        with pytest.raises(UnknownTopicError):
            await again


async def test_flush_waits_for_the_kept_records(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = slow_metadata_cluster(fresh=1)
    async with answered_producer(cluster, nursery) as producer:
        handle = await producer.send("fresh", b"x")
        callbacks: list[Any] = []
        handle.add_done_callback(lambda h: callbacks.append(h.outcome))
        await producer.flush()
        assert handle.done() and handle.succeeded() and handle.offset == 0
        assert len(callbacks) == 1 and isinstance(callbacks[0], Acknowledged)


async def test_a_kept_record_counts_against_buffer_memory(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = slow_metadata_cluster(fresh=1)
    options: dict[str, Any] = {"buffer_memory": 10_000, "batch_size": 4_000}
    async with answered_producer(cluster, nursery, **options) as producer:
        start = trio.current_time()
        handles = [await producer.send("fresh", b"v" * 100) for _ in range(200)]
        # 20,000 bytes of records in 10,000 of buffer: the later sends waited for room,
        # which the first ones freed once the metadata came and they were written.
        assert trio.current_time() - start >= SLOW_METADATA
        assert [(await handle).offset for handle in handles] == list(range(200))


async def test_until_a_broker_answers_a_send_waits_and_raises_what_is_wrong(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    # No metadata yet: an unreachable address (or a wrong security setting) is what the
    # first send raises, where a new user sees it, rather than a handle nobody awaits.
    transport = MemoryTransport(make_cluster(topics={"t": 1}), nursery, refuse=True)
    async with producer_for(transport, max_block=0.5, close_timeout=0.1) as producer:
        with pytest.raises(BrokerConnectionError, match="'t'"):
            await producer.send("t", b"x")
        assert not producer._unknown_topics.any_waiting


async def test_a_transactional_send_to_a_new_topic_waits_for_it(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = slow_metadata_cluster(fresh=1)
    options: dict[str, Any] = {"transactional_id": "tx"}
    async with producer_for(MemoryTransport(cluster, nursery), **options) as producer:
        await producer.init_transactions()
        async with producer.transaction():
            await producer.send("known", b"warm up")
            start = trio.current_time()
            handle = await producer.send("fresh", b"in the transaction")
            assert trio.current_time() - start >= SLOW_METADATA  # waited, as Java's does
        assert (await handle).offset == 0


async def test_send_many_goes_after_the_kept_records(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    # It cannot be kept (it appends in bulk; nor can a CAS write, which names its offset):
    # they wait for the topic, behind the records kept for it.
    cluster = slow_metadata_cluster(fresh=1)
    async with answered_producer(cluster, nursery) as producer:
        kept = [await producer.send("fresh", b"kept %d" % i, partition=0) for i in range(3)]
        bulk = await producer.send_many([b"bulk %d" % i for i in range(3)], topic="fresh")
        assert not producer._unknown_topics.any_waiting  # placed before send_many appended
        assert await bulk == 3
        offsets = [(await handle).offset for handle in kept]
    assert offsets == [0, 1, 2]
    assert [value for _, value in written(cluster, "fresh", 0)] == [
        b"kept 0",
        b"kept 1",
        b"kept 2",
        b"bulk 0",
        b"bulk 1",
        b"bulk 2",
    ]
