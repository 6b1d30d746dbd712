"""SyncGroup (API key 14), versions 0-5; flexible from v4.

v3 static membership (KIP-345), v4 flexible, v5 protocol type and name (KIP-559).
"""

# `field()` builds a fresh attrs field per declaration, not a shared default value.
# ruff: noqa: RUF009

from __future__ import annotations

import attrs

from .._codec import BYTES, INT16, INT32, STRING, Request, Response, Struct, array, field


@attrs.frozen
class SyncGroupRequestAssignment(Struct):
    member_id: str = field(STRING)
    assignment: bytes = field(BYTES)


@attrs.frozen
class SyncGroupRequest(Request):
    API_KEY = 14
    MIN_VERSION = 0
    MAX_VERSION = 5
    FLEXIBLE_VERSION = 4

    group_id: str = field(STRING)
    generation_id: int = field(INT32)
    member_id: str = field(STRING)
    group_instance_id: str | None = field(STRING, "3+", nullable="3+", default=None)
    protocol_type: str | None = field(STRING, "5+", nullable="5+", default=None)
    protocol_name: str | None = field(STRING, "5+", nullable="5+", default=None)
    assignments: list[SyncGroupRequestAssignment] = field(array(SyncGroupRequestAssignment))


@attrs.frozen
class SyncGroupResponse(Response):
    API_KEY = 14
    MIN_VERSION = 0
    MAX_VERSION = 5
    FLEXIBLE_VERSION = 4

    throttle_time_ms: int = field(INT32, "1+")
    error_code: int = field(INT16)
    protocol_type: str | None = field(STRING, "5+", nullable="5+", default=None)
    protocol_name: str | None = field(STRING, "5+", nullable="5+", default=None)
    assignment: bytes = field(BYTES)


SyncGroupRequest.RESPONSE = SyncGroupResponse
