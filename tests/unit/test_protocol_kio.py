"""Byte-for-byte cross-check against `kio`, an independent Python encoding of the protocol.

For Produce, Metadata, InitProducerId, AddPartitionsToTxn, EndTxn and ApiVersions at the
highest version both sides support (requests and responses): kio reads our bytes into its
own typed message, which must hold the same values as ours, and kio writes it back to
exactly our bytes; we decode kio's bytes into a message equal to the original. Two
messages are also built by hand on both sides and encoded independently.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import importlib
import io
import uuid
from typing import Any

import pytest
from kio.serial import entity_reader, entity_writer

from trio_kafka.protocol._codec import Message, Struct, field_specs
from trio_kafka.protocol.messages import add_partitions_to_txn as apt
from trio_kafka.protocol.messages import api_versions as av
from trio_kafka.protocol.messages import end_txn as et
from trio_kafka.protocol.messages import init_producer_id as ipi
from trio_kafka.protocol.messages import metadata as md
from trio_kafka.protocol.messages import produce as pr

TOPIC_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def kio_class(package: str, version: int, kind: str, name: str) -> Any:
    module = importlib.import_module(f"kio.schema.{package}.v{version}.{kind}")
    return getattr(module, name)


def plain_kio(value: Any, kafka_type: str | None = None) -> Any:
    """kio's typed values as plain Python values, in field order."""
    if value is None:
        return {"uuid": uuid.UUID(int=0), "datetime_i64": -1}.get(kafka_type or "")
    if dataclasses.is_dataclass(value):
        return [
            plain_kio(getattr(value, f.name), f.metadata.get("kafka_type"))
            for f in dataclasses.fields(value)
        ]
    if isinstance(value, tuple):
        return [plain_kio(item, kafka_type) for item in value]
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    if isinstance(value, datetime.datetime):
        return (value - EPOCH) // datetime.timedelta(milliseconds=1)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes):
        return bytes(value)
    return value


def plain_ours(value: Any, version: int) -> Any:
    """Our message as plain values: the fields present at `version`, in order."""
    if isinstance(value, Struct):
        return [
            plain_ours(getattr(value, name), version)
            for name, spec in field_specs(type(value))
            if version in spec.versions
        ]
    if isinstance(value, list):
        return [plain_ours(item, version) for item in value]
    return value


PRODUCE_REQUEST = pr.ProduceRequest(
    transactional_id="txn-1",
    acks=-1,
    timeout_ms=30_000,
    topic_data=[
        pr.TopicProduceData(
            name="orders",
            partition_data=[
                pr.PartitionProduceData(index=0, records=b"\x00" * 61 + b"batch-0"),
                pr.PartitionProduceData(index=3, records=None),
            ],
        ),
        pr.TopicProduceData(name="audit", partition_data=[]),
    ],
)
PRODUCE_RESPONSE = pr.ProduceResponse(
    responses=[
        pr.TopicProduceResponse(
            name="orders",
            partition_responses=[
                pr.PartitionProduceResponse(
                    index=0, base_offset=42, log_append_time_ms=1_700_000_000_000
                ),
                pr.PartitionProduceResponse(
                    index=3,
                    error_code=6,
                    base_offset=-1,
                    record_errors=[
                        pr.BatchIndexAndErrorMessage(batch_index=2, batch_index_error_message="bad")
                    ],
                    error_message="not the leader",
                    current_leader=pr.LeaderIdAndEpoch(leader_id=2, leader_epoch=9),
                ),
            ],
        )
    ],
    throttle_time_ms=15,
    node_endpoints=[pr.NodeEndpoint(node_id=2, host="b2.example", port=9093, rack="r1")],
)
METADATA_REQUEST = md.MetadataRequest(
    topics=[
        md.MetadataRequestTopic(topic_id=TOPIC_ID, name=None),
        md.MetadataRequestTopic(name="orders"),
    ],
    allow_auto_topic_creation=False,
    include_topic_authorized_operations=True,
)
METADATA_RESPONSE = md.MetadataResponse(
    throttle_time_ms=0,
    brokers=[
        md.MetadataResponseBroker(node_id=1, host="b1", port=9092, rack=None),
        md.MetadataResponseBroker(node_id=2, host="b2", port=9092, rack="r2"),
    ],
    cluster_id="cluster-x",
    controller_id=1,
    topics=[
        md.MetadataResponseTopic(
            name="orders",
            topic_id=TOPIC_ID,
            partitions=[
                md.MetadataResponsePartition(
                    partition_index=p,
                    leader_id=1 + p % 2,
                    leader_epoch=4,
                    replica_nodes=[1, 2],
                    isr_nodes=[1, 2],
                    offline_replicas=[],
                )
                for p in range(3)
            ],
            topic_authorized_operations=0x0F,
        ),
        md.MetadataResponseTopic(error_code=3, name="missing", is_internal=False),
    ],
)
API_VERSIONS_RESPONSE = av.ApiVersionsResponse(
    api_keys=[
        av.ApiVersion(api_key=0, min_version=3, max_version=11),
        av.ApiVersion(api_key=18, max_version=4),
    ],
    throttle_time_ms=0,
    supported_features=[
        av.SupportedFeatureKey(name="expected.offset.cas", min_version=1, max_version=1)
    ],
    finalized_features_epoch=3,
    finalized_features=[
        av.FinalizedFeatureKey(name="metadata.version", max_version_level=20, min_version_level=20)
    ],
)

# (our message, version, kio package, "request" or "response")
CASES: list[tuple[Message, int, str, str]] = [
    (PRODUCE_REQUEST, 11, "produce", "request"),
    (PRODUCE_RESPONSE, 11, "produce", "response"),
    (METADATA_REQUEST, 12, "metadata", "request"),
    (METADATA_RESPONSE, 12, "metadata", "response"),
    (
        ipi.InitProducerIdRequest(
            transactional_id="txn-1", transaction_timeout_ms=60_000, producer_id=7, producer_epoch=2
        ),
        5,
        "init_producer_id",
        "request",
    ),
    (
        ipi.InitProducerIdResponse(
            throttle_time_ms=1, error_code=0, producer_id=1234, producer_epoch=5
        ),
        5,
        "init_producer_id",
        "response",
    ),
    (
        apt.AddPartitionsToTxnRequest(
            transactions=[
                apt.AddPartitionsToTxnTransaction(
                    transactional_id="txn-1",
                    producer_id=1234,
                    producer_epoch=5,
                    verify_only=True,
                    topics=[apt.AddPartitionsToTxnTopic(name="orders", partitions=[0, 1, 2])],
                )
            ]
        ),
        5,
        "add_partitions_to_txn",
        "request",
    ),
    (
        apt.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id="txn-1",
            v3_and_below_producer_id=1234,
            v3_and_below_producer_epoch=5,
            v3_and_below_topics=[apt.AddPartitionsToTxnTopic(name="orders", partitions=[0, 2])],
        ),
        3,
        "add_partitions_to_txn",
        "request",
    ),
    (
        apt.AddPartitionsToTxnResponse(
            throttle_time_ms=0,
            error_code=0,
            results_by_transaction=[
                apt.AddPartitionsToTxnResult(
                    transactional_id="txn-1",
                    topic_results=[
                        apt.AddPartitionsToTxnTopicResult(
                            name="orders",
                            results_by_partition=[
                                apt.AddPartitionsToTxnPartitionResult(
                                    partition_index=0, partition_error_code=51
                                )
                            ],
                        )
                    ],
                )
            ],
        ),
        5,
        "add_partitions_to_txn",
        "response",
    ),
    (
        et.EndTxnRequest(
            transactional_id="txn-1", producer_id=1234, producer_epoch=5, committed=True
        ),
        5,
        "end_txn",
        "request",
    ),
    (
        et.EndTxnResponse(throttle_time_ms=0, error_code=0, producer_id=1234, producer_epoch=6),
        5,
        "end_txn",
        "response",
    ),
    (
        av.ApiVersionsRequest(client_software_name="trio-kafka", client_software_version="0.1.0"),
        4,
        "api_versions",
        "request",
    ),
    (API_VERSIONS_RESPONSE, 4, "api_versions", "response"),
]


@pytest.mark.parametrize(
    ("message", "version", "package", "kind"),
    CASES,
    ids=[f"{type(m).__name__}-v{v}" for m, v, _, _ in CASES],
)
def test_kio_reads_our_bytes_as_the_same_message_and_writes_them_back(
    message: Message, version: int, package: str, kind: str
) -> None:
    ours = message.encode(version)
    cls = kio_class(package, version, kind, type(message).__name__)
    theirs_message, end = entity_reader(cls)(ours, 0)
    assert end == len(ours)
    assert plain_kio(theirs_message) == plain_ours(message, version)
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, theirs_message)
    theirs = buffer.getvalue()
    assert theirs == ours
    assert type(message).decode(theirs, version) == message


def test_a_produce_request_built_by_kio_encodes_to_our_bytes() -> None:
    from kio.schema.produce.v11 import request as k
    from kio.static.primitive import i16, i32, i32Timedelta

    theirs = k.ProduceRequest(
        transactional_id=None,
        acks=i16(1),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
        topic_data=(
            k.TopicProduceData(
                name="t",
                partition_data=(k.PartitionProduceData(index=i32(2), records=b"abc"),),
            ),
        ),
    )
    buffer = io.BytesIO()
    entity_writer(k.ProduceRequest)(buffer, theirs)
    ours = pr.ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout_ms=5000,
        topic_data=[
            pr.TopicProduceData(
                name="t", partition_data=[pr.PartitionProduceData(index=2, records=b"abc")]
            )
        ],
    )
    assert buffer.getvalue() == ours.encode(11)
    assert pr.ProduceRequest.decode(buffer.getvalue(), 11) == ours


def test_an_init_producer_id_request_built_by_kio_encodes_to_our_bytes() -> None:
    from kio.schema.init_producer_id.v5 import request as k
    from kio.static.primitive import i16, i32Timedelta, i64

    theirs = k.InitProducerIdRequest(
        transactional_id="txn-9",
        transaction_timeout=i32Timedelta.parse(datetime.timedelta(minutes=1)),
        producer_id=i64(77),
        producer_epoch=i16(3),
    )
    buffer = io.BytesIO()
    entity_writer(k.InitProducerIdRequest)(buffer, theirs)
    ours = ipi.InitProducerIdRequest(
        transactional_id="txn-9", transaction_timeout_ms=60_000, producer_id=77, producer_epoch=3
    )
    assert buffer.getvalue() == ours.encode(5)
