"""A plaintext client meeting a listener that wants TLS or SASL is told so within a
second or two, naming `security_protocol`, not after `max_block` (60 s) with "is a
broker running there?". Nothing listening, or a listener that resets, may be a broker
starting or a network fault: that is still retried until `max_block`.

Before the fix every case below waited `max_block`; only a SASL_PLAINTEXT listener's
message mentioned security_protocol.
"""

from __future__ import annotations

import functools
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import trio

from trio_kafka import AuthenticationError, BrokerConnectionError, open_producer
from trio_kafka.broker import Cluster, SaslConfig, open_cluster
from trio_kafka.net import open_selector

trustme = pytest.importorskip("trustme")

#: Generous: the answer comes in well under a second; before the fix, max_block.
FAST = 10.0
MAX_BLOCK = 60.0
USERS = {"alice": "alice-secret"}


def _tls_server(ca: Any) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
    return context


@pytest.fixture(params=["SSL", "SASL_SSL", "SASL_PLAINTEXT"])
async def secure(request: pytest.FixtureRequest, ca: Any) -> AsyncIterator[tuple[str, Cluster]]:
    options: dict[str, Any] = {}
    if "SSL" in request.param:
        options["ssl_context"] = _tls_server(ca)
    if "SASL" in request.param:
        options["sasl"] = SaslConfig(USERS)
    async with open_cluster(**options) as cluster:
        yield request.param, cluster


async def _lookup_error(bootstrap: str, max_block: float = MAX_BLOCK) -> tuple[Exception, float]:
    """What a plaintext selector's wait for a topic raises, and after how long."""
    start = trio.current_time()
    with pytest.raises(Exception) as caught:
        async with open_selector(bootstrap, max_block=max_block) as selector:
            await selector.wait_for_topic("t")
    assert isinstance(caught.value, Exception)
    return caught.value, trio.current_time() - start


async def test_a_plaintext_client_is_told_at_once_the_listener_wants_tls_or_sasl(
    secure: tuple[str, Cluster],
) -> None:
    protocol, cluster = secure
    error, took = await _lookup_error(cluster.bootstrap)
    assert isinstance(error, AuthenticationError), error
    assert took < FAST, (took, error)
    message = str(error)
    assert "security_protocol=" in message and cluster.bootstrap in message
    if protocol == "SASL_PLAINTEXT":  # answers ApiVersions, closes at the first request
        assert "SASL listener" in message and "'SASL_PLAINTEXT'" in message, message
    else:  # closes the plaintext ApiVersions at once
        assert "TLS or SASL_SSL listener" in message and "'SSL'" in message, message


async def test_a_plaintext_producer_send_fails_at_once_on_a_tls_listener(ca: Any) -> None:
    async with open_cluster(ssl_context=_tls_server(ca)) as cluster:
        start = trio.current_time()
        with pytest.raises(AuthenticationError, match="security_protocol="):
            async with open_producer(cluster.bootstrap) as producer:
                await producer.send_and_wait("t", b"x")
        assert trio.current_time() - start < FAST


async def _raw_server_error(
    nursery: trio.Nursery,
    handler: Callable[[trio.SocketStream], Awaitable[None]],
    max_block: float = MAX_BLOCK,
) -> tuple[Exception, float]:
    listeners = await nursery.start(functools.partial(trio.serve_tcp, host="127.0.0.1"), handler, 0)
    port = listeners[0].socket.getsockname()[1]
    try:
        return await _lookup_error(f"127.0.0.1:{port}", max_block)
    finally:
        nursery.cancel_scope.cancel()


async def test_a_listener_that_closes_at_once_is_named_within_seconds(
    nursery: trio.Nursery,
) -> None:
    async def close_at_once(stream: trio.SocketStream) -> None:
        await stream.aclose()

    error, took = await _raw_server_error(nursery, close_at_once)
    assert isinstance(error, AuthenticationError), error
    assert took < FAST, (took, error)
    assert "closed the connection on ApiVersions" in str(error)
    assert "TLS" in str(error) and "security_protocol='SSL'" in str(error)


async def test_a_listener_that_answers_a_tls_alert_is_named_at_the_first_answer(
    nursery: trio.Nursery,
) -> None:
    async def tls_alert(stream: trio.SocketStream) -> None:
        await stream.receive_some(4096)
        # What a TLS server answers a plaintext hello: an alert record (fatal,
        # unexpected_message), then it closes.
        await stream.send_all(bytes([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x0A]))
        await trio.sleep(30)  # keeps the connection open: the bytes alone must say it

    error, took = await _raw_server_error(nursery, tls_alert)
    assert isinstance(error, AuthenticationError), error
    assert took < FAST, (took, error)
    assert "bytes that are not Kafka (15 03 03 00 02 02 0a: a TLS record)" in str(error)
    assert "security_protocol='SSL'" in str(error)


async def test_a_listener_that_resets_is_retried_until_max_block(nursery: trio.Nursery) -> None:
    """A reset is what a network fault (and the simulator) makes: never a verdict."""

    async def reset(stream: trio.SocketStream) -> None:
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await stream.receive_some(4096)
        stream.socket.close()

    error, took = await _raw_server_error(nursery, reset, max_block=2.0)
    assert isinstance(error, BrokerConnectionError), error
    assert took >= 2.0


async def test_nothing_listening_is_retried_until_max_block() -> None:
    with socket.socket() as s:  # a free port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    error, took = await _lookup_error(f"127.0.0.1:{port}", max_block=2.0)
    assert isinstance(error, BrokerConnectionError), error
    assert took >= 2.0
    assert "Is a broker running" in str(error)
