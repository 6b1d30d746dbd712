"""Heartbeat (API key 12), v0-4."""

from __future__ import annotations

from trio_kafka.broker._context import RequestContext
from trio_kafka.broker.handlers._txn_common import not_group_coordinator
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse

REQUEST = HeartbeatRequest


def handle(ctx: RequestContext, req: HeartbeatRequest) -> HeartbeatResponse:
    if not_group_coordinator(ctx):
        return HeartbeatResponse(error_code=ErrorCode.NOT_COORDINATOR)
    return HeartbeatResponse(
        error_code=ctx.state.groups.heartbeat(
            req.group_id, req.member_id, req.generation_id, ctx.now_ms()
        )
    )
