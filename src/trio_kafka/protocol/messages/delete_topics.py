"""DeleteTopics (API key 20), versions 0-6; flexible from v4.

v4 flexible, v5 error messages and quota errors (KIP-599), v6 delete by topic id (KIP-516).
"""

# `field()` builds a fresh attrs field per declaration, not a shared default value.
# ruff: noqa: RUF009

from __future__ import annotations

import uuid

import attrs

from .._codec import INT16, INT32, STRING, UUID, Request, Response, Struct, array, field


@attrs.frozen
class DeleteTopicState(Struct):
    name: str | None = field(STRING, "6+", nullable="6+", default=None)
    topic_id: uuid.UUID = field(UUID, "6+")


@attrs.frozen
class DeleteTopicsRequest(Request):
    API_KEY = 20
    MIN_VERSION = 0
    MAX_VERSION = 6
    FLEXIBLE_VERSION = 4

    topics: list[DeleteTopicState] = field(array(DeleteTopicState), "6+")
    topic_names: list[str] = field(array(STRING), "0-5")
    timeout_ms: int = field(INT32)


@attrs.frozen
class DeletableTopicResult(Struct):
    name: str | None = field(STRING, nullable="6+")
    topic_id: uuid.UUID = field(UUID, "6+")
    error_code: int = field(INT16)
    error_message: str | None = field(STRING, "5+", nullable="5+", default=None)


@attrs.frozen
class DeleteTopicsResponse(Response):
    API_KEY = 20
    MIN_VERSION = 0
    MAX_VERSION = 6
    FLEXIBLE_VERSION = 4

    throttle_time_ms: int = field(INT32, "1+")
    responses: list[DeletableTopicResult] = field(array(DeletableTopicResult))


DeleteTopicsRequest.RESPONSE = DeleteTopicsResponse
