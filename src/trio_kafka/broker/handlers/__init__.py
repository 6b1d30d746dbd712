"""One module per Kafka API, each a pure `handle(ctx, request) -> response`.

`HANDLERS` maps an API key to its `Handler` (request class, function, the highest version
we implement), which ApiVersions advertises and the shell dispatches on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from trio_kafka.broker.handlers import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    api_versions,
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


def _handler(module: Any, max_version: int | None = None) -> Handler:
    request: type[Request] = module.REQUEST
    return Handler(
        request, module.handle, request.MAX_VERSION if max_version is None else max_version
    )


HANDLERS: dict[int, Handler] = {
    h.REQUEST.API_KEY: h
    for h in (
        _handler(produce),
        _handler(fetch),
        _handler(list_offsets),
        _handler(metadata),
        _handler(offset_commit),
        _handler(offset_fetch),
        _handler(find_coordinator),
        _handler(join_group),
        _handler(heartbeat),
        _handler(leave_group),
        _handler(sync_group),
        _handler(sasl_handshake),
        _handler(api_versions),
        _handler(create_topics),
        _handler(delete_topics),
        _handler(init_producer_id),
        _handler(add_partitions_to_txn),
        _handler(add_offsets_to_txn),
        _handler(end_txn),
        _handler(txn_offset_commit),
        _handler(describe_configs),
        _handler(sasl_authenticate),
    )
}

#: What an unauthenticated connection may send (anything else closes it).
PRE_AUTH_KEYS = frozenset(
    {
        api_versions.REQUEST.API_KEY,
        sasl_handshake.REQUEST.API_KEY,
        sasl_authenticate.REQUEST.API_KEY,
    }
)

__all__ = ["HANDLERS", "PRE_AUTH_KEYS", "Handler"]
