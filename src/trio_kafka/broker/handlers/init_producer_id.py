"""InitProducerId (API key 22), v0-5.

Without a transactional id: a fresh producer id at epoch 0, from any broker. With one:
the transaction coordinator bumps the epoch, fences an older instance (aborting its open
transaction: CONCURRENT_TRANSACTIONS until the abort is written), checks the producer id
and epoch a v3+ client names (KIP-360) and allocates a new producer id when the epoch is
exhausted. PRODUCER_FENCED exists from v4; older versions get INVALID_PRODUCER_EPOCH.
An empty transactional id is INVALID_REQUEST, as Kafka answers.
"""

from __future__ import annotations

from trio_kafka.broker._context import RequestContext
from trio_kafka.broker.handlers._txn_common import fenced_for_version, not_txn_coordinator
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol.messages.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)

REQUEST = InitProducerIdRequest


def handle(ctx: RequestContext, req: InitProducerIdRequest) -> InitProducerIdResponse:
    state = ctx.state
    if req.transactional_id == "":
        # Kafka's coordinator refuses an empty id before anything else (conformance).
        return InitProducerIdResponse(
            error_code=ErrorCode.INVALID_REQUEST, producer_id=-1, producer_epoch=-1
        )
    if req.transactional_id is not None and not_txn_coordinator(ctx):
        return InitProducerIdResponse(
            error_code=ErrorCode.NOT_COORDINATOR, producer_id=-1, producer_epoch=-1
        )
    result = state.txn.init_producer_id(
        req.transactional_id,
        req.transaction_timeout_ms,
        ctx.now_ms(),
        producer_id=req.producer_id,
        producer_epoch=req.producer_epoch,
    )
    if result.markers is not None:
        state.start_markers(result.markers)
    return InitProducerIdResponse(
        error_code=fenced_for_version(result.error, ctx.version, 4),
        producer_id=result.producer_id,
        producer_epoch=result.producer_epoch,
    )
