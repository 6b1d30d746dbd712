"""SyncGroup (API key 14), v0-5: the leader's assignments, handed back to each member."""

from __future__ import annotations

from trio_kafka.broker._context import RequestContext
from trio_kafka.broker.handlers._txn_common import not_group_coordinator
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse

REQUEST = SyncGroupRequest


def handle(ctx: RequestContext, req: SyncGroupRequest) -> SyncGroupResponse:
    if not_group_coordinator(ctx):
        return SyncGroupResponse(error_code=ErrorCode.NOT_COORDINATOR)
    groups = ctx.state.groups
    error, assignment = groups.sync(
        req.group_id,
        req.member_id,
        req.generation_id,
        {a.member_id: a.assignment for a in req.assignments},
        ctx.now_ms(),
    )
    group = groups.groups.get(req.group_id)
    return SyncGroupResponse(
        error_code=error,
        protocol_type=group.protocol_type if group else None,
        protocol_name=group.protocol_name if group else None,
        assignment=assignment,
    )
