"""Setting up one broker connection for the selector: connect (bounded by
`connection_setup_timeout`), start the connection's reader, negotiate versions with
ApiVersions, authenticate with SASL when configured. A failure names the node and, for
TLS and refused connections, what to check. `KafkaSelector._connect` calls it and keeps
the node's bookkeeping (backoff, waiters).

A listener that wants TLS or SASL, met by a client without them, is told at once
rather than retried until `max_block` (`AuthenticationError`, naming
`security_protocol`): nothing listening (connect refused) or a hang may be a broker
starting, and stays a retriable `BrokerConnectionError`, but something that answered
is known. A TLS listener answers our plaintext ApiVersions with a TLS alert (bytes that
are not Kafka: refused at the first answer) or closes at once; a SASL listener answers
ApiVersions and closes at the first request before authentication. A close can also be
a broker going down, so it takes `LISTENER_CLOSES` in a row, each an orderly end of
stream: a reset (what the simulator's network faults make), a refused connect or a
hang starts the count again.
"""

from __future__ import annotations

import random
import ssl

import anyio

from trio_kafka.errors import AuthenticationError, BrokerConnectionError, KafkaError, ProtocolError
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
    refusal = listener_refusal(node)
    if refusal is not None:
        raise refusal
    stream = None
    try:
        with anyio.move_on_after(config.connection_setup_timeout):
            stream = await transport.connect(node.host, node.port)
    except STREAM_ERRORS as exc:
        node.closed_unused = 0
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
        node.closed_unused = 0
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
        refusal = not_plaintext_kafka(node, connection)
        if refusal is not None:
            raise refusal from exc
        raise BrokerConnectionError(f"setting up the connection to {where} failed: {exc}") from exc
    except BaseException:
        await connection.aclose()
        raise
    return connection, info


#: Connections in a row a node's peer closes in order, before answering past
#: ApiVersions, that make it "a TLS or SASL listener" rather than a broker going down.
LISTENER_CLOSES = 3

_SASL_OPTIONS = "sasl_mechanism, sasl_plain_username and sasl_plain_password"


def note_closed(node: Node, connection: BrokerConnection) -> None:
    """Count `connection`'s end towards `LISTENER_CLOSES`: the peer closed it in order
    before it answered anything past ApiVersions (with SASL configured, setup alone
    answers more); any other end starts the count again."""
    if connection.closed_by_peer and connection.answered <= 1:
        node.closed_unused += 1
        node.closed_after_api_versions = connection.answered == 1
    else:
        node.closed_unused = 0


def not_plaintext_kafka(node: Node, connection: BrokerConnection) -> AuthenticationError | None:
    """Why `connection`'s setup failed, when it says the listener is not plaintext
    Kafka: bytes that are not a Kafka answer to ApiVersions (at once), or the closes
    `note_closed` counts reaching `LISTENER_CLOSES`. None: an ordinary failure."""
    if not connection.api_versions and isinstance(connection.close_reason, ProtocolError):
        node.closed_unused = 0
        seen = " ".join(f"{b:02x}" for b in connection.first_bytes)
        # A TLS record starts with its content type (20-24: 0x15 an alert, 0x16 a
        # handshake) and the major version 3.
        tls = (
            len(connection.first_bytes) >= 2
            and 20 <= connection.first_bytes[0] <= 24
            and connection.first_bytes[1] == 3
        )
        return AuthenticationError(
            f"the broker at {node.address} answered ApiVersions with bytes that are not "
            f"Kafka ({seen or 'none'}{': a TLS record' if tls else ''}): is it a TLS or "
            "SASL_SSL listener? Set security_protocol='SSL' (or 'SASL_SSL' with "
            f"{_SASL_OPTIONS}) and ssl_cafile=..., or use the broker's plaintext port "
            f"(docs/security.md); it said: {connection.close_reason}"
        )
    note_closed(node, connection)
    return listener_refusal(node)


def listener_refusal(node: Node) -> AuthenticationError | None:
    """The error for a node whose peer closed `LISTENER_CLOSES` connections in a row
    before answering past ApiVersions (the count starts again), else None."""
    closes = node.closed_unused
    if closes < LISTENER_CLOSES:
        return None
    node.closed_unused = 0
    if node.closed_after_api_versions:
        return AuthenticationError(
            f"the broker at {node.address} answered ApiVersions, then closed the "
            f"connection at the first request, {closes} times in a row: is it a SASL "
            "listener? A SASL listener closes a client that has not authenticated. Set "
            f"security_protocol='SASL_PLAINTEXT' (or 'SASL_SSL' over TLS) with "
            f"{_SASL_OPTIONS}, or sasl=SaslConfig(...) (docs/security.md)"
        )
    return AuthenticationError(
        f"the broker at {node.address} closed the connection on ApiVersions, before "
        f"answering anything, {closes} times in a row: is it a TLS or SASL_SSL listener? "
        "A TLS listener closes a plaintext client at once. Set security_protocol='SSL' "
        f"(or 'SASL_SSL' with {_SASL_OPTIONS}) and ssl_cafile=..., or use the broker's "
        "plaintext port (docs/security.md); a broker that limits connections from one "
        "address (max.connections.per.ip) closes them this way too"
    )


__all__ = ["LISTENER_CLOSES", "listener_refusal", "not_plaintext_kafka", "note_closed", "open_node"]
