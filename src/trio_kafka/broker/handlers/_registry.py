"""The handler table: every API the broker answers but ApiVersions, with the highest
version it implements. ApiVersions (which advertises these ranges) and the package's
`HANDLERS` (which the shell dispatches on) both read it, so neither imports the other's
importer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from trio_kafka.broker.handlers import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    create_topics,
    delete_topics,
    describe_configs,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    init_producer_id,
    join_group,
    leave_group,
    list_offsets,
    metadata,
    offset_commit,
    offset_fetch,
    produce,
    sasl_authenticate,
    sasl_handshake,
    sync_group,
    txn_offset_commit,
)
from trio_kafka.protocol import Request


@attrs.frozen
class Handler:
    REQUEST: type[Request]
    handle: Callable[[Any, Any], Any]
    max_version: int


def handler_of(module: Any, max_version: int | None = None) -> Handler:
    request: type[Request] = module.REQUEST
    return Handler(
        request, module.handle, request.MAX_VERSION if max_version is None else max_version
    )


#: Every API but ApiVersions, which advertises their ranges beside its own (`api_versions`
#: imports this table; `HANDLERS` in the package adds ApiVersions to it).
OTHER_HANDLERS: dict[int, Handler] = {
    h.REQUEST.API_KEY: h
    for h in (
        handler_of(produce),
        handler_of(fetch),
        handler_of(list_offsets),
        handler_of(metadata),
        handler_of(offset_commit),
        handler_of(offset_fetch),
        handler_of(find_coordinator),
        handler_of(join_group),
        handler_of(heartbeat),
        handler_of(leave_group),
        handler_of(sync_group),
        handler_of(sasl_handshake),
        handler_of(create_topics),
        handler_of(delete_topics),
        handler_of(init_producer_id),
        handler_of(add_partitions_to_txn),
        handler_of(add_offsets_to_txn),
        handler_of(end_txn),
        handler_of(txn_offset_commit),
        handler_of(describe_configs),
        handler_of(sasl_authenticate),
    )
}

__all__ = ["OTHER_HANDLERS", "Handler", "handler_of"]
