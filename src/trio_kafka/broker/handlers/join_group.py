"""JoinGroup (API key 11), v0-9, classic protocol, minimal (see `_groups.py`).

A member id is assigned on the first join (no MEMBER_ID_REQUIRED round trip, which
Kafka's v4+ asks for but clients also accept an immediate id)."""

from __future__ import annotations

from trio_kafka.broker._context import RequestContext
from trio_kafka.broker.handlers._txn_common import not_group_coordinator
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol.messages.join_group import (
    JoinGroupRequest,
    JoinGroupResponse,
    JoinGroupResponseMember,
)

REQUEST = JoinGroupRequest


def handle(ctx: RequestContext, req: JoinGroupRequest) -> JoinGroupResponse:
    if not_group_coordinator(ctx):
        return JoinGroupResponse(error_code=ErrorCode.NOT_COORDINATOR, member_id=req.member_id)
    result = ctx.state.groups.join(
        req.group_id,
        req.member_id,
        group_instance_id=req.group_instance_id,
        client_id=ctx.header.client_id or "",
        client_host=ctx.client_host,
        protocol_type=req.protocol_type,
        protocols=[(p.name, p.metadata) for p in req.protocols],
        session_timeout_ms=req.session_timeout_ms,
        rebalance_timeout_ms=req.rebalance_timeout_ms,
        now_ms=ctx.now_ms(),
    )
    return JoinGroupResponse(
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        leader=result.leader,
        member_id=result.member_id or req.member_id,
        members=[
            JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=meta)
            for m, i, meta in result.members
        ],
    )
