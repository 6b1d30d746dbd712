"""SaslHandshake (API key 17), versions 0-1; never flexible.

v1 means the SASL exchange follows as SaslAuthenticate requests (KIP-152). Never flexible.
"""

# `field()` builds a fresh attrs field per declaration, not a shared default value.
# ruff: noqa: RUF009

from __future__ import annotations

import attrs

from .._codec import INT16, STRING, Request, Response, array, field


@attrs.frozen
class SaslHandshakeRequest(Request):
    API_KEY = 17
    MIN_VERSION = 0
    MAX_VERSION = 1
    FLEXIBLE_VERSION = None

    mechanism: str = field(STRING)


@attrs.frozen
class SaslHandshakeResponse(Response):
    API_KEY = 17
    MIN_VERSION = 0
    MAX_VERSION = 1
    FLEXIBLE_VERSION = None

    error_code: int = field(INT16)
    mechanisms: list[str] = field(array(STRING))


SaslHandshakeRequest.RESPONSE = SaslHandshakeResponse
