"""What a handler is given besides its request: the cluster, the node, the version."""

from __future__ import annotations

import attrs

from trio_kafka.broker._sasl import SaslSession
from trio_kafka.broker._state import ClusterState
from trio_kafka.protocol import RequestHeader


@attrs.define(eq=False)
class RequestContext:
    """One request being handled by one node."""

    state: ClusterState
    node_id: int
    header: RequestHeader
    # The principal authenticated on this connection ("" when SASL is off).
    principal: str = ""
    client_host: str = ""
    # The connection's SASL state (None: a connection of a cluster without SASL).
    session: SaslSession | None = None

    @property
    def version(self) -> int:
        return self.header.api_version

    def now_ms(self) -> int:
        return self.state.clock()
