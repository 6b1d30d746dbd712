"""TCP and TLS transports against local trio listeners on 127.0.0.1 (trustme for the CA).

The transports connect through anyio: a TLS stream is anyio's `TLSStream` inside an
`AnyioStream`, and a certificate that fails verification raises
`ssl.SSLCertVerificationError` itself."""

from __future__ import annotations

import functools
import ssl
from collections.abc import AsyncIterator

import pytest
import trio
import trustme
from anyio.streams.tls import TLSStream

from trio_kafka.net import TcpTransport, TlsTransport
from trio_kafka.net._connection import AnyioStream


async def _echo(stream: trio.abc.Stream) -> None:
    try:
        async for data in stream:
            await stream.send_all(data)
    except trio.BrokenResourceError:
        pass


@pytest.fixture
async def echo_port(nursery: trio.Nursery) -> AsyncIterator[int]:
    listeners = await nursery.start(functools.partial(trio.serve_tcp, _echo, 0, host="127.0.0.1"))
    yield listeners[0].socket.getsockname()[1]


@pytest.fixture
async def tls_port(nursery: trio.Nursery, ca: trustme.CA) -> AsyncIterator[int]:
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("broker.test").configure_cert(server_context)

    async def serve(raw: trio.SocketStream) -> None:
        stream = trio.SSLStream(raw, server_context, server_side=True)
        try:
            await _echo(stream)
        finally:
            await trio.aclose_forcefully(stream)

    listeners = await nursery.start(functools.partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
    yield listeners[0].socket.getsockname()[1]


async def test_tcp_transport_opens_a_byte_stream(echo_port: int) -> None:
    stream = await TcpTransport().connect("127.0.0.1", echo_port)
    async with stream:
        await stream.send_all(b"ping")
        assert await stream.receive_some(10) == b"ping"


async def test_tcp_transport_raises_os_error_when_refused() -> None:
    with trio.socket.socket() as sock:  # bound, never listening: connections are refused
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        with pytest.raises(OSError):
            await TcpTransport().connect("127.0.0.1", port)


async def test_tls_transport_verifies_against_the_given_ca(tls_port: int, ca: trustme.CA) -> None:
    with ca.cert_pem.tempfile() as cafile:
        transport = TlsTransport.create(cafile=cafile, server_hostname="broker.test")
    stream = await transport.connect("127.0.0.1", tls_port)
    async with stream:
        assert isinstance(stream, AnyioStream)
        assert isinstance(stream.stream, TLSStream)
        await stream.send_all(b"secret")
        assert await stream.receive_some(10) == b"secret"


async def test_tls_verification_is_on_by_default(tls_port: int) -> None:
    transport = TlsTransport.create(server_hostname="broker.test")  # system CAs only
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer"):
        await transport.connect("127.0.0.1", tls_port)


async def test_tls_checks_the_host_name(tls_port: int, ca: trustme.CA) -> None:
    with ca.cert_pem.tempfile() as cafile:
        transport = TlsTransport.create(cafile=cafile)  # host name 127.0.0.1: not in the cert
    with pytest.raises(ssl.SSLCertVerificationError, match=r"not valid for '127\.0\.0\.1'"):
        await transport.connect("127.0.0.1", tls_port)


async def test_tls_verification_can_be_turned_off(tls_port: int) -> None:
    stream = await TlsTransport.create(verify=False).connect("127.0.0.1", tls_port)
    assert isinstance(stream, AnyioStream)  # the handshake completed despite the unknown CA
    assert isinstance(stream.stream, TLSStream)
    await stream.aclose()
