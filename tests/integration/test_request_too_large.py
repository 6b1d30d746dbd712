"""A request larger than the broker takes: a broker closes the connection, without an
answer, at a request above its `socket.request.max.bytes` (104,857,600 bytes unless set
otherwise). A producer whose `max_request_size` is above that limit met it three times
in a row and stopped with "is it a SASL listener? ... set security_protocol=", a remedy
that cannot help. It now stops with `RequestTooLargeError` naming the request's size and
both remedies; a small request closed the same way still names the SASL listener.

On Apache Kafka 4.4 (a node of its own with a 2 MiB limit, so the test sends 3 MiB, not
100) and on the mock broker, which closes at the same limit (`Cluster.max_frame_size`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trio

from tests.integration._helpers import create_topic
from trio_kafka import AmbiguousError, RequestTooLargeError, open_producer
from trio_kafka.broker import open_cluster
from trio_kafka.testing import KafkaNode, kafka_broker

LIMIT = 2 * 1024 * 1024
#: One record larger than the broker's limit, well under the producer's own.
VALUE = b"v" * (3 * 1024 * 1024)
PRODUCER = {"max_request_size": 8 * 1024 * 1024, "batch_size": 8 * 1024 * 1024}


async def _send_too_large(bootstrap: str, topic: str) -> tuple[BaseException, BaseException]:
    """What the record's handle ends with, and what `send()` raises after it."""
    async with open_producer(bootstrap, **PRODUCER) as producer:
        await producer.send_and_wait(topic, b"small")  # a request the broker takes
        handle = await producer.send(topic, VALUE)
        with pytest.raises(AmbiguousError) as record_error:
            await handle
        with pytest.raises(RequestTooLargeError) as producer_error:
            await producer.send(topic, b"after")
    return record_error.value, producer_error.value


def _check(record_error: BaseException, producer_error: BaseException, address: str) -> None:
    assert isinstance(producer_error, RequestTooLargeError)
    message = str(producer_error)
    assert address in message, message
    assert "socket.request.max.bytes" in message and "max_request_size" in message, message
    assert "SASL" not in message and "security_protocol" not in message, message
    # The request: the record plus the batch's and request's headers.
    assert len(VALUE) < producer_error.request_size < len(VALUE) + 1024
    assert f"{producer_error.request_size:,} bytes" in message
    # The record's own outcome says why, and stays ambiguous: a closed connection
    # cannot prove the broker did not take the request.
    assert "socket.request.max.bytes" in str(record_error)


async def test_the_mock_broker_closing_at_its_limit_is_named() -> None:
    async with open_cluster(topics={"big": 1}) as cluster:
        cluster.max_frame_size = LIMIT
        with trio.fail_after(60):
            record_error, producer_error = await _send_too_large(cluster.bootstrap, "big")
        _check(record_error, producer_error, cluster.bootstrap)


@pytest.fixture(scope="module")
def kafka_small_requests() -> Iterator[KafkaNode]:
    with kafka_broker(server_properties={"socket.request.max.bytes": str(LIMIT)}) as node:
        yield node


@pytest.mark.kafka
async def test_kafka_closing_at_socket_request_max_bytes_is_named(
    kafka_small_requests: KafkaNode,
) -> None:
    bootstrap = kafka_small_requests.bootstrap
    await create_topic(bootstrap, "big", 1)
    with trio.fail_after(60):
        record_error, producer_error = await _send_too_large(bootstrap, "big")
    _check(record_error, producer_error, bootstrap)
