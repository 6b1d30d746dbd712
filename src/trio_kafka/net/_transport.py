"""How the I/O layer opens byte streams: the `Transport` seam.

Every socket trio-kafka opens is opened here. The selector asks its transport for a stream
to `(host, port)` and never touches the OS itself, so the simulator swaps in a transport of
simulated links and the rest of the client runs unchanged. Name resolution
(`getaddrinfo`, which trio runs in a thread) happens only inside `TcpTransport`.

`TlsTransport` wraps a TCP stream in `trio.SSLStream`. Certificate verification and host
name checking are on by default; a CA file replaces the system store (a private CA, or
trustme in tests).
"""

from __future__ import annotations

import ssl
from typing import Protocol

import attrs
import trio


class Transport(Protocol):
    """Opens a byte stream to a broker. Raises `OSError` (or `trio.BrokenResourceError`
    wrapping one) when the broker cannot be reached."""

    async def connect(self, host: str, port: int) -> trio.abc.Stream: ...


@attrs.frozen(slots=True)
class TcpTransport:
    """Plain TCP through `trio.open_tcp_stream` (TCP_NODELAY is trio's default)."""

    #: Happy eyeballs (RFC 8305): start the next address after this many seconds.
    happy_eyeballs_delay: float = 0.25

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        return await trio.open_tcp_stream(
            host, port, happy_eyeballs_delay=self.happy_eyeballs_delay
        )


def tls_context(
    *,
    cafile: str | None = None,
    verify: bool = True,
    certfile: str | None = None,
    keyfile: str | None = None,
) -> ssl.SSLContext:
    """A client TLS context: verification on unless `verify=False`; `cafile` replaces the
    system trust store; `certfile`/`keyfile` give a client certificate (mutual TLS)."""
    context = ssl.create_default_context(cafile=cafile)
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if certfile is not None:
        context.load_cert_chain(certfile, keyfile)
    return context


@attrs.frozen(slots=True)
class TlsTransport:
    """TLS over an inner transport (TCP by default), handshake done before returning."""

    ssl_context: ssl.SSLContext = attrs.field(factory=tls_context)
    #: The name the certificate must carry; None means the host connected to.
    server_hostname: str | None = None
    inner: Transport = attrs.field(factory=TcpTransport)

    @classmethod
    def create(
        cls,
        *,
        cafile: str | None = None,
        verify: bool = True,
        certfile: str | None = None,
        keyfile: str | None = None,
        server_hostname: str | None = None,
        inner: Transport | None = None,
    ) -> TlsTransport:
        context = tls_context(cafile=cafile, verify=verify, certfile=certfile, keyfile=keyfile)
        return cls(
            ssl_context=context,
            server_hostname=server_hostname,
            inner=inner if inner is not None else TcpTransport(),
        )

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        raw = await self.inner.connect(host, port)
        stream = trio.SSLStream(
            raw,
            self.ssl_context,
            server_hostname=self.server_hostname or host,
            # Kafka brokers close without close_notify; we never read to EOF to learn the
            # end of a message (frames are length-prefixed), so truncation attacks are moot.
            https_compatible=True,
        )
        try:
            await stream.do_handshake()
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        return stream
