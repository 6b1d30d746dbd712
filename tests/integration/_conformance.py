"""Scripted request sequences played against a broker, answers kept for comparison.

The conformance test (test_conformance.py) plays each scenario here against our mock
broker and against an Apache Kafka node, over TCP with our codec, and compares the two
transcripts field by field. A transcript is a list of (step, answer) where the answer is
the response as plain data with what legitimately differs between two brokers taken out
or replaced by a stable stand-in: producer ids (each broker hands out its own), node ids,
hosts and ports, topic ids, timestamps, throttle times, error messages (free text), leader
epochs and the raw record bytes (the records fetched are compared decoded instead).
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from trio_kafka.errors import ErrorCode
from trio_kafka.protocol import FrameSplitter, decode_response, encode_request
from trio_kafka.protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from trio_kafka.protocol.messages.create_topics import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from trio_kafka.protocol.messages.end_txn import EndTxnRequest
from trio_kafka.protocol.messages.fetch import FetchPartition, FetchRequest, FetchTopic
from trio_kafka.protocol.messages.init_producer_id import InitProducerIdRequest
from trio_kafka.protocol.messages.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from trio_kafka.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic
from trio_kafka.protocol.messages.produce import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from trio_kafka.records import BatchBuilder, decode_batches

NOW = 1_700_000_000_000

# The versions played: ones both brokers serve (Kafka 4 dropped the oldest).
PRODUCE_V = 11
FETCH_V = 12
LIST_OFFSETS_V = 7
INIT_PID_V = 4
ADD_PARTITIONS_V = 3
END_TXN_V = 3
METADATA_V = 12
CREATE_TOPICS_V = 7

# Fields whose values each broker picks for itself (see the module doc).
_DROPPED = {
    "throttle_time_ms",
    "error_message",
    "batch_index_error_message",
    "log_append_time_ms",
    "topic_id",
    "leader_epoch",
    "current_leader",
    "node_endpoints",
    "cluster_id",
    "controller_id",
    "brokers",
    "leader_id",
    "replica_nodes",
    "isr_nodes",
    "offline_replicas",
    "topic_authorized_operations",
    "cluster_authorized_operations",
    "preferred_read_replica",
    "diverging_epoch",
    "snapshot_id",
    "session_id",
    "configs",
    "topic_config_error_code",
    "unknown_tagged_fields",
    "timestamp",
}


def plain(value: Any, pids: dict[int, str]) -> Any:
    """A response as plain data with broker-chosen values taken out (module doc)."""
    if attrs.has(type(value)):
        out: dict[str, Any] = {}
        for a in attrs.fields(type(value)):
            if a.name in _DROPPED or a.name.startswith("_"):
                continue
            v = getattr(value, a.name)
            if a.name == "producer_id" and isinstance(v, int) and v >= 0:
                v = pids.setdefault(v, f"pid{len(pids)}")
            elif a.name == "records" and isinstance(v, (bytes, bytearray, memoryview)):
                v = [
                    (r.offset, r.value, b.is_control, b.is_transactional)
                    for b in decode_batches(bytes(v))
                    for r in b.records
                ]
            elif a.name == "error_code" and isinstance(v, int):
                v = _code_name(v)
            out[a.name] = plain(v, pids)
        return out
    if isinstance(value, list):
        return [plain(v, pids) for v in value]
    return value


def _code_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class Peer:
    """One broker reached over TCP with our codec; keeps the scenario's transcript."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.stream: trio.SocketStream | None = None
        self.splitter = FrameSplitter()
        self.frames: list[bytes] = []
        self.correlation = 0
        self.transcript: list[tuple[str, Any]] = []
        self.pids: dict[int, str] = {}

    async def request(self, message: Any, version: int) -> Any:
        if self.stream is None:
            self.stream = await trio.open_tcp_stream(self.host, self.port)
        self.correlation += 1
        await self.stream.send_all(
            encode_request(message, version=version, correlation_id=self.correlation, client_id="c")
        )
        while not self.frames:
            data = await self.stream.receive_some(1 << 20)
            if not data:
                raise ConnectionError(f"{self.host}:{self.port} closed the connection")
            self.frames.extend(self.splitter.feed(data))
        correlation, body = decode_response(type(message), version, self.frames.pop(0))
        assert correlation == self.correlation
        return body

    async def step(self, name: str, message: Any, version: int) -> Any:
        """Send, record the answer (normalized) under `name`, return it raw."""
        body = await self.request(message, version)
        self.transcript.append((name, plain(body, self.pids)))
        return body

    async def aclose(self) -> None:
        if self.stream is not None:
            await self.stream.aclose()
            self.stream = None


Scenario = Callable[[Peer, str], Awaitable[None]]


def batch(
    values: list[bytes],
    *,
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
    txn: bool = False,
) -> bytes:
    builder = BatchBuilder()
    for v in values:
        builder.append(NOW, None, v)
    return builder.build(
        base_offset=0,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
    )


def produce(
    topic: str, records: bytes, *, txn_id: str | None = None, partition: int = 0
) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=txn_id,
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            TopicProduceData(
                name=topic, partition_data=[PartitionProduceData(index=partition, records=records)]
            )
        ],
    )


def part(response: Any) -> Any:
    """The one partition answer of a one-partition Produce."""
    return response.responses[0].partition_responses[0]


def fetch(topic: str, offset: int, *, isolation: int) -> FetchRequest:
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=isolation,
        topics=[
            FetchTopic(
                topic=topic,
                partitions=[
                    FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)
                ],
            )
        ],
    )


def list_offsets(topic: str, timestamp: int, *, isolation: int) -> ListOffsetsRequest:
    return ListOffsetsRequest(
        replica_id=-1,
        isolation_level=isolation,
        topics=[
            ListOffsetsTopic(
                name=topic,
                partitions=[ListOffsetsPartition(partition_index=0, timestamp=timestamp)],
            )
        ],
    )


def init_pid(
    txn_id: str | None, *, timeout_ms: int = 60_000, pid: int = -1, epoch: int = -1
) -> InitProducerIdRequest:
    return InitProducerIdRequest(
        transactional_id=txn_id,
        transaction_timeout_ms=timeout_ms,
        producer_id=pid,
        producer_epoch=epoch,
    )


def add_partitions(txn_id: str, pid: int, epoch: int, topic: str) -> AddPartitionsToTxnRequest:
    return AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=txn_id,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[AddPartitionsToTxnTopic(name=topic, partitions=[0])],
    )


def end_txn(txn_id: str, pid: int, epoch: int, *, commit: bool) -> EndTxnRequest:
    return EndTxnRequest(
        transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=commit
    )


def create_request(
    *topics: tuple[str, int, int],
    configs: dict[str, str] | None = None,
    validate_only: bool = False,
    timeout_ms: int = 30_000,
) -> CreateTopicsRequest:
    """CreateTopics for (name, partitions, replication factor) each, with `configs`."""
    return CreateTopicsRequest(
        topics=[
            CreatableTopic(
                name=name,
                num_partitions=partitions,
                replication_factor=replication,
                assignments=[],
                configs=[CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()],
            )
            for name, partitions, replication in topics
        ],
        timeout_ms=timeout_ms,
        validate_only=validate_only,
    )


def metadata_request(*names: str, auto_create: bool = False) -> MetadataRequest:
    return MetadataRequest(
        topics=[MetadataRequestTopic(name=name) for name in names],
        allow_auto_topic_creation=auto_create,
    )


async def create_topic(peer: Peer, topic: str, **configs: str) -> None:
    """Create a one-partition topic and wait until Metadata names its leader."""
    answer = await peer.request(create_request((topic, 1, 1), configs=configs), CREATE_TOPICS_V)
    assert answer.topics[0].error_code == 0, answer
    with trio.fail_after(30):
        while True:
            md = await peer.request(metadata_request(topic), METADATA_V)
            t = md.topics[0]
            if t.error_code == 0 and t.partitions and t.partitions[0].leader_id >= 0:
                return
            await trio.sleep(0.05)


def unpack_i64(data: bytes) -> int:
    return int(struct.unpack(">q", data)[0])
