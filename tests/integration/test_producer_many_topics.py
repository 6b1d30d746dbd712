"""A producer writing to many topics: its metadata requests grow with the new topics,
not with every topic it knows (KIP-526; aiokafka#943 is the bug this guards against).

Before: each first send to a topic refreshed the metadata of every topic of interest, so
the first sends to N topics asked for N * (N + 1) / 2 topic descriptions: 500,500 for
1,000 topics, and 1,000 topics took 23 s of CPU for 20,000 records (856 a second).
"""

from __future__ import annotations

import anyio
import pytest

from tests.integration._backends import mock_cluster
from tests.integration._helpers import FAST
from trio_kafka.broker import HookCall
from trio_kafka.client import open_producer
from trio_kafka.protocol.messages.metadata import MetadataRequest

#: Each test runs on trio, then on asyncio (issue 16; tests/conftest.py).
pytestmark = pytest.mark.anyio

TOPICS = 300


def record_asked(asked: list[list[str] | None]) -> object:
    def hook(call: HookCall) -> None:
        request: MetadataRequest = call.request
        asked.append(None if request.topics is None else [t.name for t in request.topics])

    return hook


async def test_first_sends_to_new_topics_ask_for_the_new_topics_only() -> None:
    names = [f"topic-{i:03d}" for i in range(TOPICS)]
    async with mock_cluster(topics=dict.fromkeys(names, 2)) as cluster:
        asked: list[list[str] | None] = []
        cluster.add_hook(MetadataRequest, record_asked(asked))
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
        asked: list[list[str] | None] = []
        cluster.add_hook(MetadataRequest, record_asked(asked))
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
