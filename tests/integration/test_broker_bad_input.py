"""Bad input: each gets the right error or a closed connection, and nothing else suffers."""

from __future__ import annotations

import struct
from typing import Any

import pytest
import trio

from tests.integration._helpers import open_cluster_for_clients, tcp_client
from trio_kafka.broker import Cluster
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol import FrameSplitter, decode_response, encode_request
from trio_kafka.protocol.messages.metadata import MetadataRequest
from trio_kafka.protocol.messages.produce import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from trio_kafka.records import BatchBuilder


async def connect(cluster: Cluster) -> trio.SocketStream:
    return await tcp_client(cluster)


async def closed_by_broker(stream: trio.SocketStream) -> bool:
    with trio.fail_after(5):
        while True:
            try:
                data = await stream.receive_some(65536)
            except trio.BrokenResourceError:
                return True
            if not data:
                return True


async def request(
    stream: trio.SocketStream, message: Any, version: int, correlation: int = 1
) -> Any:
    await stream.send_all(
        encode_request(message, version=version, correlation_id=correlation, client_id="t")
    )
    splitter = FrameSplitter()
    with trio.fail_after(5):
        while True:
            data = await stream.receive_some(65536)
            assert data, "broker closed the connection"
            frames = splitter.feed(data)
            if frames:
                return decode_response(type(message), version, frames[0])[1]


def batch(n: int = 3) -> bytes:
    builder = BatchBuilder()
    for i in range(n):
        builder.append(1_700_000_000_000, None, b"v%d" % i)
    return builder.build()


def produce(topic: str, records: dict[int, bytes]) -> ProduceRequest:
    return ProduceRequest(
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            TopicProduceData(
                name=topic,
                partition_data=[
                    PartitionProduceData(index=i, records=r) for i, r in records.items()
                ],
            )
        ],
    )


async def still_serving(cluster: Cluster) -> None:
    """Another client gets its answers and every record written so far is there."""
    stream = await connect(cluster)
    resp = await request(stream, produce("good", {0: batch(1)}), 9)
    assert resp.responses[0].partition_responses[0].error_code == 0
    meta = await request(stream, MetadataRequest(topics=None), 12)
    assert any(t.name == "good" for t in meta.topics)


@pytest.mark.parametrize(
    "garbage",
    [
        b"\xff\xff\xff\xff",  # negative size
        b"\x7f\xff\xff\xff",  # 2 GiB, over the frame limit
        struct.pack(">i", 2) + b"\x00\x01",  # shorter than a request header
        struct.pack(">i", 8) + b"\x00\x00\x00\x09\x00\x00\x00\x01",  # Produce v9 header cut short
        struct.pack(">i", 20) + bytes(range(20)),  # random bytes
    ],
    ids=["negative-size", "huge-size", "tiny-frame", "truncated-header", "random"],
)
async def test_garbage_closes_the_connection_and_the_broker_goes_on(garbage: bytes) -> None:
    async with open_cluster_for_clients(topics={"good": 1}) as cluster:
        await still_serving(cluster)
        bad = await connect(cluster)
        await bad.send_all(garbage)
        assert await closed_by_broker(bad)
        await still_serving(cluster)
        assert cluster.state.partition("good", 0).log.log_end_offset == 2  # type: ignore[union-attr]


async def test_frame_that_lies_about_its_size_waits_then_closes_on_eof() -> None:
    async with open_cluster_for_clients(topics={"good": 1}) as cluster:
        bad = await connect(cluster)
        await bad.send_all(struct.pack(">i", 1000) + b"\x00" * 10)  # promises 1000 bytes, sends 10
        await still_serving(cluster)  # the liar does not block anyone
        await bad.send_eof()
        assert await closed_by_broker(bad)


@pytest.mark.parametrize(("api_key", "version"), [(999, 0), (0, 99), (3, 42)])
async def test_unknown_api_key_or_version_closes_the_connection(api_key: int, version: int) -> None:
    async with open_cluster_for_clients(topics={"good": 1}) as cluster:
        bad = await connect(cluster)
        body = struct.pack(">hhih", api_key, version, 5, 1) + b"t"
        await bad.send_all(struct.pack(">i", len(body)) + body)
        assert await closed_by_broker(bad)
        await still_serving(cluster)


async def test_bad_crc_is_corrupt_message_and_loses_nothing_else() -> None:
    async with open_cluster_for_clients(topics={"t": 2, "good": 1}) as cluster:
        stream = await connect(cluster)
        corrupt = bytearray(batch(3))
        corrupt[-2] ^= 0x55
        resp = await request(stream, produce("t", {0: bytes(corrupt), 1: batch(3)}), 9)
        by_index = {p.index: p for p in resp.responses[0].partition_responses}
        assert by_index[0].error_code == ErrorCode.CORRUPT_MESSAGE
        assert "CRC" in by_index[0].error_message
        assert by_index[1].error_code == ErrorCode.NONE
        assert cluster.state.partition("t", 0).log.log_end_offset == 0  # type: ignore[union-attr]
        assert cluster.state.partition("t", 1).log.log_end_offset == 3  # type: ignore[union-attr]
        # The same connection keeps working.
        again = await request(stream, produce("t", {0: batch(1)}), 9, correlation=2)
        assert again.responses[0].partition_responses[0].error_code == 0


async def test_truncated_batch_and_bad_length_are_refused_as_kafka_refuses_them() -> None:
    # A batch cut short or claiming more bytes than sent frames no whole batch
    # (INVALID_RECORD); a length below a record's overhead is CORRUPT_MESSAGE (Kafka's
    # batch iterator; conformance scenario `produce_edges`).
    async with open_cluster_for_clients(topics={"t": 1}) as cluster:
        stream = await connect(cluster)
        good = batch(3)
        lying = good[:8] + struct.pack(">i", len(good) + 100) + good[12:]
        cases = [
            (good[:-5], ErrorCode.INVALID_RECORD),
            (lying, ErrorCode.INVALID_RECORD),
            (b"\x00" * 70, ErrorCode.CORRUPT_MESSAGE),
        ]
        for n, (data, error) in enumerate(cases, start=1):
            resp = await request(stream, produce("t", {0: data}), 9, correlation=n)
            assert resp.responses[0].partition_responses[0].error_code == error
        assert cluster.state.partition("t", 0).log.log_end_offset == 0  # type: ignore[union-attr]


async def test_invalid_acks_and_unknown_partition() -> None:
    async with open_cluster_for_clients(topics={"t": 1}) as cluster:
        stream = await connect(cluster)
        req = produce("t", {0: batch(1), 7: batch(1)})
        resp = await request(stream, req, 9)
        codes = {p.index: p.error_code for p in resp.responses[0].partition_responses}
        assert codes == {0: 0, 7: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        bad_acks = ProduceRequest(acks=2, timeout_ms=1000, topic_data=req.topic_data)
        resp = await request(stream, bad_acks, 9, correlation=2)
        assert {p.error_code for p in resp.responses[0].partition_responses} == {
            ErrorCode.INVALID_REQUIRED_ACKS
        }
