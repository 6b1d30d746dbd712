"""PartitionReader against the mock broker, in-process over real TCP, or over memory
streams in virtual time (`memory_topic`) where a test measures waits.

Records are written with raw ProduceRequests (BatchBuilder through the selector) or with
confluent-kafka (in a worker thread, the broker stays in this trio run).
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import pytest
import trio

from trio_kafka.broker import DROP, Cluster, HookCall, open_cluster
from trio_kafka.client._reader import PartitionReader
from trio_kafka.errors import (
    ErrorCode,
    InvalidPartitionError,
    OffsetOutOfRangeError,
    ReadTimeoutError,
)
from trio_kafka.net import KafkaSelector, open_selector
from trio_kafka.protocol.messages.fetch import (
    FetchableTopicResponse,
    FetchRequest,
    FetchResponse,
    PartitionData,
)
from trio_kafka.protocol.messages.metadata import MetadataRequest
from trio_kafka.protocol.messages.produce import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from trio_kafka.records import BatchBuilder
from trio_kafka.testing import BOOTSTRAP, MemoryTransport, make_cluster

if TYPE_CHECKING:
    from confluent_kafka import Producer

Row = tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]


async def produce(
    selector: KafkaSelector, topic: str, rows: Sequence[Row], partition: int = 0
) -> int:
    """Write `rows` as one batch with acks=all; returns its base offset."""
    await selector.wait_for_topic(topic, timeout=5)
    leader = selector.metadata.partition(topic, partition)
    assert leader is not None
    builder = BatchBuilder()
    for key, value, headers in rows:
        builder.append(1_700_000_000_000, key, value, headers)
    request = ProduceRequest(
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            TopicProduceData(
                name=topic,
                partition_data=[
                    PartitionProduceData(index=partition, records=builder.build(base_offset=-1))
                ],
            )
        ],
    )
    response = await selector.request(leader.leader, request)
    [answer] = response.responses[0].partition_responses
    assert answer.error_code == ErrorCode.NONE, answer
    return int(answer.base_offset)


async def produce_values(
    selector: KafkaSelector, topic: str, sizes: Sequence[int], partition: int = 0
) -> list[bytes]:
    """One batch per size, values v0, v1, ... with a header naming the offset."""
    values: list[bytes] = []
    for size in sizes:
        rows: list[Row] = []
        for _ in range(size):
            n = len(values) + len(rows)
            rows.append((b"k%d" % n, b"v%d" % n, [("n", str(n).encode()), ("none", None)]))
        await produce(selector, topic, rows, partition)
        values.extend(row[1] for row in rows)  # type: ignore[misc]
    return values


def topic_name() -> str:
    return f"r-{uuid.uuid4().hex[:8]}"


@contextlib.asynccontextmanager
async def one_topic(
    brokers: int = 1, **selector_options: Any
) -> AsyncIterator[tuple[str, Cluster, KafkaSelector]]:
    """A fresh one-partition topic on a new mock cluster, and a selector connected to it."""
    topic = topic_name()
    async with (
        open_cluster(brokers, topics={topic: 1}) as cluster,
        open_selector(cluster.bootstrap, **selector_options) as selector,
    ):
        yield topic, cluster, selector


@contextlib.asynccontextmanager
async def memory_topic(nursery: trio.Nursery) -> AsyncIterator[tuple[str, KafkaSelector]]:
    """`one_topic()` over memory streams: with the autojump clock, waits are exact."""
    topic = topic_name()
    cluster = make_cluster(topics={topic: 1})
    async with open_selector(BOOTSTRAP, transport=MemoryTransport(cluster, nursery)) as selector:
        yield topic, selector


def transactional_producer(bootstrap: str) -> Producer:
    """A confluent-kafka producer with a fresh transactional id, transactions initialised."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"tx-{uuid.uuid4().hex[:6]}",
            "log_level": 0,
            "logger": lambda *a: None,
        }
    )
    producer.init_transactions(10)
    return producer


async def test_reads_back_offsets_values_keys_and_headers() -> None:
    async with one_topic() as (topic, _, selector):
        values = await produce_values(selector, topic, [3, 2, 4])
        reader = PartitionReader(selector)
        assert await reader.log_start_offset(topic, 0) == 0
        assert await reader.log_end_offset(topic, 0) == 9
        records = await reader.read_all(topic, 0)
        assert [r.offset for r in records] == list(range(9))
        assert [r.value for r in records] == values
        assert [r.key for r in records] == [b"k%d" % n for n in range(9)]
        assert records[4].headers == (("n", b"4"), ("none", None))
        assert all(r.timestamp == 1_700_000_000_000 for r in records)


async def test_reads_a_range_that_starts_and_ends_inside_batches() -> None:
    async with one_topic() as (topic, _, selector):
        await produce_values(selector, topic, [3, 2, 4])
        reader = PartitionReader(selector)
        got = [r.offset async for r in reader.read(topic, 0, start=4, end=7)]
        assert got == [4, 5, 6]
        assert await reader.read_all(topic, 0, start=9) == []  # start == end: nothing
        assert await reader.read_all(topic, 0, start=2, end=2) == []


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        ("read_at", TypeError, "offset must be an offset (an int >= 0), not bool (True)"),
        ("read_at", TypeError, "offset must be an offset (an int >= 0), not str ('2')"),
        ("read_at", ValueError, "offset must be an offset (>= 0), not -1"),
        ("fetch", TypeError, "offset must be an offset (an int >= 0), not str ('2')"),
        ("fetch", ValueError, "offset must be an offset (>= 0), not -5"),
        ("read_all", TypeError, "end must be an offset (an int >= 0) or None, not float"),
    ],
)
async def test_an_offset_that_is_not_one_is_refused_by_name(
    call: str, error: type[Exception], message: str
) -> None:
    """A bool was read as offset 0 or 1 (`read_at(t, 0, True)` returned record 1), a
    str reached the Fetch encoder (`ProtocolError`), a negative offset the broker."""
    given = {
        "offset must be an offset (an int >= 0), not bool (True)": True,
        "offset must be an offset (an int >= 0), not str ('2')": "2",
        "offset must be an offset (>= 0), not -1": -1,
        "offset must be an offset (>= 0), not -5": -5,
    }
    async with one_topic() as (topic, _, selector):
        await produce_values(selector, topic, [3])
        reader = PartitionReader(selector)
        with pytest.raises(error, match=re.escape(message)):
            if call == "read_all":
                await reader.read_all(topic, 0, end=2.0)  # type: ignore[arg-type]
            else:
                await getattr(reader, call)(topic, 0, given[message])
        assert (await reader.read_at(topic, 0, 1)) is not None  # the reader goes on


async def test_an_empty_partition_reads_as_nothing() -> None:
    async with one_topic() as (topic, _, selector):
        reader = PartitionReader(selector)
        assert await reader.read_all(topic, 0) == []
        assert await reader.read_at(topic, 0, 0) is None


async def test_a_small_max_bytes_reads_through_partial_trailing_batches() -> None:
    async with one_topic() as (topic, cluster, selector):
        values = await produce_values(selector, topic, [5] * 20)
        fetches: list[int] = []

        def count(call: HookCall) -> None:
            fetches.append(call.request.topics[0].partitions[0].fetch_offset)

        cluster.add_hook(FetchRequest, count)
        # 150 bytes holds one 5-record batch whole and cuts the next one.
        reader = PartitionReader(selector, max_bytes=150)
        records = await reader.read_all(topic, 0)
        assert [r.value for r in records] == values
        assert fetches == list(range(0, 100, 5))


async def test_read_at_finds_the_record_and_none_past_the_end() -> None:
    async with one_topic() as (topic, _, selector):
        await produce_values(selector, topic, [3, 3])
        reader = PartitionReader(selector)
        record = await reader.read_at(topic, 0, 4)
        assert record is not None
        assert (record.offset, record.value, record.key) == (4, b"v4", b"k4")
        assert await reader.read_at(topic, 0, 0) is not None
        assert await reader.read_at(topic, 0, 6) is None  # the log end
        assert await reader.read_at(topic, 0, 1000) is None  # far beyond


async def test_reading_beyond_the_log_end_is_a_clear_error() -> None:
    async with one_topic() as (topic, _, selector):
        await produce_values(selector, topic, [2])
        reader = PartitionReader(selector)
        with pytest.raises(OffsetOutOfRangeError) as info:
            await reader.read_all(topic, 0, start=10, end=20)
        assert (info.value.offset, info.value.log_start_offset, info.value.log_end_offset) == (
            10,
            0,
            2,
        )


async def test_an_end_past_the_log_end_waits_for_new_records_then_times_out(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    async with memory_topic(nursery) as (topic, selector):
        await produce_values(selector, topic, [2])
        reader = PartitionReader(selector, max_wait=0.1)

        async def late_write() -> None:
            await trio.sleep(0.2)
            await produce(selector, topic, [(None, b"late", ())])

        start = trio.current_time()
        async with trio.open_nursery() as inner:
            inner.start_soon(late_write)
            records = await reader.read_all(topic, 0, start=0, end=3, timeout=5)
        assert [r.value for r in records] == [b"v0", b"v1", b"late"]
        assert trio.current_time() - start == pytest.approx(0.2)  # when "late" came

        read = reader.read(topic, 0, start=0, end=10, timeout=0.5)
        got = []
        start = trio.current_time()
        with pytest.raises(ReadTimeoutError, match="stuck at offset 3"):
            async for record in read:
                got.append(record.offset)
        assert got == [0, 1, 2]
        assert read.position == 3
        assert trio.current_time() - start == pytest.approx(0.5)


async def test_a_leader_move_in_the_middle_of_a_read() -> None:
    async with one_topic(3) as (topic, cluster, selector):
        values = await produce_values(selector, topic, [4] * 6)
        first = selector.metadata.partition(topic, 0)
        assert first is not None
        refused: list[int] = []

        def watch(call: HookCall) -> None:
            for topic_response in call.response.responses:
                for part in topic_response.partitions:
                    if part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                        refused.append(call.node_id)

        cluster.add_hook(FetchRequest, watch, after=True)
        reader = PartitionReader(selector, max_bytes=100)  # one batch per Fetch
        got: list[bytes | None] = []
        new_leader = (first.leader + 1) % 3
        async for record in reader.read(topic, 0):
            got.append(record.value)
            if record.offset == 5:
                cluster.move_leader(topic, 0, new_leader)
        assert got == values
        assert refused == [first.leader]
        moved = selector.metadata.partition(topic, 0)
        assert moved is not None
        assert (moved.leader, moved.leader_epoch) == (new_leader, first.leader_epoch + 1)


async def test_fenced_epoch_and_a_dropped_connection_are_retried() -> None:
    async with one_topic(retry_backoff=0.01) as (topic, cluster, selector):
        values = await produce_values(selector, topic, [3])
        fenced = FetchResponse(
            responses=[
                FetchableTopicResponse(
                    topic=topic,
                    partitions=[
                        PartitionData(partition_index=0, error_code=ErrorCode.FENCED_LEADER_EPOCH)
                    ],
                )
            ]
        )
        cluster.add_hook(FetchRequest, lambda call: fenced, times=1)
        cluster.add_hook(FetchRequest, lambda call: DROP, times=1)
        reader = PartitionReader(selector)
        assert [r.value for r in await reader.read_all(topic, 0)] == values


async def test_fetch_uses_topic_ids_from_v13_and_names_below_when_ids_are_unknown() -> None:
    topic = topic_name()
    async with open_cluster(1, topics={topic: 1}) as cluster:
        versions: list[tuple[int, uuid.UUID, str]] = []

        def record(call: HookCall) -> None:
            [fetch_topic] = call.request.topics
            versions.append((call.version, fetch_topic.topic_id, fetch_topic.topic))

        cluster.add_hook(FetchRequest, record)
        async with open_selector(cluster.bootstrap) as selector:
            values = await produce_values(selector, topic, [2])
            reader = PartitionReader(selector)
            assert [r.value for r in await reader.read_all(topic, 0)] == values
        [(version, topic_id, _)] = versions
        known = selector.metadata.topic(topic)
        assert known is not None
        assert version >= 13
        assert topic_id == known.topic_id

        versions.clear()

        def hide_ids(call: HookCall) -> object:
            response = call.response
            return attrs.evolve(
                response,
                topics=[attrs.evolve(t, topic_id=uuid.UUID(int=0)) for t in response.topics],
            )

        cluster.add_hook(MetadataRequest, hide_ids, after=True)
        async with open_selector(cluster.bootstrap) as selector:
            reader = PartitionReader(selector)
            assert [r.value for r in await reader.read_all(topic, 0)] == values
        [(version, _, name)] = versions
        assert (version, name) == (12, topic)


# -- transactions, written by confluent-kafka ---------------------------------------------


def write_transactions(bootstrap: str, topic: str) -> None:
    """Committed a0..a2, aborted b0..b1, committed c0 (all to partition 0)."""
    producer = transactional_producer(bootstrap)
    for prefix, count, commit in ((b"a", 3, True), (b"b", 2, False), (b"c", 1, True)):
        producer.begin_transaction()
        for i in range(count):
            producer.produce(topic, value=b"%s%d" % (prefix, i), partition=0)
        producer.flush(10)
        if commit:
            producer.commit_transaction(10)
        else:
            producer.abort_transaction(10)


async def transactional_cluster(cluster: Cluster, topic: str) -> None:
    pytest.importorskip("confluent_kafka")
    await trio.to_thread.run_sync(write_transactions, cluster.bootstrap, topic)


async def test_read_committed_hides_an_aborted_transaction() -> None:
    topic = topic_name()
    async with open_cluster(1, topics={topic: 1}) as cluster:
        await transactional_cluster(cluster, topic)
        # Log: a0 a1 a2 COMMIT b0 b1 ABORT c0 COMMIT -> offsets 0..8.
        async with open_selector(cluster.bootstrap) as selector:
            committed = PartitionReader(selector, isolation="read_committed")
            uncommitted = PartitionReader(selector, isolation="read_uncommitted")
            assert await committed.log_end_offset(topic, 0) == 9
            assert await uncommitted.log_end_offset(topic, 0) == 9
            seen = await committed.read_all(topic, 0)
            assert [(r.offset, r.value) for r in seen] == [
                (0, b"a0"),
                (1, b"a1"),
                (2, b"a2"),
                (7, b"c0"),
            ]
            everything = await uncommitted.read_all(topic, 0)
            assert [r.value for r in everything] == [b"a0", b"a1", b"a2", b"b0", b"b1", b"c0"]
            # Read from inside the aborted transaction: its list entry still applies.
            assert [r.value for r in await committed.read_all(topic, 0, start=5)] == [b"c0"]


async def test_read_at_a_control_marker_and_an_aborted_record() -> None:
    topic = topic_name()
    async with open_cluster(1, topics={topic: 1}) as cluster:
        await transactional_cluster(cluster, topic)
        async with open_selector(cluster.bootstrap) as selector:
            committed = PartitionReader(selector, isolation="read_committed")
            uncommitted = PartitionReader(selector)
            for reader in (committed, uncommitted):
                assert await reader.read_at(topic, 0, 3) is None  # COMMIT marker
                assert await reader.read_at(topic, 0, 6) is None  # ABORT marker
                record = await reader.read_at(topic, 0, 7)
                assert record is not None and record.value == b"c0"
            assert await committed.read_at(topic, 0, 4) is None  # aborted b0
            aborted = await uncommitted.read_at(topic, 0, 4)
            assert aborted is not None and aborted.value == b"b0"


async def test_read_committed_stops_at_an_open_transaction() -> None:
    async with one_topic() as (topic, cluster, selector):
        await produce_values(selector, topic, [2])
        pytest.importorskip("confluent_kafka")

        def open_transaction() -> Producer:
            producer = transactional_producer(cluster.bootstrap)
            producer.begin_transaction()
            producer.produce(topic, value=b"pending", partition=0)
            producer.flush(10)
            return producer

        producer = await trio.to_thread.run_sync(open_transaction)
        await produce_values(selector, topic, [1])  # after the open transaction
        committed = PartitionReader(selector, isolation="read_committed")
        uncommitted = PartitionReader(selector)
        assert await committed.log_end_offset(topic, 0) == 2  # the last stable offset
        assert await uncommitted.log_end_offset(topic, 0) == 4
        assert [r.offset for r in await committed.read_all(topic, 0)] == [0, 1]
        assert await committed.read_at(topic, 0, 2) is None  # undecided yet
        assert [r.value for r in await uncommitted.read_all(topic, 0)] == [
            b"v0",
            b"v1",
            b"pending",
            b"v0",
        ]
        await trio.to_thread.run_sync(producer.commit_transaction, 10)
        assert [r.value for r in await committed.read_all(topic, 0)] == [
            b"v0",
            b"v1",
            b"pending",
            b"v0",
        ]


async def test_the_end_is_fixed_when_the_read_begins() -> None:
    async with one_topic() as (topic, _, selector):
        await produce_values(selector, topic, [2, 2])
        reader = PartitionReader(selector, max_bytes=100)  # one batch per Fetch
        got = []
        async for record in reader.read(topic, 0):
            got.append(record.offset)
            if record.offset == 0:
                await produce_values(selector, topic, [3])  # after the read began
        assert got == [0, 1, 2, 3]
        assert len(await reader.read_all(topic, 0)) == 7


async def test_an_empty_partition_does_not_cost_a_long_poll(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    async with memory_topic(nursery) as (topic, selector):
        reader = PartitionReader(selector, max_wait=10)
        start = trio.current_time()
        assert await reader.read_all(topic, 0) == []
        assert await reader.read_at(topic, 0, 0) is None
        assert trio.current_time() - start < 1.0  # virtual time: max_wait is 10 s


async def test_below_the_log_start_is_an_error_for_read_at_and_read() -> None:
    async with one_topic() as (topic, cluster, selector):
        await produce_values(selector, topic, [3, 3])
        partition = cluster.state.partition(topic, 0)
        assert partition is not None
        partition.log.delete_records(3)
        reader = PartitionReader(selector)
        assert await reader.log_start_offset(topic, 0) == 3
        with pytest.raises(OffsetOutOfRangeError) as info:
            await reader.read_at(topic, 0, 1)
        assert (info.value.offset, info.value.log_start_offset) == (1, 3)
        with pytest.raises(OffsetOutOfRangeError):
            await reader.read_all(topic, 0, start=0)
        # start=None begins at the log start.
        assert [r.offset for r in await reader.read_all(topic, 0)] == [3, 4, 5]


async def test_a_missing_partition_is_a_clear_error() -> None:
    async with one_topic() as (topic, _, selector):
        reader = PartitionReader(selector)
        with pytest.raises(InvalidPartitionError, match="has no partition 3"):
            await reader.read_at(topic, 3, 0)


async def test_a_partition_that_is_not_an_int_is_named() -> None:
    # It was "'<=' not supported between instances of 'int' and 'str'".
    async with one_topic() as (topic, _, selector):
        reader = PartitionReader(selector)
        with pytest.raises(TypeError, match=r"partition must be an int, not str \('0'\)"):
            await reader.read_at(topic, "0", 0)  # type: ignore[arg-type]
