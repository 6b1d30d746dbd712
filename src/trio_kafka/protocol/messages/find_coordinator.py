"""FindCoordinator (API key 10), versions 0-6; flexible from v3.

v1 KeyType for transaction coordinators (KIP-98), v3 flexible, v4 batched keys (KIP-699), v5
TRANSACTION_ABORTABLE (KIP-890), v6 share groups (KIP-932).
"""

# `field()` builds a fresh attrs field per declaration, not a shared default value.
# ruff: noqa: RUF009

from __future__ import annotations

import attrs

from .._codec import INT8, INT16, INT32, STRING, Request, Response, Struct, array, field


@attrs.frozen
class FindCoordinatorRequest(Request):
    API_KEY = 10
    MIN_VERSION = 0
    MAX_VERSION = 6
    FLEXIBLE_VERSION = 3

    key: str = field(STRING, "0-3")
    key_type: int = field(INT8, "1+")
    coordinator_keys: list[str] = field(array(STRING), "4+")


@attrs.frozen
class Coordinator(Struct):
    key: str = field(STRING, "4+")
    node_id: int = field(INT32, "4+")
    host: str = field(STRING, "4+")
    port: int = field(INT32, "4+")
    error_code: int = field(INT16, "4+")
    error_message: str | None = field(STRING, "4+", nullable="4+")


@attrs.frozen
class FindCoordinatorResponse(Response):
    API_KEY = 10
    MIN_VERSION = 0
    MAX_VERSION = 6
    FLEXIBLE_VERSION = 3

    throttle_time_ms: int = field(INT32, "1+")
    error_code: int = field(INT16, "0-3")
    error_message: str | None = field(STRING, "1-3", nullable="1-3")
    node_id: int = field(INT32, "0-3")
    host: str = field(STRING, "0-3")
    port: int = field(INT32, "0-3")
    coordinators: list[Coordinator] = field(array(Coordinator), "4+")


FindCoordinatorRequest.RESPONSE = FindCoordinatorResponse
