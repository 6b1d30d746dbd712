"""ConditionalWriter defects a user trial reported, on every backend the writer has: CAS on
the mock broker, transactions on the mock broker and on Apache Kafka 4.4 (`kafka`).

1. A catch-up read after a `ConcurrentWriteError` re-applied the writer's own appends
   (`last_read_end` stayed where the last read ended).
2. A fenced transactional writer went on raising `ConcurrentWriteError` for every append
   of a retry loop, which could never succeed: it must say it is dead, by its type.
3. A CAS writer refused by a broker without CAS named a topic config no such broker has.
4. Appends of one writer made at once by several tasks blamed "another writer" (its own).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import anyio
import pytest

from tests.integration._backends import mock_cluster
from tests.integration._helpers import create_topic, tansu_per_backend
from trio_kafka.client import ConditionalWriter, PartitionReader, open_conditional_writer
from trio_kafka.client._reader import IsolationLevel
from trio_kafka.errors import CasNotSupportedError, ConcurrentWriteError, WriterFencedError
from trio_kafka.net import open_selector
from trio_kafka.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from trio_kafka.protocol.messages.init_producer_id import InitProducerIdRequest
from trio_kafka.protocol.messages.produce import ProduceRequest
from trio_kafka.testing import KafkaNode, TansuBroker

#: Each test runs on trio, then on asyncio (issue 16; tests/conftest.py).
pytestmark = pytest.mark.anyio

CAS = {"expected.offset.check.enable": "true"}
tansu = tansu_per_backend()
_topics = itertools.count()


@asynccontextmanager
async def _mock_log(cas: bool) -> AsyncIterator[tuple[str, str, str]]:
    """(bootstrap, topic, guarantee) of a log on the mock broker, CAS-checked or not."""
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1, CAS if cas else {})
        yield cluster.bootstrap, "log", "exactly_once_cas" if cas else "auto"


def _writer(
    where: tuple[str, str, str], name: str, **options: object
) -> AbstractAsyncContextManager[ConditionalWriter]:
    bootstrap, topic, guarantee = where
    return open_conditional_writer(
        topic, 0, bootstrap=bootstrap, guarantee=guarantee, writer_ids=lambda: name, **options
    )


async def _balance_after_a_lost_race(where: tuple[str, str, str]) -> int:
    """The issue's program: A appends 10 three times (applying each), B appends 5, A's
    next append loses, and A catches up from `last_read_end`: on the transactional
    backend A is fenced, so a new writer reads on from the dead one's `last_read_end`."""
    balance = 0
    async with _writer(where, "A") as a:
        async for record in a.read_to_end():
            balance += int(record.value or b"0")
        for _ in range(3):
            await a.append(b"10")
            balance += 10
        async with _writer(where, "B") as b:
            async for _ in b.read_to_end():
                pass
            await b.append(b"5")
        try:
            await a.append(b"10")
        except WriterFencedError:
            async with _writer(where, "A-again") as again:
                async for record in again.read_to_end(start=a.last_read_end):
                    balance += int(record.value or b"0")
        except ConcurrentWriteError:
            async for record in a.read_to_end(start=a.last_read_end):
                balance += int(record.value or b"0")
        else:
            pytest.fail("A's append after B's landed: B never won the log")
    return balance


@pytest.mark.parametrize("cas", [True, False], ids=["cas", "transactional"])
async def test_a_catch_up_applies_each_entry_once_on_the_mock_broker(cas: bool) -> None:
    """Three of A's appends, then B's: caught up, A has 10 + 10 + 10 + 5, not A's own
    three appends twice (65: `last_read_end` stayed at 0 after A's appends)."""
    async with _mock_log(cas) as where:
        assert await _balance_after_a_lost_race(where) == 35


@pytest.mark.kafka
async def test_a_catch_up_applies_each_entry_once_on_kafka(kafka: KafkaNode) -> None:
    topic = f"balance-{next(_topics)}"
    await create_topic(kafka.bootstrap, topic, 1)
    assert await _balance_after_a_lost_race((kafka.bootstrap, topic, "auto")) == 35


@pytest.mark.tansu
async def test_a_catch_up_applies_each_entry_once_on_tansu(tansu: TansuBroker) -> None:
    topic = f"balance-{next(_topics)}"
    await create_topic(tansu.bootstrap, topic, 1)
    assert await _balance_after_a_lost_race((tansu.bootstrap, topic, "auto")) == 35


async def test_last_read_end_moves_past_the_writers_own_appends() -> None:
    async with _mock_log(cas=True) as where, _writer(where, "A") as log:
        async for _ in log.read_to_end():
            pass
        assert log.last_read_end == 0
        ack = await log.append(b"x")
        assert log.last_read_end == ack.offset + 1 == 1
        assert [r async for r in log.read_to_end(start=log.last_read_end)] == []


async def test_a_fenced_writer_fails_at_once_and_says_to_open_a_new_one() -> None:
    """Fenced, the transactional writer is dead: its append raises `WriterFencedError`
    (still a `ConcurrentWriteError`), and so does every later call, at once and without
    a request (the docs' retry loop used to spin: 1,984 `ConcurrentWriteError`s)."""
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1)
        sent: list[object] = []
        for api in (InitProducerIdRequest, AddPartitionsToTxnRequest, ProduceRequest):
            cluster.add_hook(api, sent.append)
        where = (cluster.bootstrap, "log", "transactional")
        async with _writer(where, "old") as old:
            async for _ in old.read_to_end():
                pass
            await old.append(b"one")
            async with _writer(where, "new") as new:
                with pytest.raises(WriterFencedError, match="newer writer took over") as first:
                    await old.append(b"two")
                assert isinstance(first.value, ConcurrentWriteError)
                assert "open a new writer" in str(first.value)
                before = len(sent)
                with pytest.raises(WriterFencedError, match="append on a dead writer") as again:
                    await old.append(b"three")
                assert "open a new writer" in str(again.value)
                with pytest.raises(WriterFencedError, match="read_to_end on a dead writer"):
                    async for _ in old.read_to_end(start=old.last_read_end):
                        pass
                assert len(sent) == before, "a dead writer sent requests"
                async for _ in new.read_to_end():
                    pass
                await new.append(b"four")
        async with _writer(where, "reopened") as reopened:
            seen = [r.value async for r in reopened.read_to_end(start=old.last_read_end)]
            assert seen == [b"four"]


@pytest.mark.parametrize("cas", [True, False], ids=["cas", "transactional"])
async def test_appends_of_one_writer_made_at_once_each_land(cas: bool) -> None:
    """16 tasks append on one writer at once: its appends go one at a time, so each
    lands (with CAS they all expected one offset, and 15 took the writer's own record
    there for another writer's)."""
    async with _mock_log(cas) as where, _writer(where, "A") as log:
        async for _ in log.read_to_end():
            pass
        acks: dict[int, int] = {}

        async def append(n: int) -> None:
            acks[n] = (await log.append(b"%d" % n)).offset

        async with anyio.create_task_group() as tasks:
            for n in range(16):
                tasks.start_soon(append, n)
        async with open_selector(where[0]) as selector:
            reader = PartitionReader(selector, isolation=IsolationLevel.READ_COMMITTED)
            records = await reader.read_all("log", 0)
    assert sorted(int(r.value or b"") for r in records) == list(range(16))
    assert {r.offset: int(r.value or b"") for r in records} == {o: n for n, o in acks.items()}


@pytest.mark.kafka
async def test_a_cas_writer_refused_by_kafka_names_the_guarantees_that_work(
    kafka: KafkaNode,
) -> None:
    """Apache Kafka has no CAS: the remedy is the transactional guarantee, not a topic
    config no Kafka broker can honour."""
    topic = f"refused-{next(_topics)}"
    await create_topic(kafka.bootstrap, topic, 1)
    with pytest.raises(CasNotSupportedError) as refused:
        async with open_conditional_writer(topic, 0, bootstrap=kafka.bootstrap):
            pass
    message = str(refused.value)
    assert 'guarantee="auto"' in message and 'guarantee="transactional"' in message
    assert "expected.offset.check.enable" not in message


async def test_a_cas_writer_refused_on_a_topic_without_cas_names_both_remedies() -> None:
    """A broker with CAS, a topic without the config: create the topic with it, or use
    the transactional guarantee."""
    async with _mock_log(cas=False) as (bootstrap, topic, _):
        with pytest.raises(CasNotSupportedError) as refused:
            async with open_conditional_writer(topic, 0, bootstrap=bootstrap):
                pass
    message = str(refused.value)
    assert "expected.offset.check.enable=true" in message
    assert 'guarantee="auto"' in message and 'guarantee="transactional"' in message
