"""BrokerConnection against a scripted peer over trio's in-memory streams."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from trio_kafka.errors import (
    AmbiguousError,
    BrokerConnectionError,
    BrokerError,
    ConnectionLostError,
    ProtocolError,
    RequestTimeoutError,
    RetriableError,
)
from trio_kafka.net import BrokerConnection, ConnectionState
from trio_kafka.net._connection import open_connection
from trio_kafka.protocol import FrameSplitter, RequestHeader, decode_request, encode_response
from trio_kafka.protocol.messages.metadata import MetadataRequest, MetadataResponse
from trio_kafka.protocol.messages.produce import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)


class ScriptedPeer:
    """The broker side of a memory stream: reads requests, answers what the test says."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.splitter = FrameSplitter()
        self.frames: list[bytes] = []

    async def next_request(self) -> tuple[RequestHeader, Any]:
        while not self.frames:
            data = await self.stream.receive_some(65536)
            assert data, "the client closed the connection"
            self.frames.extend(self.splitter.feed(data))
        return decode_request(self.frames.pop(0))

    async def answer(
        self, header: RequestHeader, response: Any, *, correlation_id: int | None = None
    ) -> None:
        frame = encode_response(
            response,
            version=header.api_version,
            correlation_id=header.correlation_id if correlation_id is None else correlation_id,
        )
        await self.stream.send_all(frame)


def metadata(cluster_id: str) -> MetadataResponse:
    return MetadataResponse(cluster_id=cluster_id)


def pair() -> tuple[trio.abc.Stream, ScriptedPeer]:
    client, server = trio.testing.memory_stream_pair()
    return client, ScriptedPeer(server)


async def test_pipelined_requests_are_written_in_order_and_answered_in_order() -> None:
    client, peer = pair()
    async with open_connection(client, "broker", 9092, node_id=1) as conn:
        pendings = [await conn.send(MetadataRequest(topics=[]), version=12) for _ in range(3)]
        assert conn.in_flight == 3
        headers = [(await peer.next_request())[0] for _ in range(3)]
        assert [h.correlation_id for h in headers] == [0, 1, 2]
        for header in headers:
            await peer.answer(header, metadata(f"c{header.correlation_id}"))
        results = [await pending for pending in pendings]
        assert [r.cluster_id for r in results] == ["c0", "c1", "c2"]
        assert conn.in_flight == 0


async def test_a_response_with_the_wrong_correlation_id_fails_loudly_and_closes() -> None:
    client, peer = pair()
    async with open_connection(client, "broker", 9092) as conn:
        first = await conn.send(MetadataRequest(topics=[]), version=12)
        second = await conn.send(MetadataRequest(topics=[]), version=12)
        header, _ = await peer.next_request()
        await peer.answer(header, metadata("x"), correlation_id=1)  # skips 0
        for pending in (first, second):
            with pytest.raises(ConnectionLostError) as info:
                await pending
            assert isinstance(info.value.__cause__, ProtocolError)
            assert "does not match the oldest request in flight" in str(info.value.__cause__)
        assert conn.state is ConnectionState.CLOSED
        assert isinstance(conn.close_reason, ProtocolError)


async def test_a_request_timeout_is_ambiguous_and_closes_the_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    client, peer = pair()
    async with open_connection(client, "broker", 9092, request_timeout=5.0) as conn:
        start = trio.current_time()
        pending = await conn.send(MetadataRequest(topics=[]), version=12)
        await peer.next_request()  # read, never answered
        with pytest.raises(RequestTimeoutError) as info:
            await pending
        assert isinstance(info.value, AmbiguousError)
        assert not isinstance(info.value, RetriableError)
        assert "may have processed it" in str(info.value)
        assert trio.current_time() - start == pytest.approx(5.0)
        assert conn.state is ConnectionState.CLOSED


async def test_a_timeout_fails_the_other_requests_in_flight_as_lost(
    autojump_clock: trio.testing.MockClock,
) -> None:
    client, _peer = pair()
    async with open_connection(client, "broker", 9092) as conn:
        short = await conn.send(MetadataRequest(topics=[]), version=12, timeout=1.0)
        long = await conn.send(MetadataRequest(topics=[]), version=12, timeout=60.0)
        with pytest.raises(RequestTimeoutError):
            await short
        with pytest.raises(ConnectionLostError):
            await long
        assert trio.current_time() == pytest.approx(1.0)


async def test_a_dropped_connection_fails_every_request_in_flight_as_lost() -> None:
    client, peer = pair()
    async with open_connection(client, "broker", 9092) as conn:
        pendings = [await conn.send(MetadataRequest(topics=[]), version=12) for _ in range(3)]
        await peer.stream.aclose()
        for pending in pendings:
            with pytest.raises(ConnectionLostError) as info:
                await pending
            assert isinstance(info.value, AmbiguousError)
        assert conn.state is ConnectionState.CLOSED
        assert "closed the connection" in str(conn.close_reason)


async def test_requests_never_written_fail_as_retriable_when_the_connection_drops() -> None:
    client, peer = pair()
    async with open_connection(client, "broker", 9092, max_in_flight=1) as conn:
        written = await conn.send(MetadataRequest(topics=[]), version=12)
        outcome: list[BaseException] = []

        async def queued_sender() -> None:
            try:
                await conn.send(MetadataRequest(topics=[]), version=12)
            except BaseException as exc:
                outcome.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(queued_sender)
            await trio.testing.wait_all_tasks_blocked()
            assert conn.queued == 1
            assert "in-flight 1/1, queued 1" in repr(conn)
            await peer.stream.aclose()
        with pytest.raises(ConnectionLostError):
            await written
        [error] = outcome
        assert isinstance(error, BrokerConnectionError)
        assert isinstance(error, RetriableError)
        assert not isinstance(error, AmbiguousError)


async def test_the_in_flight_limit_makes_senders_wait_in_fifo_order() -> None:
    client, peer = pair()
    async with open_connection(client, "broker", 9092, max_in_flight=2) as conn:
        order: list[int] = []

        async def sender(tag: int) -> None:
            pending = await conn.send(MetadataRequest(topics=[]), version=12)
            order.append(tag)
            await pending

        async with trio.open_nursery() as nursery:
            for tag in range(5):
                nursery.start_soon(sender, tag)
                await trio.testing.wait_all_tasks_blocked()
            assert conn.in_flight == 2
            assert conn.queued == 3
            for _ in range(5):
                header, _ = await peer.next_request()
                await peer.answer(header, metadata("c"))
        assert order == [0, 1, 2, 3, 4]


async def test_an_acks_zero_produce_completes_when_written_and_expects_no_response() -> None:
    client, peer = pair()
    async with open_connection(client, "broker", 9092) as conn:
        pending = await conn.send(ProduceRequest(acks=0, timeout_ms=1000), version=9)
        assert pending.done()
        assert pending.result() is None
        assert conn.in_flight == 0
        answered = await conn.send(MetadataRequest(topics=[]), version=12)
        produce_header, _ = await peer.next_request()
        header, _ = await peer.next_request()
        assert (produce_header.correlation_id, header.correlation_id) == (0, 1)
        await peer.answer(header, metadata("after"))
        assert (await answered).cluster_id == "after"


async def test_a_cancelled_waiter_does_not_disturb_the_requests_after_it() -> None:
    client, peer = pair()
    async with open_connection(client, "broker", 9092) as conn:
        with trio.move_on_after(0.01):
            await conn.request(MetadataRequest(topics=[]), version=12)
        later = await conn.send(MetadataRequest(topics=[]), version=12)
        for name in ("abandoned", "later"):
            header, _ = await peer.next_request()
            await peer.answer(header, metadata(name))
        assert (await later).cluster_id == "later"
        assert conn.is_open


async def test_sending_on_a_closed_connection_is_retriable() -> None:
    client, _peer = pair()
    async with open_connection(client, "broker", 9092) as conn:
        await conn.aclose()
        with pytest.raises(BrokerConnectionError, match="not sent"):
            await conn.send(MetadataRequest(topics=[]), version=12)


async def test_repr_tells_the_state() -> None:
    client, _peer = pair()
    async with open_connection(client, "broker", 9092, node_id=3) as conn:
        assert (
            repr(conn) == "<BrokerConnection [node 3 broker:9092, OPEN, in-flight 0/5, queued 0]>"
        )
        pending = await conn.send(MetadataRequest(topics=[]), version=12)
        assert "in-flight 1/5" in repr(conn)
        assert (
            repr(pending) == "<PendingResponse [MetadataRequest v12, correlation id 0, IN-FLIGHT]>"
        )
        await conn.aclose()
        assert "CLOSED, in-flight 0/5" in repr(conn)
        assert "FAILED ConnectionLostError" in repr(pending)


def test_an_in_flight_limit_below_one_is_refused() -> None:
    client, _ = trio.testing.memory_stream_pair()
    with pytest.raises(ValueError, match="max_in_flight"):
        BrokerConnection(client, "broker", 9092, max_in_flight=0)


async def test_an_api_the_broker_does_not_support_is_refused_before_sending() -> None:
    client, _peer = pair()
    async with open_connection(client, "broker", 9092) as conn:
        conn.api_versions = {18: 3}  # negotiated: only ApiVersions
        with pytest.raises(BrokerError, match="supports no version of MetadataRequest"):
            await conn.send(MetadataRequest(topics=[]))
        assert conn.in_flight == 0 and conn.is_open


async def test_a_request_with_large_record_batches_arrives_whole_and_in_order() -> None:
    batches = [bytes([i + 1]) * (100_000 + i) for i in range(3)]
    request = ProduceRequest(
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            TopicProduceData(
                name="t",
                partition_data=[
                    PartitionProduceData(index=i, records=batch) for i, batch in enumerate(batches)
                ]
                + [PartitionProduceData(index=9, records=b"tiny")],
            )
        ],
    )
    client, peer = pair()
    received: list[tuple[RequestHeader, Any]] = []

    async def read_two() -> None:
        for _ in range(2):
            received.append(await peer.next_request())

    async with open_connection(client, "broker", 9092) as conn, trio.open_nursery() as nursery:
        nursery.start_soon(read_two)  # the writes block until the peer reads them
        await conn.send(request)
        await conn.send(MetadataRequest(topics=[]))
    [(first_header, first), (second_header, second)] = received
    assert (first_header.correlation_id, first) == (0, request)
    assert second_header.correlation_id == 1
    assert isinstance(second, MetadataRequest)
