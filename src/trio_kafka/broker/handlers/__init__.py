"""One module per Kafka API, each a pure `handle(ctx, request) -> response`.

`HANDLERS` maps an API key to its `Handler` (request class, function, the highest version
we implement), which ApiVersions advertises and the shell dispatches on.
"""

from __future__ import annotations

from trio_kafka.broker.handlers import api_versions, sasl_authenticate, sasl_handshake
from trio_kafka.broker.handlers._registry import OTHER_HANDLERS, Handler, handler_of

#: Every API the broker answers, by key: what the shell dispatches on.
HANDLERS: dict[int, Handler] = {
    **OTHER_HANDLERS,
    api_versions.REQUEST.API_KEY: handler_of(api_versions),
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
