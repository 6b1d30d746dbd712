"""SaslAuthenticate (API key 36), versions 0-2; flexible from v2.

v1 session lifetime (KIP-368), v2 flexible.
"""

from __future__ import annotations

import attrs

from .._codec import BYTES, INT16, INT64, STRING, Request, Response, field


@attrs.frozen
class SaslAuthenticateRequest(Request):
    API_KEY = 36
    MIN_VERSION = 0
    MAX_VERSION = 2
    FLEXIBLE_VERSION = 2

    auth_bytes: bytes = field(BYTES)


@attrs.frozen
class SaslAuthenticateResponse(Response):
    API_KEY = 36
    MIN_VERSION = 0
    MAX_VERSION = 2
    FLEXIBLE_VERSION = 2

    error_code: int = field(INT16)
    error_message: str | None = field(STRING, nullable="0+")
    auth_bytes: bytes = field(BYTES)
    session_lifetime_ms: int = field(INT64, "1+")


SaslAuthenticateRequest.RESPONSE = SaslAuthenticateResponse
