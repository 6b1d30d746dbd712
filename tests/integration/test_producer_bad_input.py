"""One bad record never hurts another: bad input fails at `send()`, alone.

Every input the wire cannot carry (a header value of the wrong type, a timestamp that is
not an int, ...) and every exception from the user's own code (serializers, interceptors,
a custom partitioner) fails that record only; afterwards a record to another topic is
still acknowledged, so the producer lives.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.integration._backends import mock_cluster
from trio_kafka import ProducerRecord, open_producer
from trio_kafka.client import Producer
from trio_kafka.core import Acknowledged
from trio_kafka.errors import InvalidTopicError, KafkaError
from trio_kafka.records import decode_batches

#: Each test runs on trio, then on asyncio (issue 16; tests/conftest.py).
pytestmark = pytest.mark.anyio


def _values(cluster: Any, topic: str) -> list[bytes | None]:
    """The values in partition 0 of `topic` on the mock broker."""
    partition = cluster.state.partition(topic, 0)
    if partition is None:
        return []
    data = b"".join(stored.data for stored in partition.log.batches)
    return [r.value for batch in decode_batches(data) for r in batch.records]


async def _healthy(producer: Producer, topic: str = "healthy") -> None:
    handle = await producer.send(topic, b"still alive")
    await producer.flush()
    assert isinstance(await handle, Acknowledged)


BAD_HEADERS: list[tuple[Any, str]] = [
    ([(b"h", b"v")], "header 0's key must be str, not bytes"),
    ([("h", 1)], "header 'h' value must be bytes, str or None, not int"),
    ([("h", 1.5)], "header 'h' value must be bytes, str or None, not float"),
    ([("h", ["x"])], "header 'h' value must be bytes, str or None, not list"),
    ([("h", {"a": b"b"})], "header 'h' value must be bytes, str or None, not dict"),
    ([("h",)], "header 0 must be a (key, value) pair, not tuple of length 1"),
    (["hv"], "header 0 must be a (key, value) pair, not str"),
    ("h=v", "headers must be a list of (key, value) pairs or a dict, not str"),
    (7, "headers must be a list of (key, value) pairs or a dict, not int"),
    ({1: b"v"}, "header 0's key must be str, not int"),
]


@pytest.mark.parametrize(("headers", "message"), BAD_HEADERS)
async def test_a_bad_header_fails_at_send_and_the_producer_lives(
    headers: Any, message: str
) -> None:
    async with mock_cluster() as cluster, open_producer(cluster.bootstrap) as producer:
        with pytest.raises(TypeError) as info:
            await producer.send("t", b"v", headers=headers)
        assert message in str(info.value)
        with pytest.raises(TypeError):
            await producer.send(ProducerRecord("t", b"v", headers=headers))
        await _healthy(producer)


async def test_str_header_values_are_sent_as_utf8_and_dicts_as_pairs() -> None:
    # confluent-kafka's rule: key str, value bytes | str | None, a list or a dict.
    async with mock_cluster() as cluster, open_producer(cluster.bootstrap) as producer:
        first = await producer.send("t", b"v", headers=[("h", "é"), ("n", None)])
        second = await producer.send("t", b"v", headers={"h": "x", "b": bytearray(b"y")})
        third = await producer.send(ProducerRecord("t", b"v", headers=[("h", "s")]))
        await producer.flush()
        for handle in (first, second, third):
            assert isinstance(await handle, Acknowledged)
        partition = cluster.state.partition("t", 0)
        assert partition is not None
        data = b"".join(stored.data for stored in partition.log.batches)
        headers = [list(r.headers) for batch in decode_batches(data) for r in batch.records]
    assert headers == [
        [("h", "é".encode()), ("n", None)],
        [("h", b"x"), ("b", b"y")],
        [("h", b"s")],
    ]


BAD_FIELDS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"value": "text"}, TypeError, "value must be bytes or None, not str"),
    ({"value": 5}, TypeError, "value must be bytes or None, not int"),
    ({"key": "k"}, TypeError, "key must be bytes or None, not str"),
    ({"timestamp": 1.5}, TypeError, "timestamp must be an int (ms since the epoch)"),
    ({"timestamp": "now"}, TypeError, "timestamp must be an int (ms since the epoch)"),
    ({"partition": 0.0}, TypeError, "partition must be an int or None, not float"),
    ({"partition": "0"}, TypeError, "partition must be an int or None, not str"),
    ({"timestamp": -5}, ValueError, "timestamp=-5 is not allowed"),
    ({"timestamp": 2**63}, ValueError, "0 to 9223372036854775807"),
]


@pytest.mark.parametrize(("fields", "kind", "message"), BAD_FIELDS)
async def test_a_field_of_the_wrong_type_fails_at_send_and_the_producer_lives(
    fields: dict[str, Any], kind: type[Exception], message: str
) -> None:
    arguments: dict[str, Any] = {"value": b"v", **fields}
    async with mock_cluster() as cluster, open_producer(cluster.bootstrap) as producer:
        with pytest.raises(kind) as info:
            await producer.send("t", **arguments)
        assert message in str(info.value)
        await _healthy(producer)


async def test_a_topic_that_is_not_a_str_is_a_type_error() -> None:
    async with mock_cluster() as cluster, open_producer(cluster.bootstrap) as producer:
        with pytest.raises(TypeError, match="topic must be a str or a ProducerRecord, not bytes"):
            await producer.send(b"t", b"v")  # type: ignore[arg-type]
        await _healthy(producer)


async def test_a_timestamp_past_int64_fails_alone_not_its_batch() -> None:
    # It used to pass send() and fail the encoding of its whole batch in the sender,
    # taking the records sent before and after it into the same batch with it.
    async with mock_cluster() as cluster, open_producer(cluster.bootstrap, linger=0.5) as producer:
        before = await producer.send("t", b"before", partition=0)
        with pytest.raises(ValueError, match="timestamp"):
            await producer.send("t", b"bad", partition=0, timestamp=2**70)
        after = await producer.send("t", b"after", partition=0)
        await producer.flush()
        assert [(await h).offset for h in (before, after)] == [0, 1]  # type: ignore[attr-defined]


@pytest.mark.parametrize("field", ["value", "key", "headers"])
async def test_a_producer_record_with_a_field_beside_it_is_refused(field: str) -> None:
    # It used to be dropped silently: the record's own (None) went instead.
    given: dict[str, Any] = {"value": b"v", "key": b"k", "headers": [("h", b"v")]}
    async with mock_cluster() as cluster, open_producer(cluster.bootstrap) as producer:
        with pytest.raises(TypeError, match=f"a ProducerRecord and {field} beside it"):
            if field == "value":
                await producer.send(ProducerRecord("t", b"r"), b"v")
            else:
                await producer.send(ProducerRecord("t", b"r"), **{field: given[field]})
        await _healthy(producer)


async def test_partition_and_timestamp_beside_a_producer_record_replace_its_own() -> None:
    # As the blocking facade and the CAS form take them (the fast path ignored them).
    async with mock_cluster() as cluster:
        cluster.create_topic("t", 2)
        async with open_producer(cluster.bootstrap) as producer:
            record = ProducerRecord("t", b"r", partition=0, timestamp=5)
            ack = await (await producer.send(record, partition=1, timestamp=7))
        assert (ack.partition, ack.timestamp) == (1, 7)  # type: ignore[attr-defined]


async def test_send_many_of_values_without_a_topic_says_so() -> None:
    async with mock_cluster() as cluster, open_producer(cluster.bootstrap) as producer:
        with pytest.raises(TypeError, match="record 0 is a bytes, not a ProducerRecord"):
            await producer.send_many([b"a", b"b"])
        await _healthy(producer)


@pytest.mark.parametrize(
    ("records", "error", "message"),
    [
        (
            [ProducerRecord("t", b"a"), ProducerRecord("t", 5), ProducerRecord("t", b"c")],
            TypeError,
            "send_many: record 1: value must be bytes or None, not int",
        ),
        (
            [ProducerRecord("t", b"a"), ProducerRecord("bad topic!", b"b")],
            InvalidTopicError,
            "'bad topic!' is not a valid Kafka topic name",
        ),
        (
            [ProducerRecord("t", b"a"), ProducerRecord("t", b"b", headers=[("h", 1)])],
            TypeError,
            "send_many: record 1: header 'h' value must be bytes, str or None, not int",
        ),
        (
            [ProducerRecord("t", b"a"), ProducerRecord("t", b"b", timestamp=-1)],
            ValueError,
            "send_many: record 1: timestamp=-1 is not allowed",
        ),
    ],
    ids=["value", "topic", "header", "timestamp"],
)
async def test_send_many_with_a_bad_record_appends_none_of_them(
    records: list[ProducerRecord], error: type[Exception], message: str
) -> None:
    """Records were appended one by one, so the good ones before a bad one were sent
    while the call raised, and the `BulkDelivery` that would have reported them was
    lost: a retry of the call wrote them twice. Now every record is checked first,
    and the error names the bad one."""
    async with mock_cluster() as cluster:
        cluster.create_topic("t", 1)
        async with open_producer(cluster.bootstrap) as producer:
            with pytest.raises(error, match=re.escape(message)):
                await producer.send_many(records)
            with pytest.raises(TypeError, match=re.escape("send_many: record 2: value must")):
                await producer.send_many([b"a", b"b", "c"], topic="t")
            await producer.flush()
            await _healthy(producer)
        assert _values(cluster, "t") == []


async def test_a_serializer_that_raises_fails_its_record_only() -> None:
    def serialize(value: Any) -> bytes:
        if value == "bad":
            raise ValueError("cannot serialize 'bad'")
        return str(value).encode()

    async with (
        mock_cluster() as cluster,
        open_producer(cluster.bootstrap, value_serializer=serialize) as producer,
    ):
        with pytest.raises(ValueError, match="cannot serialize 'bad'"):
            await producer.send("t", "bad")
        await _healthy(producer)


async def test_a_serializer_returning_the_wrong_type_names_it() -> None:
    async with (
        mock_cluster() as cluster,
        open_producer(cluster.bootstrap, value_serializer=lambda v: v) as producer,
    ):
        with pytest.raises(TypeError, match="value must be bytes or None, not str"):
            await producer.send("t", "text")
        await _healthy(producer)


async def test_an_interceptor_returning_garbage_fails_its_record_only() -> None:
    class Broken:
        def on_send(self, record: ProducerRecord) -> Any:
            return None if record.topic == "t" else record

    async with (
        mock_cluster() as cluster,
        open_producer(cluster.bootstrap, interceptors=[Broken()]) as producer,
    ):
        with pytest.raises(TypeError, match="on_send must return a ProducerRecord, not NoneType"):
            await producer.send("t", b"v")
        await _healthy(producer)


async def test_an_interceptor_setting_a_bad_header_fails_its_record_only() -> None:
    class Tagger:
        def on_send(self, record: ProducerRecord) -> ProducerRecord:
            return ProducerRecord(record.topic, record.value, headers=[("n", 1)])  # type: ignore[list-item]

    async with (
        mock_cluster() as cluster,
        open_producer(cluster.bootstrap, interceptors=[Tagger()]) as producer,
    ):
        with pytest.raises(TypeError, match="header 'n' value must be bytes, str or None"):
            await producer.send("t", b"v")


@pytest.mark.parametrize(
    ("choice", "kind", "message"),
    [
        (RuntimeError("partitioner broke"), RuntimeError, "partitioner broke"),
        (1.0, TypeError, "the custom partitioner returned float"),
        ("0", TypeError, "the custom partitioner returned str"),
        (None, TypeError, "the custom partitioner returned NoneType"),
    ],
)
async def test_a_custom_partitioner_that_fails_fails_its_record_only(
    choice: Any, kind: type[Exception], message: str
) -> None:
    def partitioner(record: ProducerRecord, cluster: Any) -> Any:
        if record.topic != "t":
            return 0
        if isinstance(choice, Exception):
            raise choice
        return choice

    async with (
        mock_cluster() as cluster,
        open_producer(cluster.bootstrap, partitioner=partitioner) as producer,
    ):
        with pytest.raises(kind, match=message):
            await producer.send("t", b"v")
        await _healthy(producer)


async def test_a_batch_that_cannot_be_encoded_fails_alone() -> None:
    # The last line of defence: something send() let through (here a value smuggled in
    # after its check) fails its own batch in the sender, not the whole producer.
    async with mock_cluster() as cluster, open_producer(cluster.bootstrap) as producer:
        healthy = await producer.send("healthy", b"v")
        await producer.wait_for_topics(["t"])  # (appended at once: its batch is a real one)
        bad = await producer.send("t", b"v")
        bad.batch.values[bad.index] = 12345  # type: ignore[call-overload]
        await producer.flush()
        assert isinstance(await healthy, Acknowledged)
        with pytest.raises(Exception, match="could not be encoded"):
            await bad
        await _healthy(producer)
        await _healthy(producer, "t")


async def test_bytearray_and_memoryview_values_and_keys_are_copied_and_sent() -> None:
    buffer = bytearray(b"key")
    async with mock_cluster() as cluster, open_producer(cluster.bootstrap) as producer:
        first = await producer.send("t", bytearray(b"v1"), key=buffer)
        second = await producer.send("t", memoryview(b"v2"), key=memoryview(b"key"))
        buffer[:] = b"xxx"  # reusing the buffer after send() changes nothing sent
        await producer.flush()
        assert isinstance(await first, Acknowledged) and isinstance(await second, Acknowledged)
        partition = cluster.state.partition("t", 0)
        assert partition is not None
        data = b"".join(stored.data for stored in partition.log.batches)
        records = [(r.key, r.value) for b in decode_batches(data) for r in b.records]
    assert records == [(b"key", b"v1"), (b"key", b"v2")]


async def test_open_producer_refuses_a_metrics_interval_that_is_not_a_number() -> None:
    # It failed in a comparison when the producer started ("'>' not supported").
    from trio_kafka.errors import ConfigError

    with pytest.raises(ConfigError, match="metrics_interval='60' is not allowed"):
        async with open_producer("127.0.0.1:1", metrics_interval="60"):  # type: ignore[arg-type]
            pass


async def test_open_producer_refuses_a_harness_that_is_not_a_harness() -> None:
    # It failed inside the producer's task group, an ExceptionGroup naming nothing.
    from trio_kafka.errors import ConfigError

    with pytest.raises(
        ConfigError, match=r"harness=3 is not allowed: it must be a trio_kafka\.Harness"
    ):
        async with open_producer("127.0.0.1:1", harness=3):  # type: ignore[arg-type]
            pass


@pytest.mark.parametrize("codec", ["snappy", "lz4"])
async def test_snappy_or_lz4_without_cramjam_is_refused_at_open(
    codec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It opened, and then every batch failed to encode in the sender.
    import sys

    from trio_kafka.errors import ConfigError

    monkeypatch.setitem(sys.modules, "cramjam", None)
    with pytest.raises(ConfigError, match=f"compression='{codec}' needs the cramjam library"):
        async with open_producer("127.0.0.1:1", compression=codec):
            pass


async def test_a_record_without_a_key_for_a_compacted_topic_fails_alone() -> None:
    # The broker refuses a whole batch for the records it names (KIP-467); the others
    # in it failed with them ("One or more records have been rejected ...").
    topic = "compacted"
    keyless = {10, 777, 778, 1500}
    async with mock_cluster() as cluster:
        cluster.create_topic(topic, 1, {"cleanup.policy": "compact"})
        # Small batches, several in flight: the refused batch has batches behind it.
        async with open_producer(cluster.bootstrap, batch_size=2048, linger=0.005) as producer:
            handles = [
                await producer.send(topic, b"v%d" % i, key=None if i in keyless else b"k%d" % i)
                for i in range(2000)
            ]
            await producer.flush()
            metrics = producer.metrics()
        for i, handle in enumerate(handles):
            if i in keyless:
                with pytest.raises(
                    KafkaError, match="Compacted topic cannot accept message without key"
                ):
                    await handle
            else:
                assert isinstance(await handle, Acknowledged), i
        assert metrics.records_failed == len(keyless)
        assert _values(cluster, topic) == [b"v%d" % i for i in range(2000) if i not in keyless]


async def test_a_record_stamped_too_far_ahead_fails_alone_naming_the_setting() -> None:
    # Kafka 4 refuses a CreateTime record more than an hour ahead of its clock; its own
    # message does not say which setting decides that.
    import time

    ahead = int(time.time() * 1000) + 2 * 3_600_000
    async with mock_cluster() as cluster:
        cluster.create_topic("stamped", 1)
        async with open_producer(cluster.bootstrap, linger=0.01) as producer:
            handles = [
                await producer.send("stamped", b"v%d" % i, timestamp=ahead if i == 3 else None)
                for i in range(8)
            ]
            await producer.flush()
        with pytest.raises(KafkaError, match=r"out of range.*message\.timestamp\.after\.max\.ms"):
            await handles[3]
        others = [await h for i, h in enumerate(handles) if i != 3]
        assert all(isinstance(ack, Acknowledged) for ack in others)
        assert _values(cluster, "stamped") == [b"v%d" % i for i in range(8) if i != 3]
