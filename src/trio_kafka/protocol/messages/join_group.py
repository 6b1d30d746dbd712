"""JoinGroup (API key 11), versions 0-9; flexible from v6.

v1 rebalance timeout (KIP-62), v4 MEMBER_ID_REQUIRED (KIP-394), v5 static membership
(KIP-345), v6 flexible, v7 protocol type (KIP-559), v8 reason (KIP-800), v9 skip assignment
(KIP-814).
"""

# `field()` builds a fresh attrs field per declaration, not a shared default value.
# ruff: noqa: RUF009

from __future__ import annotations

import attrs

from .._codec import BOOL, BYTES, INT16, INT32, STRING, Request, Response, Struct, array, field


@attrs.frozen
class JoinGroupRequestProtocol(Struct):
    name: str = field(STRING)
    metadata: bytes = field(BYTES)


@attrs.frozen
class JoinGroupRequest(Request):
    API_KEY = 11
    MIN_VERSION = 0
    MAX_VERSION = 9
    FLEXIBLE_VERSION = 6

    group_id: str = field(STRING)
    session_timeout_ms: int = field(INT32)
    rebalance_timeout_ms: int = field(INT32, "1+", default=-1)
    member_id: str = field(STRING)
    group_instance_id: str | None = field(STRING, "5+", nullable="5+", default=None)
    protocol_type: str = field(STRING)
    protocols: list[JoinGroupRequestProtocol] = field(array(JoinGroupRequestProtocol))
    reason: str | None = field(STRING, "8+", nullable="8+", default=None)


@attrs.frozen
class JoinGroupResponseMember(Struct):
    member_id: str = field(STRING)
    group_instance_id: str | None = field(STRING, "5+", nullable="5+", default=None)
    metadata: bytes = field(BYTES)


@attrs.frozen
class JoinGroupResponse(Response):
    API_KEY = 11
    MIN_VERSION = 0
    MAX_VERSION = 9
    FLEXIBLE_VERSION = 6

    throttle_time_ms: int = field(INT32, "2+")
    error_code: int = field(INT16)
    generation_id: int = field(INT32, default=-1)
    protocol_type: str | None = field(STRING, "7+", nullable="7+", default=None)
    protocol_name: str | None = field(STRING, nullable="7+")
    leader: str = field(STRING)
    skip_assignment: bool = field(BOOL, "9+")
    member_id: str = field(STRING)
    members: list[JoinGroupResponseMember] = field(array(JoinGroupResponseMember))


JoinGroupRequest.RESPONSE = JoinGroupResponse
