"""LeaveGroup (API key 13), versions 0-5; flexible from v4.

v3 batched members and static membership (KIP-345), v4 flexible, v5 reason (KIP-800).
"""

# `field()` builds a fresh attrs field per declaration, not a shared default value.
# ruff: noqa: RUF009

from __future__ import annotations

import attrs

from .._codec import INT16, INT32, STRING, Request, Response, Struct, array, field


@attrs.frozen
class MemberIdentity(Struct):
    member_id: str = field(STRING, "3+")
    group_instance_id: str | None = field(STRING, "3+", nullable="3+", default=None)
    reason: str | None = field(STRING, "5+", nullable="5+", default=None)


@attrs.frozen
class LeaveGroupRequest(Request):
    API_KEY = 13
    MIN_VERSION = 0
    MAX_VERSION = 5
    FLEXIBLE_VERSION = 4

    group_id: str = field(STRING)
    member_id: str = field(STRING, "0-2")
    members: list[MemberIdentity] = field(array(MemberIdentity), "3+")


@attrs.frozen
class MemberResponse(Struct):
    member_id: str = field(STRING, "3+")
    group_instance_id: str | None = field(STRING, "3+", nullable="3+")
    error_code: int = field(INT16, "3+")


@attrs.frozen
class LeaveGroupResponse(Response):
    API_KEY = 13
    MIN_VERSION = 0
    MAX_VERSION = 5
    FLEXIBLE_VERSION = 4

    throttle_time_ms: int = field(INT32, "1+")
    error_code: int = field(INT16)
    members: list[MemberResponse] = field(array(MemberResponse), "3+")


LeaveGroupRequest.RESPONSE = LeaveGroupResponse
