"""DescribeGroups (API key 15), versions 0-5; flexible from v5.

v3 authorized operations (KIP-430), v4 static membership (KIP-345), v5 flexible.
"""

# `field()` builds a fresh attrs field per declaration, not a shared default value.
# ruff: noqa: RUF009

from __future__ import annotations

import attrs

from .._codec import (
    BOOL,
    BYTES,
    INT16,
    INT32,
    INT32_MIN,
    STRING,
    Request,
    Response,
    Struct,
    array,
    field,
)


@attrs.frozen
class DescribeGroupsRequest(Request):
    API_KEY = 15
    MIN_VERSION = 0
    MAX_VERSION = 5
    FLEXIBLE_VERSION = 5

    groups: list[str] = field(array(STRING))
    include_authorized_operations: bool = field(BOOL, "3+")


@attrs.frozen
class DescribedGroupMember(Struct):
    member_id: str = field(STRING)
    group_instance_id: str | None = field(STRING, "4+", nullable="4+", default=None)
    client_id: str = field(STRING)
    client_host: str = field(STRING)
    member_metadata: bytes = field(BYTES)
    member_assignment: bytes = field(BYTES)


@attrs.frozen
class DescribedGroup(Struct):
    error_code: int = field(INT16)
    group_id: str = field(STRING)
    group_state: str = field(STRING)
    protocol_type: str = field(STRING)
    protocol_data: str = field(STRING)
    members: list[DescribedGroupMember] = field(array(DescribedGroupMember))
    authorized_operations: int = field(INT32, "3+", default=INT32_MIN)


@attrs.frozen
class DescribeGroupsResponse(Response):
    API_KEY = 15
    MIN_VERSION = 0
    MAX_VERSION = 5
    FLEXIBLE_VERSION = 5

    throttle_time_ms: int = field(INT32, "1+")
    groups: list[DescribedGroup] = field(array(DescribedGroup))


DescribeGroupsRequest.RESPONSE = DescribeGroupsResponse
