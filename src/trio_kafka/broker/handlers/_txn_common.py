"""What the transactional handlers share: coordinator checks and old-version error codes."""

from __future__ import annotations

from trio_kafka.broker._context import RequestContext
from trio_kafka.errors import ErrorCode


def fenced_for_version(error: ErrorCode, version: int, first_fenced_version: int) -> ErrorCode:
    """PRODUCER_FENCED is new in some version of each API: older clients get
    INVALID_PRODUCER_EPOCH instead, as Kafka answers them."""
    if error is ErrorCode.PRODUCER_FENCED and version < first_fenced_version:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


def not_txn_coordinator(ctx: RequestContext) -> bool:
    return ctx.node_id != ctx.state.txn_coordinator


def not_group_coordinator(ctx: RequestContext) -> bool:
    return ctx.node_id != ctx.state.group_coordinator


__all__ = ["fenced_for_version", "not_group_coordinator", "not_txn_coordinator"]
