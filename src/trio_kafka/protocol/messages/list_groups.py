"""ListGroups (API key 16), versions 0-5; flexible from v3.

v3 flexible, v4 state filter (KIP-518), v5 type filter (KIP-848).
"""

# `field()` builds a fresh attrs field per declaration, not a shared default value.
# ruff: noqa: RUF009

from __future__ import annotations

import attrs

from .._codec import INT16, INT32, STRING, Request, Response, Struct, array, field


@attrs.frozen
class ListGroupsRequest(Request):
    API_KEY = 16
    MIN_VERSION = 0
    MAX_VERSION = 5
    FLEXIBLE_VERSION = 3

    states_filter: list[str] = field(array(STRING), "4+")
    types_filter: list[str] = field(array(STRING), "5+")


@attrs.frozen
class ListedGroup(Struct):
    group_id: str = field(STRING)
    protocol_type: str = field(STRING)
    group_state: str = field(STRING, "4+")
    group_type: str = field(STRING, "5+")


@attrs.frozen
class ListGroupsResponse(Response):
    API_KEY = 16
    MIN_VERSION = 0
    MAX_VERSION = 5
    FLEXIBLE_VERSION = 3

    throttle_time_ms: int = field(INT32, "1+")
    error_code: int = field(INT16)
    groups: list[ListedGroup] = field(array(ListedGroup))


ListGroupsRequest.RESPONSE = ListGroupsResponse
