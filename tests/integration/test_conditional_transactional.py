"""ConditionalWriter on a topic without CAS: the transactional writer (mock broker)."""

from __future__ import annotations

import contextlib
import itertools

import anyio
import attrs
import pytest

from tests.integration._backends import mock_cluster
from tests.integration._helpers import create_topic
from trio_kafka.broker import DROP, HookCall
from trio_kafka.client import PartitionReader, open_conditional_writer, open_producer, writer_of
from trio_kafka.client import _conditional as conditional_module
from trio_kafka.client._conditional import SEQUENCE_HEADER, WRITER_HEADER
from trio_kafka.client._reader import IsolationLevel
from trio_kafka.core import Acknowledged
from trio_kafka.errors import CasNotSupportedError, ConcurrentWriteError, KafkaError
from trio_kafka.net import open_selector
from trio_kafka.protocol.messages.end_txn import EndTxnRequest
from trio_kafka.protocol.messages.fetch import FetchRequest
from trio_kafka.protocol.messages.list_offsets import ListOffsetsRequest
from trio_kafka.testing import KafkaNode

#: Each test runs on trio, then on asyncio (issue 16; tests/conftest.py).
pytestmark = pytest.mark.anyio

APPENDS = 1000


async def test_two_transactional_writers_never_both_acknowledge_an_append() -> None:
    """Each writer makes 1,000 append attempts; a fenced one opens a new writer (which
    fences the other in turn). Every acknowledged append is in the committed log once,
    at its acknowledged offset, and no offset is acknowledged to two appends. Every 97th
    EndTxn answer is lost, so some outcomes are settled by reading the log back."""
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1)
        end_txns = [0]

        def lose_some(call: HookCall) -> object:
            end_txns[0] += 1
            return DROP if end_txns[0] % 97 == 0 else None

        cluster.add_hook(EndTxnRequest, lose_some, after=True)
        await race_and_check(cluster.bootstrap, "log", APPENDS)


@pytest.mark.kafka
async def test_two_transactional_writers_on_kafka_never_both_acknowledge_an_append(
    kafka: KafkaNode, anyio_backend: str
) -> None:
    """The same race on Apache Kafka 4.4 (transactions v2), 150 attempts a writer."""
    topic = f"log-{anyio_backend}"
    await create_topic(kafka.bootstrap, topic, 1)
    await race_and_check(kafka.bootstrap, topic, 150)


async def race_and_check(bootstrap: str, topic: str, appends: int) -> None:
    """Two writers race for `topic`-0 (`appends` attempts each); check what they were
    told against the committed log."""
    acked: dict[tuple[bytes, int], int] = {}  # (writer id, sequence) -> offset
    takeovers = [0]
    counter = itertools.count()

    async def writer(name: str) -> None:
        async with open_producer(bootstrap, linger=0, request_timeout=1) as producer:
            attempts = 0
            while attempts < appends:
                async with open_conditional_writer(
                    topic,
                    0,
                    producer=producer,
                    guarantee="auto",
                    writer_ids=lambda: f"{name}-{next(counter)}",
                ) as log:
                    assert log.guarantee == "transactional"
                    async for _ in log.read_to_end(start=0):
                        pass
                    while attempts < appends:
                        attempts += 1
                        sequence = log.sequence
                        try:
                            ack = await log.append(b"%s-%d" % (name.encode(), attempts))
                        except ConcurrentWriteError:
                            takeovers[0] += 1
                            break
                        acked[(log.writer_id, sequence)] = ack.offset
                        await anyio.sleep(0)

    async with anyio.create_task_group() as nursery:
        nursery.start_soon(writer, "A")
        nursery.start_soon(writer, "B")
    async with open_selector(bootstrap) as selector:
        reader = PartitionReader(selector, isolation=IsolationLevel.READ_COMMITTED)
        log = await reader.read_all(topic, 0)
    in_log: dict[tuple[bytes, int], list[int]] = {}
    for record in log:
        who, seq = writer_of(record)
        assert who is not None and seq is not None
        in_log.setdefault((who, seq), []).append(record.offset)
    print(f"{len(acked)} acknowledged, {takeovers[0]} takeovers, {len(log)} committed")
    assert takeovers[0] > 0, "the writers never fenced each other: the test proves nothing"
    for append, offset in acked.items():
        assert in_log.get(append) == [offset], append
    assert len(set(acked.values())) == len(acked), "an offset acknowledged twice"
    assert all(len(offsets) == 1 for offsets in in_log.values())


async def test_a_conditional_writer_that_demands_cas_is_refused_without_it() -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1)
        with pytest.raises(CasNotSupportedError):
            async with open_conditional_writer("log", 0, bootstrap=cluster.bootstrap):
                pass


async def test_an_append_the_broker_refuses_fails_alone_at_once() -> None:
    # Its transaction was aborted and the group sent again until the writer gave up: a
    # keyless append to a compacted log was refused every time, for a minute.
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1, {"cleanup.policy": "compact"})
        async with open_conditional_writer(
            "log", 0, bootstrap=cluster.bootstrap, guarantee="transactional"
        ) as writer:
            async for _ in writer.read_to_end():
                pass
            outcomes: dict[str, object] = {}

            async def append(name: str, key: bytes | None) -> None:
                try:
                    outcomes[name] = await writer.append(name.encode(), key=key)
                except KafkaError as exc:
                    outcomes[name] = exc

            with anyio.fail_after(10):
                async with anyio.create_task_group() as group:  # one group commit
                    group.start_soon(append, "keyed", b"k")
                    group.start_soon(append, "keyless", None)
                    group.start_soon(append, "keyed too", b"k2")
        assert "Compacted topic cannot accept message without key" in str(outcomes["keyless"])
        landed = {name: o.offset for name, o in outcomes.items() if isinstance(o, Acknowledged)}
        assert set(landed) == {"keyed", "keyed too"}, outcomes


async def test_the_newest_transactional_writer_takes_over_the_log() -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1)
        async with (
            open_conditional_writer(
                "log", 0, bootstrap=cluster.bootstrap, guarantee="transactional"
            ) as old,
        ):
            async for _ in old.read_to_end():
                pass
            first = await old.append(b"one")
            async with open_conditional_writer(
                "log", 0, bootstrap=cluster.bootstrap, guarantee="transactional"
            ) as new:
                async for record in new.read_to_end():
                    assert record.value == b"one"
                with pytest.raises(ConcurrentWriteError, match="newer writer took over"):
                    await old.append(b"two")
                second = await new.append(b"three")
        assert first.offset == 0 and second.offset > first.offset


async def test_a_writer_fenced_before_its_commit_does_not_read_the_log() -> None:
    """Only a writer's own EndTxn(commit) commits its append: fenced before sending one
    (AddPartitionsToTxn answered PRODUCER_FENCED, the usual takeover), the append is
    certainly not in the log, and the writer says so without reading it back."""
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1)
        reads: list[HookCall] = []
        for api in (FetchRequest, ListOffsetsRequest):
            cluster.add_hook(api, reads.append)
        async with open_conditional_writer(
            "log", 0, bootstrap=cluster.bootstrap, guarantee="transactional"
        ) as old:
            async for _ in old.read_to_end():
                pass
            await old.append(b"one")
            async with open_conditional_writer(
                "log", 0, bootstrap=cluster.bootstrap, guarantee="transactional"
            ) as new:
                async for _ in new.read_to_end():
                    pass
                before = len(reads)
                with pytest.raises(ConcurrentWriteError, match="was not committed") as raised:
                    await old.append(b"two")
                assert "AddPartitionsToTxn answered PRODUCER_FENCED" in str(raised.value)
                assert len(reads) == before, "the fenced writer read the log back"
                await new.append(b"three")
        async with open_selector(cluster.bootstrap) as selector:
            reader = PartitionReader(selector, isolation=IsolationLevel.READ_COMMITTED)
            assert [r.value for r in await reader.read_all("log", 0)] == [b"one", b"three"]


@pytest.mark.parametrize("given", ["bootstrap", "producer"])
async def test_the_transactional_writer_keeps_the_options_it_was_given(given: str) -> None:
    """On a topic without CAS the writer appends through a transactional producer of its
    own: it takes the options given (they used to be dropped there: a request timeout of
    30 s and no compression, whatever the application asked for), made transactional."""
    options = {"request_timeout": 3.0, "delivery_timeout": 9.0, "compression": "gzip"}
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1)
        async with contextlib.AsyncExitStack() as stack:
            if given == "bootstrap":
                log = await stack.enter_async_context(
                    open_conditional_writer(
                        "log", 0, bootstrap=cluster.bootstrap, guarantee="auto", **options
                    )
                )
            else:  # a producer that could not be transactional as it is
                producer = await stack.enter_async_context(
                    open_producer(
                        cluster.bootstrap,
                        enable_idempotence=False,
                        acks=1,
                        max_in_flight=10,
                        retries=0,
                        linger=0.2,
                        **options,
                    )
                )
                log = await stack.enter_async_context(
                    open_conditional_writer("log", 0, producer=producer, guarantee="auto")
                )
            assert log.guarantee == "transactional"
            config = log.producer.config
            assert (config.request_timeout, config.delivery_timeout) == (3.0, 9.0)
            assert config.compression == "gzip" and config.linger == 0.0
            assert config.transactional_id == "tk-log-log-0"
            assert (config.enable_idempotence, config.acks) == (True, -1)
            assert config.max_in_flight <= 5 and config.retries >= 1
            async for _ in log.read_to_end():
                pass
            await log.append(b"x" * 1000)
        (data,) = [b for b in cluster.batches("log", 0) if not b.is_control]
        attributes = int.from_bytes(data.data[21:23], "big")
        assert attributes & 0x07 == 1  # gzip, as asked


def _show_aborted_records(call: HookCall) -> object:
    """The mock broker answering Fetch as Tansu does: no aborted-transactions list, so a
    read_committed reader gets the records of aborted transactions too."""
    topics = [
        attrs.evolve(
            topic,
            partitions=[attrs.evolve(p, aborted_transactions=[]) for p in topic.partitions],
        )
        for topic in call.response.responses
    ]
    return attrs.evolve(call.response, responses=topics)


@pytest.mark.parametrize("window", [10_000, 1])  # 1: each marker read apart from its record
@pytest.mark.parametrize("tansu_fetch", [False, True])
async def test_a_writer_never_takes_an_aborted_record_for_committed(
    tansu_fetch: bool, window: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a lost commit answer or a fence, the writer looks for its append in the
    log (`_find`), and it rebuilds state from the log (`read_to_end`). Both judge by the
    transaction markers, not by what read_committed returns: on a broker that shows aborted records to read_committed readers (Tansu)
    it used to find its own aborted append there and report it acknowledged (the chaos
    suite's cas-txn seed 101 on Tansu). Appends 0 (aborted) and 1 (committed) of one
    writer id: 0 is not found, 1 is, on both kinds of Fetch answers."""
    monkeypatch.setattr(conditional_module, "_FIND_WINDOW", window)
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1)
        if tansu_fetch:
            cluster.add_hook(FetchRequest, _show_aborted_records, after=True)
        writer = b"writer-1"
        async with open_conditional_writer(
            "log", 0, bootstrap=cluster.bootstrap, guarantee="transactional"
        ) as log:
            producer = log.producer
            for sequence, outcome in ((0, "abort"), (1, "commit")):
                headers = [(WRITER_HEADER, writer), (SEQUENCE_HEADER, str(sequence).encode())]
                with contextlib.suppress(RuntimeError):
                    async with producer.transaction():
                        await producer.send("log", b"v%d" % sequence, headers=headers, partition=0)
                        await producer.flush()
                        if outcome == "abort":
                            raise RuntimeError("abort it")
            async with open_selector(cluster.bootstrap) as selector:
                reader = PartitionReader(selector, isolation=IsolationLevel.READ_COMMITTED)
                shown = [r.value for r in await reader.read_all("log", 0)]
            assert shown == ([b"v0", b"v1"] if tansu_fetch else [b"v1"])  # the broker's view
            # The log as the writer rebuilds its state from it: the committed append only,
            # whatever the broker's read_committed shows; it ends after the COMMIT marker.
            assert [r.value async for r in log.read_to_end()] == [b"v1"]
            assert log.next_offset == log.last_read_end == 4  # v0, ABORT, v1, COMMIT
            assert [r.value async for r in log.read_to_end(start=1)] == [b"v1"]
            log.last_read_end = 0
            log.writer_id = writer
            assert await log._find(0) is None  # aborted: not acknowledged
            found = await log._find(1)
            assert found is not None and found.offset == 2  # v0, its ABORT marker, v1
