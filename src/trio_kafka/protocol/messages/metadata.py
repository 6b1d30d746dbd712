"""Metadata (API key 3), versions 0-12; flexible from v9.

v4 AllowAutoTopicCreation, v8 authorized operations (KIP-430), v9 flexible, v10 topic ids
(KIP-516), v11 drops cluster authorized operations (KIP-700), v12 lookup by topic id.
"""

# `field()` builds a fresh attrs field per declaration, not a shared default value.
# ruff: noqa: RUF009

from __future__ import annotations

import uuid

import attrs

from .._codec import (
    BOOL,
    INT16,
    INT32,
    INT32_MIN,
    STRING,
    UUID,
    Request,
    Response,
    Struct,
    array,
    field,
)


@attrs.frozen
class MetadataRequestTopic(Struct):
    topic_id: uuid.UUID = field(UUID, "10+")
    name: str | None = field(STRING, nullable="10+")


@attrs.frozen
class MetadataRequest(Request):
    API_KEY = 3
    MIN_VERSION = 0
    MAX_VERSION = 12
    FLEXIBLE_VERSION = 9

    topics: list[MetadataRequestTopic] | None = field(array(MetadataRequestTopic), nullable="1+")
    allow_auto_topic_creation: bool = field(BOOL, "4+", default=True)
    include_cluster_authorized_operations: bool = field(BOOL, "8-10")
    include_topic_authorized_operations: bool = field(BOOL, "8+")


@attrs.frozen
class MetadataResponseBroker(Struct):
    node_id: int = field(INT32)
    host: str = field(STRING)
    port: int = field(INT32)
    rack: str | None = field(STRING, "1+", nullable="1+", default=None)


@attrs.frozen
class MetadataResponsePartition(Struct):
    error_code: int = field(INT16)
    partition_index: int = field(INT32)
    leader_id: int = field(INT32)
    leader_epoch: int = field(INT32, "7+", default=-1)
    replica_nodes: list[int] = field(array(INT32))
    isr_nodes: list[int] = field(array(INT32))
    offline_replicas: list[int] = field(array(INT32), "5+")


@attrs.frozen
class MetadataResponseTopic(Struct):
    error_code: int = field(INT16)
    name: str | None = field(STRING, nullable="12+")
    topic_id: uuid.UUID = field(UUID, "10+")
    is_internal: bool = field(BOOL, "1+")
    partitions: list[MetadataResponsePartition] = field(array(MetadataResponsePartition))
    topic_authorized_operations: int = field(INT32, "8+", default=INT32_MIN)


@attrs.frozen
class MetadataResponse(Response):
    API_KEY = 3
    MIN_VERSION = 0
    MAX_VERSION = 12
    FLEXIBLE_VERSION = 9

    throttle_time_ms: int = field(INT32, "3+")
    brokers: list[MetadataResponseBroker] = field(array(MetadataResponseBroker))
    cluster_id: str | None = field(STRING, "2+", nullable="2+", default=None)
    controller_id: int = field(INT32, "1+", default=-1)
    topics: list[MetadataResponseTopic] = field(array(MetadataResponseTopic))
    cluster_authorized_operations: int = field(INT32, "8-10", default=INT32_MIN)


MetadataRequest.RESPONSE = MetadataResponse
