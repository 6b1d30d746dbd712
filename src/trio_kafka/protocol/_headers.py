"""Request header v0-v2 and response header v0-v1 (RequestHeader.json, ResponseHeader.json).

Header v2 / v1 are the flexible headers of KIP-482: they end with tagged fields. The
client id stays a classic int16-length string even in header v2 (the JSON's
`"flexibleVersions": "none"` on the field), so old brokers can always read who is asking.
"""

# `field()` builds a fresh attrs field per declaration, not a shared default value.
from __future__ import annotations

import attrs

from ._schema import Message, field
from ._types import INT16, INT32, STRING


@attrs.frozen
class RequestHeader(Message):
    MIN_VERSION = 0
    MAX_VERSION = 2
    FLEXIBLE_VERSION = 2
    JSON_NAME = "RequestHeader"

    api_key: int = field(INT16)  # RequestApiKey
    api_version: int = field(INT16)  # RequestApiVersion
    correlation_id: int = field(INT32)
    client_id: str | None = field(STRING, "1+", nullable="1+", flexible="none")


@attrs.frozen
class ResponseHeader(Message):
    MIN_VERSION = 0
    MAX_VERSION = 1
    FLEXIBLE_VERSION = 1

    correlation_id: int = field(INT32)
