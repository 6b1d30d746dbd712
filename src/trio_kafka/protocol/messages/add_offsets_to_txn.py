"""AddOffsetsToTxn (API key 25), versions 0-4; flexible from v3.

v2 PRODUCER_FENCED (KIP-588), v3 flexible, v4 TRANSACTION_ABORTABLE (KIP-890).
"""

from __future__ import annotations

import attrs

from .._codec import INT16, INT32, INT64, STRING, Request, Response, field


@attrs.frozen
class AddOffsetsToTxnRequest(Request):
    API_KEY = 25
    MIN_VERSION = 0
    MAX_VERSION = 4
    FLEXIBLE_VERSION = 3

    transactional_id: str = field(STRING)
    producer_id: int = field(INT64)
    producer_epoch: int = field(INT16)
    group_id: str = field(STRING)


@attrs.frozen
class AddOffsetsToTxnResponse(Response):
    API_KEY = 25
    MIN_VERSION = 0
    MAX_VERSION = 4
    FLEXIBLE_VERSION = 3

    throttle_time_ms: int = field(INT32)
    error_code: int = field(INT16)


AddOffsetsToTxnRequest.RESPONSE = AddOffsetsToTxnResponse
