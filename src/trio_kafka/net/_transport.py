"""How the I/O layer opens byte streams: the `Transport` seam.

Every socket trio-kafka opens is opened here. The selector asks its transport for a stream
to `(host, port)` and never touches the OS itself, so the simulator swaps in a transport of
simulated links and the rest of the client runs unchanged. Name resolution
(`getaddrinfo`, which the event loop runs in a thread) happens only inside
`TcpTransport`.

A stream is anything with trio's three stream methods (`ByteStream`): a trio stream (the
simulator's links, `trio_kafka.testing.MemoryTransport`) is one as it is, which keeps
the simulator on trio's own objects, bit for bit. `TcpTransport` connects with anyio
(`anyio.connect_tcp`), so it runs under trio and asyncio alike, and `AnyioStream` gives
the anyio stream trio's method names. A broken or closed stream raises one of
`STREAM_ERRORS` (trio's, anyio's or the OS's).

`TlsTransport` wraps the inner stream in anyio's `TLSStream`. Certificate verification
and host name checking are on by default; a CA file replaces the system store (a private
CA, or trustme in tests).
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from typing import Protocol, cast

import anyio
import anyio.abc
import attrs
import trio
from anyio.streams.tls import TLSStream

from trio_kafka.errors import ConfigError

Buffer = bytes | bytearray | memoryview

#: What a broken or closed stream raises, whichever library made it.
STREAM_ERRORS: tuple[type[BaseException], ...] = (
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    OSError,
)


class ByteStream(Protocol):
    """A bidirectional byte stream with trio's method names (`trio.abc.Stream` is one).
    `receive_some` returns b"" at the end of the stream."""

    def send_all(self, data: Buffer, /) -> Awaitable[None]: ...

    async def receive_some(self, max_bytes: int, /) -> bytes | bytearray: ...

    async def aclose(self) -> None: ...


class Transport(Protocol):
    """Opens a byte stream to a broker. Raises `OSError` (or a `BrokenResourceError`
    wrapping one) when the broker cannot be reached."""

    async def connect(self, host: str, port: int) -> ByteStream: ...


class AnyioStream:
    """An anyio byte stream as a `ByteStream` (anyio's `receive` raises `EndOfStream` at
    the end; this returns b"", as trio's `receive_some` does)."""

    __slots__ = ("send_all", "stream")

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        # anyio's streams take any buffer (they write it through a memoryview or the
        # transport's write), though typed as bytes: bound once, no wrapper per write.
        self.send_all: Callable[[Buffer], Awaitable[None]] = cast(
            "Callable[[Buffer], Awaitable[None]]", stream.send
        )

    async def receive_some(self, max_bytes: int, /) -> bytes | bytearray:
        try:
            return await self.stream.receive(max_bytes)
        except anyio.EndOfStream:
            return b""

    async def aclose(self) -> None:
        await self.stream.aclose()

    async def __aenter__(self) -> AnyioStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stream.aclose()


class _AnyioView(anyio.abc.ByteStream):
    """A `ByteStream` that is not an anyio stream (a trio one), seen as an anyio stream:
    what `TLSStream` wraps."""

    def __init__(self, stream: ByteStream) -> None:
        self._stream = stream

    async def send(self, item: bytes) -> None:
        await self._stream.send_all(item)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        data = await self._stream.receive_some(max_bytes)
        if not data:
            raise anyio.EndOfStream
        return bytes(data)

    async def send_eof(self) -> None:
        raise NotImplementedError("this stream cannot half-close")

    async def aclose(self) -> None:
        await self._stream.aclose()


def as_anyio(stream: ByteStream) -> anyio.abc.ByteStream:
    """`stream` as an anyio byte stream (the one inside an `AnyioStream`)."""
    if isinstance(stream, AnyioStream):
        return stream.stream
    return _AnyioView(stream)


@attrs.frozen(slots=True)
class TcpTransport:
    """Plain TCP through `anyio.connect_tcp` (TCP_NODELAY on, as anyio sets it)."""

    #: Happy eyeballs (RFC 8305): start the next address after this many seconds.
    happy_eyeballs_delay: float = 0.25

    async def connect(self, host: str, port: int) -> ByteStream:
        stream = await anyio.connect_tcp(host, port, happy_eyeballs_delay=self.happy_eyeballs_delay)
        return AnyioStream(stream)


def tls_context(
    *,
    cafile: str | None = None,
    verify: bool = True,
    certfile: str | None = None,
    keyfile: str | None = None,
) -> ssl.SSLContext:
    """A client TLS context: verification on unless `verify=False`; `cafile` replaces the
    system trust store; `certfile`/`keyfile` give a client certificate (mutual TLS)."""
    try:
        context = ssl.create_default_context(cafile=cafile)
    except (OSError, ssl.SSLError) as exc:
        # FileNotFoundError said "[Errno 2] No such file or directory", naming no file.
        raise ConfigError(f"TLS: cannot load the CA file cafile={cafile!r}: {exc}") from exc
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if certfile is not None:
        try:
            context.load_cert_chain(certfile, keyfile)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"TLS: cannot load the client certificate certfile={certfile!r}, "
                f"keyfile={keyfile!r}: {exc}"
            ) from exc
    return context


def trust_of(cafile: str | None) -> str:
    """How a verification error names the trusted CAs of `tls_context(cafile=...)`."""
    if cafile is None:
        return "the system trust store; pass ssl_cafile= for a private CA"
    return f"ssl_cafile={cafile!r}"


def _not_trusted(exc: ssl.SSLCertVerificationError, trust: str) -> ssl.SSLCertVerificationError:
    """`exc` saying what failed (OpenSSL's reason alone, "unable to get local issuer
    certificate", does not say a certificate was refused) and which CAs were tried."""
    hint = f" (is the CA right? {trust})" if trust else ""
    message = f"certificate verify failed: {exc.verify_message}{hint}"
    error = ssl.SSLCertVerificationError(exc.errno, message)
    error.verify_code = exc.verify_code
    error.verify_message = message
    return error


@attrs.frozen(slots=True)
class TlsTransport:
    """TLS over an inner transport (TCP by default), handshake done before returning."""

    ssl_context: ssl.SSLContext = attrs.field(factory=tls_context)
    #: The name the certificate must carry; None means the host connected to.
    server_hostname: str | None = None
    inner: Transport = attrs.field(factory=TcpTransport)
    #: Where the trusted CAs come from, for the error when a certificate does not verify
    #: ("ssl_cafile='ca.pem'"); empty when unknown (a context made elsewhere).
    trust: str = ""

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
            trust=trust_of(cafile),
        )

    async def connect(self, host: str, port: int) -> ByteStream:
        raw = as_anyio(await self.inner.connect(host, port))
        try:
            stream = await TLSStream.wrap(
                raw,
                hostname=self.server_hostname or host,
                ssl_context=self.ssl_context,
                # Kafka brokers close without close_notify; we never read to EOF to learn
                # the end of a message (frames are length-prefixed), so truncation attacks
                # are moot.
                standard_compatible=False,
            )
        except ssl.SSLCertVerificationError as exc:
            await anyio.aclose_forcefully(raw)
            raise _not_trusted(exc, self.trust) from None
        except anyio.EndOfStream:
            # It escaped as a bare EndOfStream (no message, no address).
            await anyio.aclose_forcefully(raw)
            raise ConnectionResetError(
                f"{host}:{port} closed the connection during the TLS handshake: is it a "
                "TLS listener? (a plaintext one closes on a TLS hello; use "
                "security_protocol='PLAINTEXT' or the broker's TLS port)"
            ) from None
        except BaseException:
            await anyio.aclose_forcefully(raw)
            raise
        return AnyioStream(stream)
