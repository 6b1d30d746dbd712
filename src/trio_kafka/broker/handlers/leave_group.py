"""LeaveGroup (API key 13), v0-5 (one member before v3, a batch from v3)."""

from __future__ import annotations

from trio_kafka.broker._context import RequestContext
from trio_kafka.broker.handlers._txn_common import not_group_coordinator
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol.messages.leave_group import (
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberResponse,
)

REQUEST = LeaveGroupRequest


def handle(ctx: RequestContext, req: LeaveGroupRequest) -> LeaveGroupResponse:
    if not_group_coordinator(ctx):
        return LeaveGroupResponse(error_code=ErrorCode.NOT_COORDINATOR)
    groups = ctx.state.groups
    if ctx.version < 3:
        return LeaveGroupResponse(error_code=groups.leave(req.group_id, req.member_id))
    members = [
        MemberResponse(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            error_code=groups.leave(req.group_id, m.member_id),
        )
        for m in req.members
    ]
    return LeaveGroupResponse(error_code=ErrorCode.NONE, members=members)
