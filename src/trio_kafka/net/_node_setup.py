"""Setting up one broker connection for the selector: connect (bounded by
`connection_setup_timeout`), start the connection's reader, negotiate versions with
ApiVersions, authenticate with SASL when configured. A failure names the node and, for
TLS and refused connections, what to check. `KafkaSelector._connect` calls it and keeps
the node's bookkeeping (backoff, waiters).
"""

from __future__ import annotations

import random
import ssl

import anyio

from trio_kafka.errors import AuthenticationError, BrokerConnectionError, KafkaError
from trio_kafka.net._clock import Clock, TaskGroup, sleep_until
from trio_kafka.net._config import SelectorConfig
from trio_kafka.net._connection import BrokerConnection
from trio_kafka.net._nodes import Node, root_error
from trio_kafka.net._sasl import authenticate
from trio_kafka.net._transport import STREAM_ERRORS, Transport
from trio_kafka.net._versions import ApiVersionsInfo, negotiate


async def open_node(
    node: Node,
    *,
    transport: Transport,
    config: SelectorConfig,
    clock: Clock,
    rng: random.Random,
    tasks: TaskGroup,
) -> tuple[BrokerConnection, ApiVersionsInfo]:
    """A set-up connection to `node`: after its backoff, connected through `transport`
    (within `connection_setup_timeout`), its reader started in `tasks`, versions
    negotiated, SASL done when configured. Raises `BrokerConnectionError` (or
    `AuthenticationError`) naming the node."""
    if node.retry_at > clock.now():
        await sleep_until(node.retry_at)
    where = f"node {node.node_id} at {node.address}"
    stream = None
    try:
        with anyio.move_on_after(config.connection_setup_timeout):
            stream = await transport.connect(node.host, node.port)
    except STREAM_ERRORS as exc:
        cause = root_error(exc)
        if isinstance(cause, ssl.SSLCertVerificationError):
            raise AuthenticationError(
                f"TLS certificate of {where} failed verification: {cause.verify_message}"
            ) from exc
        hint = (
            " (nothing listens there: is the broker running, at this host and port?)"
            if isinstance(cause, ConnectionRefusedError)
            else ""
        )
        raise BrokerConnectionError(f"cannot connect to {where}: {cause}{hint}") from exc
    if stream is None:
        raise BrokerConnectionError(
            f"cannot connect to {where}: no connection within {config.connection_setup_timeout} s"
        )
    connection = BrokerConnection(
        stream,
        node.host,
        node.port,
        node_id=node.node_id,
        client_id=config.client_id,
        clock=clock,
        max_in_flight=config.max_in_flight,
        request_timeout=config.request_timeout,
        max_frame_size=config.max_frame_size,
    )
    connection.start(tasks)
    try:
        info = await negotiate(connection)
        if config.sasl is not None:
            await authenticate(connection, config.sasl, rng)
    except AuthenticationError:
        await connection.aclose()
        raise
    except KafkaError as exc:
        await connection.aclose()
        raise BrokerConnectionError(f"setting up the connection to {where} failed: {exc}") from exc
    except BaseException:
        await connection.aclose()
        raise
    return connection, info


__all__ = ["open_node"]
