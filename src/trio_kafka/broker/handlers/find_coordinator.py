"""FindCoordinator (API key 10), v0-6: one key (v0-3) or a batch of keys (v4+), for
groups (key type 0) and transactional ids (key type 1)."""

from __future__ import annotations

from trio_kafka.broker._context import RequestContext
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol.messages.find_coordinator import (
    Coordinator,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)

REQUEST = FindCoordinatorRequest

_GROUP = 0
_TRANSACTION = 1


def _find(ctx: RequestContext, key: str, key_type: int) -> Coordinator:
    state = ctx.state
    if key_type == _GROUP:
        node = state.group_coordinator
    elif key_type == _TRANSACTION:
        node = state.txn_coordinator
    else:
        return Coordinator(
            key=key,
            node_id=-1,
            host="",
            port=-1,
            error_code=ErrorCode.INVALID_REQUEST,
            error_message=f"coordinator key type {key_type} is not supported",
        )
    host, port = state.endpoints.get(node, ("", -1))
    return Coordinator(
        key=key, node_id=node, host=host, port=port, error_code=ErrorCode.NONE, error_message=None
    )


def handle(ctx: RequestContext, req: FindCoordinatorRequest) -> FindCoordinatorResponse:
    if ctx.version >= 4:
        return FindCoordinatorResponse(
            coordinators=[_find(ctx, key, req.key_type) for key in req.coordinator_keys]
        )
    found = _find(ctx, req.key, req.key_type)
    return FindCoordinatorResponse(
        error_code=found.error_code,
        error_message=found.error_message,
        node_id=found.node_id,
        host=found.host,
        port=found.port,
    )
