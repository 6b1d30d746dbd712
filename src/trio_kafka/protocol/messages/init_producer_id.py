"""InitProducerId (API key 22), versions 0-5; flexible from v2.

v2 flexible, v3 resumes an existing producer id and epoch (KIP-360), v4 PRODUCER_FENCED
(KIP-588), v5 TRANSACTION_ABORTABLE (KIP-890).
"""

from __future__ import annotations

import attrs

from .._codec import INT16, INT32, INT64, STRING, Request, Response, field


@attrs.frozen
class InitProducerIdRequest(Request):
    API_KEY = 22
    MIN_VERSION = 0
    MAX_VERSION = 5
    FLEXIBLE_VERSION = 2

    transactional_id: str | None = field(STRING, nullable="0+")
    transaction_timeout_ms: int = field(INT32)
    producer_id: int = field(INT64, "3+", default=-1)
    producer_epoch: int = field(INT16, "3+", default=-1)


@attrs.frozen
class InitProducerIdResponse(Response):
    API_KEY = 22
    MIN_VERSION = 0
    MAX_VERSION = 5
    FLEXIBLE_VERSION = 2

    throttle_time_ms: int = field(INT32)
    error_code: int = field(INT16)
    producer_id: int = field(INT64, default=-1)
    producer_epoch: int = field(INT16)


InitProducerIdRequest.RESPONSE = InitProducerIdResponse
