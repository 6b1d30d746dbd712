"""EndTxn (API key 26), versions 0-5; flexible from v3.

v2 PRODUCER_FENCED (KIP-588), v3 flexible, v4 TRANSACTION_ABORTABLE, v5 an epoch bump on
every transaction, with the new producer id and epoch in the response (KIP-890 part 2).
"""

from __future__ import annotations

import attrs

from .._codec import BOOL, INT16, INT32, INT64, STRING, Request, Response, field


@attrs.frozen
class EndTxnRequest(Request):
    API_KEY = 26
    MIN_VERSION = 0
    MAX_VERSION = 5
    FLEXIBLE_VERSION = 3

    transactional_id: str = field(STRING)
    producer_id: int = field(INT64)
    producer_epoch: int = field(INT16)
    committed: bool = field(BOOL)


@attrs.frozen
class EndTxnResponse(Response):
    API_KEY = 26
    MIN_VERSION = 0
    MAX_VERSION = 5
    FLEXIBLE_VERSION = 3

    throttle_time_ms: int = field(INT32)
    error_code: int = field(INT16)
    producer_id: int = field(INT64, "5+", default=-1)
    producer_epoch: int = field(INT16, "5+", default=-1)


EndTxnRequest.RESPONSE = EndTxnResponse
