"""A producer writing to many topics: its metadata requests grow with the new topics,
not with every topic it knows (KIP-526; aiokafka#943 is the bug this guards against).

Before: each first send to a topic refreshed the metadata of every topic of interest, so
the first sends to N topics asked for N * (N + 1) / 2 topic descriptions: 500,500 for
1,000 topics, and 1,000 topics took 23 s of CPU for 20,000 records (856 a second).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from tests.integration._backends import mock_cluster
from tests.integration._helpers import FAST
from trio_kafka.broker import ClusterOptions, Delay, HookCall
from trio_kafka.client import open_producer
from trio_kafka.errors import InvalidTopicError, ProducerClosedError, UnknownTopicError
from trio_kafka.protocol.messages.metadata import MetadataRequest

#: Each test runs on trio, then on asyncio (issue 16; tests/conftest.py).
pytestmark = pytest.mark.anyio

TOPICS = 300


def metadata_requests(cluster: Any) -> list[list[str] | None]:
    """The topics each Metadata request to `cluster` names from now on (None: all)."""
    asked: list[list[str] | None] = []

    def hook(call: HookCall) -> None:
        request: MetadataRequest = call.request
        asked.append(None if request.topics is None else [t.name for t in request.topics])

    cluster.add_hook(MetadataRequest, hook)
    return asked


async def test_first_sends_to_new_topics_ask_for_the_new_topics_only() -> None:
    names = [f"topic-{i:03d}" for i in range(TOPICS)]
    async with mock_cluster(topics=dict.fromkeys(names, 2)) as cluster:
        asked = metadata_requests(cluster)
        async with open_producer(cluster.bootstrap, **FAST) as producer:
            with anyio.fail_after(30):
                for name in names:  # one at a time: each waits for its topic's metadata
                    await (await producer.send(name, b"first"))
            requests = [topics for topics in asked if topics]
            described = sum(len(topics) for topics in requests)
            # Each new topic asked for once (a retry or a periodic refresh may add a
            # few), never the ones already known: 300 names, not 45,150.
            assert TOPICS <= described <= TOPICS + 10, described
            assert {name for topics in requests for name in topics} == set(names)
            # A refresh without names (the periodic one, or after an error that
            # invalidates metadata) still covers every topic the producer writes to.
            asked.clear()
            with anyio.fail_after(10):
                await producer.selector.refresh_metadata()
            assert [sorted(topics or ()) for topics in asked] == [names]
            # And sends keep working on every topic after it.
            with anyio.fail_after(30):
                handles = [await producer.send(name, b"second") for name in names]
                offsets = [(await handle).offset for handle in handles]
            assert all(offset >= 0 for offset in offsets)


async def test_concurrent_first_sends_share_their_metadata_requests() -> None:
    names = [f"topic-{i:03d}" for i in range(TOPICS)]
    async with mock_cluster(topics=dict.fromkeys(names, 1)) as cluster:
        asked = metadata_requests(cluster)
        async with open_producer(cluster.bootstrap, **FAST) as producer:
            offsets: dict[str, int] = {}

            async def first(name: str) -> None:
                offsets[name] = (await (await producer.send(name, b"first"))).offset

            with anyio.fail_after(30):
                async with anyio.create_task_group() as tasks:
                    for name in names:
                        tasks.start_soon(first, name)
            assert offsets == dict.fromkeys(names, 0)
            requests = [topics for topics in asked if topics]
            # Topics named while a request was out go together in the next one.
            assert len(requests) <= 10, [len(topics) for topics in requests]
            assert sum(len(topics) for topics in requests) <= TOPICS + 10


async def test_wait_for_topics_learns_them_in_one_request() -> None:
    names = [f"topic-{i:03d}" for i in range(TOPICS)]
    async with mock_cluster(topics={**dict.fromkeys(names, 1), "six": 6}) as cluster:
        asked = metadata_requests(cluster)
        async with open_producer(cluster.bootstrap, **FAST) as producer:
            with anyio.fail_after(10):
                counts = await producer.wait_for_topics([*names, "six", names[0]])
            assert counts == {**dict.fromkeys(names, 1), "six": 6}
            assert [sorted(topics) for topics in asked if topics] == [sorted([*names, "six"])]
            asked.clear()
            with anyio.fail_after(30):  # the first sends wait for nothing now
                for name in names:
                    await (await producer.send(name, b"first"))
                assert await producer.wait_for_topics(["six"]) == {"six": 6}
            assert [topics for topics in asked if topics] == []


async def test_wait_for_topics_refuses_what_a_send_would() -> None:
    options = ClusterOptions(auto_create_topics=False)
    async with mock_cluster(topics={"orders": 2}, options=options) as cluster:
        async with open_producer(cluster.bootstrap, **FAST) as producer:
            with pytest.raises(TypeError, match=r"wait_for_topics\(\['orders'\]\)"):
                await producer.wait_for_topics("orders")
            with pytest.raises(TypeError, match="must be a str, not int"):
                await producer.wait_for_topics(["orders", 7])  # type: ignore[list-item]
            with pytest.raises(InvalidTopicError, match="not a valid Kafka topic name"):
                await producer.wait_for_topics(["orders", "no spaces"])
            with anyio.fail_after(10), pytest.raises(UnknownTopicError, match="missing"):
                await producer.wait_for_topics(["orders", "missing"], timeout=5)
            # Nothing of that hurt the producer.
            assert await producer.wait_for_topics(["orders"]) == {"orders": 2}
            assert (await (await producer.send("orders", b"x", partition=1))).offset == 0
        with pytest.raises(ProducerClosedError):
            await producer.wait_for_topics(["orders"])


async def test_a_topic_the_producer_stopped_writing_to_leaves_its_metadata_requests() -> None:
    # Java's metadata.max.idle.ms: the periodic refresh asks for the topics in use.
    async with mock_cluster(topics={"busy": 1, "once": 1}) as cluster:
        asked = metadata_requests(cluster)
        options = {**FAST, "metadata_max_age": 0.3, "metadata_max_idle": 0.5}
        async with open_producer(cluster.bootstrap, **options) as producer:
            with anyio.fail_after(30):
                await (await producer.send("once", b"x"))
                for i in range(30):  # 1.5 s of writing to "busy" only
                    await (await producer.send("busy", b"%d" % i))
                    await anyio.sleep(0.05)
                periodic = [sorted(topics) for topics in asked if topics and "busy" in topics]
                assert periodic[-1] == ["busy"], periodic  # "once" is no longer asked for
                assert producer.selector.metadata.topic("once") is None
                # Writing to it again learns it again.
                assert (await (await producer.send("once", b"y"))).offset == 1


async def test_first_sends_to_new_topics_return_before_their_metadata_and_land_in_order() -> None:
    # client/_unknown_topics.py, on both backends: a send to a topic the producer has no
    # metadata for keeps the record and returns its handle at once.
    names = [f"topic-{i:03d}" for i in range(50)]
    async with mock_cluster(topics={**dict.fromkeys(names, 2), "warm": 1}) as cluster:

        def slow(call: HookCall) -> Any:
            request: MetadataRequest = call.request
            if request.topics is not None and any(t.name in names for t in request.topics):
                return Delay(0.5)
            return None

        cluster.add_hook(MetadataRequest, slow)
        async with open_producer(cluster.bootstrap, **FAST) as producer:
            await (await producer.send("warm", b"a broker has answered"))
            start = anyio.current_time()
            handles = [
                await producer.send(name, b"%d" % i, key=b"k%d" % (i % 3))
                for i in range(10)
                for name in names
            ]
            assert anyio.current_time() - start < 0.4  # no send waited 0.5 s
            with anyio.fail_after(30):
                outcomes = [await handle for handle in handles]
    by_partition: dict[tuple[str, int], list[int]] = {}
    for outcome in outcomes:
        by_partition.setdefault((outcome.topic, outcome.partition), []).append(outcome.offset)
    # Each partition's records at offsets 0, 1, 2... in send order.
    assert all(offsets == list(range(len(offsets))) for offsets in by_partition.values())
    assert sum(len(offsets) for offsets in by_partition.values()) == 500
