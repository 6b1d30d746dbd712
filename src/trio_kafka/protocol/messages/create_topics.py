"""CreateTopics (API key 19), versions 0-7; flexible from v5.

v4 default partitions and replication (KIP-464), v5 flexible with the created config, v6
quota errors (KIP-599), v7 topic ids (KIP-516).
"""

# `field()` builds a fresh attrs field per declaration, not a shared default value.
# ruff: noqa: RUF009

from __future__ import annotations

import uuid

import attrs

from .._codec import BOOL, INT8, INT16, INT32, STRING, UUID, Request, Response, Struct, array, field


@attrs.frozen
class CreatableReplicaAssignment(Struct):
    partition_index: int = field(INT32)
    broker_ids: list[int] = field(array(INT32))


@attrs.frozen
class CreatableTopicConfig(Struct):
    name: str = field(STRING)
    value: str | None = field(STRING, nullable="0+")


@attrs.frozen
class CreatableTopic(Struct):
    name: str = field(STRING)
    num_partitions: int = field(INT32)
    replication_factor: int = field(INT16)
    assignments: list[CreatableReplicaAssignment] = field(array(CreatableReplicaAssignment))
    configs: list[CreatableTopicConfig] = field(array(CreatableTopicConfig))


@attrs.frozen
class CreateTopicsRequest(Request):
    API_KEY = 19
    MIN_VERSION = 0
    MAX_VERSION = 7
    FLEXIBLE_VERSION = 5

    topics: list[CreatableTopic] = field(array(CreatableTopic))
    timeout_ms: int = field(INT32, default=60000)
    validate_only: bool = field(BOOL, "1+")


@attrs.frozen
class CreatableTopicConfigs(Struct):
    name: str = field(STRING, "5+")
    value: str | None = field(STRING, "5+", nullable="5+")
    read_only: bool = field(BOOL, "5+")
    config_source: int = field(INT8, "5+", default=-1)
    is_sensitive: bool = field(BOOL, "5+")


@attrs.frozen
class CreatableTopicResult(Struct):
    name: str = field(STRING)
    topic_id: uuid.UUID = field(UUID, "7+")
    error_code: int = field(INT16)
    error_message: str | None = field(STRING, "1+", nullable="0+")
    topic_config_error_code: int = field(INT16, "5+", tag=0)
    num_partitions: int = field(INT32, "5+", default=-1)
    replication_factor: int = field(INT16, "5+", default=-1)
    configs: list[CreatableTopicConfigs] | None = field(
        array(CreatableTopicConfigs), "5+", nullable="5+"
    )


@attrs.frozen
class CreateTopicsResponse(Response):
    API_KEY = 19
    MIN_VERSION = 0
    MAX_VERSION = 7
    FLEXIBLE_VERSION = 5

    throttle_time_ms: int = field(INT32, "2+")
    topics: list[CreatableTopicResult] = field(array(CreatableTopicResult))


CreateTopicsRequest.RESPONSE = CreateTopicsResponse
