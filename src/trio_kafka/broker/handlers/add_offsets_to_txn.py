"""AddOffsetsToTxn (API key 25), v0-4: puts a consumer group's offsets in the
transaction (Kafka adds the group's __consumer_offsets partition; here, the group)."""

from __future__ import annotations

from trio_kafka.broker._context import RequestContext
from trio_kafka.broker.handlers._txn_common import fenced_for_version, not_txn_coordinator
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol.messages.add_offsets_to_txn import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
)

REQUEST = AddOffsetsToTxnRequest


def handle(ctx: RequestContext, req: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    if not_txn_coordinator(ctx):
        return AddOffsetsToTxnResponse(error_code=ErrorCode.NOT_COORDINATOR)
    error = ctx.state.txn.add_group(
        req.transactional_id, req.producer_id, req.producer_epoch, req.group_id, ctx.now_ms()
    )
    return AddOffsetsToTxnResponse(error_code=fenced_for_version(error, ctx.version, 2))
