"""The selector's bookkeeping per broker: `Node` (address, connection, backoff), the
connection `Attempt` everyone waiting for a node shares, the metadata `Refresh` in
progress, the topics of `Interest`; and `root_error`, the OS-level cause under a connection failure.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

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
    #: Consecutive connections the peer closed in order before they answered a request
    #: past ApiVersions, and whether the last had answered ApiVersions: a TLS listener
    #: met in plaintext closes at once, a SASL one at the first request (`_node_setup`).
    closed_unused: int = 0
    closed_after_api_versions: bool = False
    # Connections we closed on purpose (idle, address change): no backoff for them.
    deliberate: set[int] = attrs.field(factory=set)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def ready(self) -> bool:
        return self.connection is not None and self.connection.is_open


@attrs.define(eq=False)
class Interest:
    """The topics whose metadata a selector keeps, and when each was last used (an
    insertion-ordered dict: the same order every run). A topic unused for
    `metadata_max_idle` is dropped at the next refresh of all of them (Java's
    metadata.max.idle.ms), so a producer that once wrote to thousands of topics does
    not ask for them all every `metadata_max_age`."""

    last_used: dict[str, float] = attrs.field(factory=dict)
    # Topics named since the last request started (the next asks for them), and
    # whether a refresh of all of them was asked for.
    queued: set[str] = attrs.field(factory=set)
    queued_all: bool = False

    def ask(self, topics: frozenset[str], now: float) -> None:
        """`topics` are wanted (they join the topics of interest); none: all of them."""
        for topic in sorted(topics):
            self.last_used[topic] = now
        if topics:
            self.queued.update(topics)
        else:
            self.queued_all = True

    def next_refresh(self, now: float, idle: float) -> Refresh:
        """The request for what was asked since the last one started."""
        full, expired = self.queued_all, frozenset[str]()
        if full:
            expired = self.expire(now, idle)
        asked = frozenset(self.last_used if full else self.queued)
        self.queued.clear()
        self.queued_all = False
        return Refresh(asked, full=full, expired=expired)

    def shared(self, topics: frozenset[str]) -> None:
        """A request already out covers `topics` (none: all): not asked for again."""
        if topics:
            self.queued -= topics
        else:
            self.queued_all = False

    def touch(self, topics: list[str], now: float) -> None:
        """`topics` were just used (a batch sent, a read): keep them."""
        last_used = self.last_used
        for topic in topics:
            if topic in last_used:
                last_used[topic] = now

    def expire(self, now: float, idle: float) -> frozenset[str]:
        """Drop and return the topics unused for more than `idle` seconds."""
        gone = [topic for topic, used in self.last_used.items() if now - used > idle]
        for topic in gone:
            del self.last_used[topic]
        return frozenset(gone)

    def __iter__(self) -> Iterator[str]:
        return iter(self.last_used)

    def __len__(self) -> int:
        return len(self.last_used)


@attrs.define(eq=False)
class Refresh:
    """One Metadata request in progress; `topics` None means every topic. `full`: it
    asks for every topic of interest (not only topics named by a caller); `expired`:
    topics it drops from the metadata (no longer of interest)."""

    topics: frozenset[str] | None
    full: bool = False
    expired: frozenset[str] = frozenset()
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


__all__ = ["Attempt", "Interest", "Node", "Refresh", "root_error"]
