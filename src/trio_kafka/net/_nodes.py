"""The selector's bookkeeping per broker: `Node` (address, connection, backoff), the
connection `Attempt` everyone waiting for a node shares, the metadata `Refresh` in
progress; and `root_error`, the OS-level cause under a connection failure.
"""

from __future__ import annotations

import math

import anyio
import attrs

from trio_kafka.net._connection import BrokerConnection
from trio_kafka.net._versions import ApiVersionsInfo


@attrs.define(eq=False)
class Attempt:
    """One connection attempt; everyone waiting for the node waits for it."""

    done: anyio.Event = attrs.field(factory=anyio.Event)
    connection: BrokerConnection | None = None
    error: BaseException | None = None


@attrs.define(eq=False)
class Node:
    node_id: int
    host: str
    port: int
    #: The open (negotiated, authenticated) connection, None when there is none.
    connection: BrokerConnection | None = None
    info: ApiVersionsInfo | None = None
    #: The attempt in progress, None when none is.
    attempt: Attempt | None = None
    #: Consecutive failed attempts (and drops) since the last successful setup.
    failures: int = 0
    #: Clock time before which no new attempt starts.
    retry_at: float = -math.inf
    last_error: BaseException | None = None
    # Connections we closed on purpose (idle, address change): no backoff for them.
    deliberate: set[int] = attrs.field(factory=set)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def ready(self) -> bool:
        return self.connection is not None and self.connection.is_open


@attrs.define(eq=False)
class Refresh:
    """One Metadata request in progress; `topics` None means every topic. `full`: it
    asks for every topic of interest (not only topics named by a caller)."""

    topics: frozenset[str] | None
    full: bool = False
    done: anyio.Event = attrs.field(factory=anyio.Event)
    error: BaseException | None = None

    def covers(self, topics: frozenset[str]) -> bool:
        return self.topics is None or self.topics >= topics


def root_error(error: BaseException) -> BaseException:
    """The OS-level error under `error`: follows causes, and takes the last attempt of the
    exception group raised when every address of a host refused."""
    seen: set[int] = set()
    while id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, BaseExceptionGroup) and error.exceptions:
            error = error.exceptions[-1]
        elif error.__cause__ is not None:
            error = error.__cause__
        else:
            break
    return error


__all__ = ["Attempt", "Node", "Refresh", "root_error"]
