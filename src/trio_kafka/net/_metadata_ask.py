"""Where the selector asks for metadata: the candidates in order (`metadata_candidates`:
open connections by load, then the rest by when their backoff ends, bootstrap
pseudo-nodes last), and asking them one after another, hedged (`ask_for_metadata`).
`KafkaSelector._fetch_metadata` calls both and applies the answer.
"""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from trio_kafka.errors import AuthenticationError, BrokerConnectionError, KafkaError
from trio_kafka.net._config import SelectorConfig
from trio_kafka.net._connection import BrokerConnection
from trio_kafka.net._metadata import ClusterMetadata
from trio_kafka.net._nodes import Node, root_error
from trio_kafka.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic

#: How long a metadata refresh waits for a connection to come up before it also asks
#: the next candidate (the attempt goes on). A healthy connect and ApiVersions take
#: milliseconds; a blackholed address takes `connection_setup_timeout` to fail.
_HEDGE_DELAY = 1.0


def metadata_candidates(
    nodes: list[Node], metadata: ClusterMetadata, rng: random.Random, now: float
) -> list[Node]:
    """Nodes in the order to ask: open connections by load, then the rest by when
    their backoff ends. Among the unconnected, metadata brokers come before
    bootstrap pseudo-nodes, which stay as the fallback (re-bootstrap) when every
    known broker fails."""
    offset = rng.randrange(len(nodes)) if nodes else 0
    nodes = nodes[offset:] + nodes[:offset]  # spread load; rng keeps it deterministic

    def key(node: Node) -> tuple[int, int, float]:
        # An open connection first, even to a bootstrap address: it answers now,
        # while a new connection may hang for connection_setup_timeout (sim
        # transactional seed 62 lost a send()'s max_block that way).
        if node.connection is not None and node.connection.is_open:
            return (0, 0, float(node.connection.in_flight))
        bootstrap = 1 if node.node_id < 0 and metadata.brokers else 0
        return (1, bootstrap, max(node.retry_at, now))

    return sorted(nodes, key=key)


async def ask_for_metadata(
    config: SelectorConfig,
    connect: Callable[[int], Awaitable[BrokerConnection]],
    candidates: list[Node],
    topics: frozenset[str] | None,
) -> Any:
    """The first Metadata answer (for `topics`; None: every topic) from `candidates`,
    asked in order, each connected through `connect(node_id)`.
    A connection not up within `_HEDGE_DELAY` is
    left connecting (the attempt goes on in the background) and the next candidate
    is asked, so one hanging connect does not hold the refresh for the whole
    `connection_setup_timeout` while other brokers answer; the nodes left
    connecting get a last, full wait once every other candidate has failed."""
    tried: list[str] = []
    last_error: BaseException | None = None
    request = MetadataRequest(
        topics=None if topics is None else [MetadataRequestTopic(name=t) for t in sorted(topics)],
        allow_auto_topic_creation=config.allow_auto_create_topics,
    )
    hedge = min(_HEDGE_DELAY, config.connection_setup_timeout)
    queue = list(candidates)
    connecting: list[Node] = []
    while queue or connecting:
        # Waiting fully for a node left connecting comes last.
        node, hedged = (queue.pop(0), True) if queue else (connecting.pop(0), False)
        try:
            connection: BrokerConnection | None = None
            with anyio.move_on_after(hedge if hedged and (queue or connecting) else math.inf):
                connection = await connect(node.node_id)
            if connection is None:
                connecting.append(node)
                continue
            response = await connection.request(request)
        except AuthenticationError:
            raise
        except KafkaError as exc:
            last_error = exc
            tried.append(f"{node.address} ({type(root_error(exc)).__name__})")
            continue
        return response
    raise BrokerConnectionError(
        f"no broker answered Metadata; tried {', '.join(tried)}; last error: {last_error}"
    ) from last_error


__all__ = ["ask_for_metadata", "metadata_candidates"]
