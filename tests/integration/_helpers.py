"""Helpers the integration tests share: topic creation over our wire client, raw TCP
clients of the mock broker closed with it, and confluent-kafka readers (imported when
called, so a module that needs only `create_topic` does not need confluent-kafka)."""

from __future__ import annotations

import contextlib
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import trio

from trio_kafka.broker import Cluster, open_cluster
from trio_kafka.errors import ErrorCode
from trio_kafka.net import open_selector
from trio_kafka.protocol.messages.create_topics import CreatableTopic, CreateTopicsRequest
from trio_kafka.protocol.messages.delete_topics import DeleteTopicsRequest

#: Raw client streams `tcp_client` opened, closed when their `open_cluster_for_clients`
#: block ends. (An autouse async fixture would not do: pytest-trio runs only the async
#: fixtures a test names, so such a fixture never ran and each stream stayed open until
#: the interpreter exited: "ResourceWarning: unclosed <socket.socket ...>".)
_CLIENTS: list[trio.abc.Stream] = []


@contextlib.asynccontextmanager
async def open_cluster_for_clients(*args: Any, **kwargs: Any) -> AsyncIterator[Cluster]:
    """`open_cluster(*args, **kwargs)`; on the way out, every `tcp_client` is closed."""
    async with open_cluster(*args, **kwargs) as cluster:
        try:
            yield cluster
        finally:
            while _CLIENTS:
                await _CLIENTS.pop().aclose()


async def tcp_client(cluster: Cluster, node: int = 0) -> trio.SocketStream:
    """A raw TCP connection to `node`, closed with its `open_cluster_for_clients` block."""
    host, port = cluster.state.endpoints[node]
    stream = await trio.open_tcp_stream(host, port)
    _CLIENTS.append(stream)
    return stream


#: Producer options for tests that wait out retries on the real clock: short backoffs.
FAST: dict[str, Any] = {"retry_backoff": 0.01, "retry_backoff_max": 0.05, "reconnect_backoff": 0.01}


def rows(count: int) -> list[bytes]:
    """`count` distinct rows in load order: b"row-000000", b"row-000001", ..."""
    return [b"row-%06d" % i for i in range(count)]


#: librdkafka options that keep its log lines out of the test output.
QUIET = {"log_level": 0, "logger": lambda *a: None}


async def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    async with open_selector(bootstrap) as selector:
        response = await selector.request(
            selector.least_loaded_node(),
            CreateTopicsRequest(
                topics=[CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)],
                timeout_ms=5000,
            ),
        )
        assert response.topics[0].error_code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS)


async def delete_topic(bootstrap: str, name: str) -> None:
    """DeleteTopics by name (v5: v6 names topics by id as well)."""
    async with open_selector(bootstrap) as selector:
        response = await selector.request(
            selector.least_loaded_node(),
            DeleteTopicsRequest(topic_names=[name], timeout_ms=30_000),
            version=5,
        )
        assert response.responses[0].error_code == ErrorCode.NONE, response


def read_partitions(bootstrap: str, topic: str, partitions: int) -> list[tuple[int, int, bytes]]:
    """Every record of partitions 0..partitions-1 as (partition, offset, value), from the
    beginning to the end offsets the broker reports when called (confluent-kafka)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "trio-kafka-readback",  # librdkafka wants one even without a group
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got: list[tuple[int, int, bytes]] = []
        position = dict.fromkeys(range(partitions), 0)
        idle = 0
        while any(position[p] < ends[p] for p in range(partitions)) and idle < 30:
            messages = consumer.consume(num_messages=10_000, timeout=1.0)
            idle = 0 if messages else idle + 1
            for message in messages:
                assert message.error() is None, message.error()
                got.append((message.partition(), message.offset(), message.value()))
                position[message.partition()] = message.offset() + 1
        return got
    finally:
        consumer.close()


def read_offsets(
    bootstrap: str,
    topic: str,
    partitions: int,
    isolation: str,
    *,
    timeout: float = 20.0,
    at_least: int = 0,
    require_end: bool = True,
) -> dict[int, list[tuple[int, bytes]]]:
    """Every (offset, value) confluent-kafka returns per partition, from the start to
    each partition's end (and at least `at_least` values in all, for records still
    arriving), within `timeout` s; with `require_end`, fail unless every partition's
    end was reached."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            **QUIET,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    count = 0
    eof: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while (len(eof) < partitions or count < at_least) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(msg.partition())
                    continue
                raise AssertionError(f"confluent-kafka read of {topic}: {msg.error()}")
            eof.discard(msg.partition())
            out[msg.partition()].append((msg.offset(), msg.value()))
            count += 1
    finally:
        consumer.close()
    if require_end:
        assert len(eof) == partitions, f"confluent-kafka never reached the end of {topic}"
    return out


def consume_all(
    bootstrap: str,
    topic: str,
    partitions: int,
    isolation: str,
    require_end: bool = True,
    at_least: int = 0,
) -> list[bytes]:
    """`read_offsets`' values, partition after partition."""
    read = read_offsets(
        bootstrap, topic, partitions, isolation, at_least=at_least, require_end=require_end
    )
    return [value for p in range(partitions) for _, value in read[p]]


def tansu_per_backend() -> Any:
    """A module's `tansu` fixture when the module runs on both backends
    (`pytest.mark.anyio`): a fresh Tansu per backend, so each backend's run starts from
    an empty broker (topic names repeat), as it did on trio alone. In the module:
    `tansu = tansu_per_backend()`."""
    import pytest

    from trio_kafka.testing import tansu_broker

    @pytest.fixture(scope="module")
    def tansu(anyio_backend: str) -> Any:
        with tansu_broker() as broker:
            yield broker

    return tansu


def interrupt_and_collect(process: subprocess.Popen[str], signum: int, timeout: float) -> Any:
    """Send `signum` to `process`, then its (stdout, stderr) once it has ended; killed if
    it is still running after `timeout` (the `TimeoutExpired` goes on), so a hang fails
    its own test and leaves no process behind."""
    process.send_signal(signum)
    try:
        return process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
