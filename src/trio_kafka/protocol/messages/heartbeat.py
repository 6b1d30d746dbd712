"""Heartbeat (API key 12), versions 0-4; flexible from v4.

v3 static membership (KIP-345), v4 flexible.
"""

from __future__ import annotations

import attrs

from .._codec import INT16, INT32, STRING, Request, Response, field


@attrs.frozen
class HeartbeatRequest(Request):
    API_KEY = 12
    MIN_VERSION = 0
    MAX_VERSION = 4
    FLEXIBLE_VERSION = 4

    group_id: str = field(STRING)
    generation_id: int = field(INT32)
    member_id: str = field(STRING)
    group_instance_id: str | None = field(STRING, "3+", nullable="3+", default=None)


@attrs.frozen
class HeartbeatResponse(Response):
    API_KEY = 12
    MIN_VERSION = 0
    MAX_VERSION = 4
    FLEXIBLE_VERSION = 4

    throttle_time_ms: int = field(INT32, "1+")
    error_code: int = field(INT16)


HeartbeatRequest.RESPONSE = HeartbeatResponse
