"""One connection to one broker: the transport seam under it, framing, correlation ids,
requests in flight, timeouts, failure, and the versions it speaks.

Theory of operation
-------------------
**The transport seam.** Every socket trio-kafka opens is opened by a `Transport`: the
selector asks its transport for a stream to `(host, port)` and never touches the OS
itself, so the simulator swaps in a transport of simulated links (and injects its
network faults there) while the rest of the client runs unchanged. Name resolution
(`getaddrinfo`, which the event loop runs in a thread) happens only inside
`TcpTransport`. A stream is anything with trio's three stream methods (`ByteStream`): a
trio stream (the simulator's links, `trio_kafka.testing.MemoryTransport`) is one as it
is, which keeps the simulator on trio's own objects, bit for bit. `TcpTransport`
connects with anyio (`anyio.connect_tcp`), so it runs under trio and asyncio alike, and
`AnyioStream` gives the anyio stream trio's method names. A broken or closed stream
raises one of `STREAM_ERRORS` (trio's, anyio's or the OS's). `TlsTransport` wraps the
inner stream in anyio's `TLSStream`; certificate verification and host name checking
are on by default, and a CA file replaces the system store (a private CA, or trustme in
tests).

**Requests in flight.** Kafka answers the requests of one connection in the order it
received them, so a connection is a FIFO of requests in flight, each one's outcome a
`PendingResponse`. Three parties share it:

- Senders (any task calling `send()` / `request()`): wait for an in-flight slot (a FIFO
  `anyio.Semaphore` of `max_in_flight`), then enter the one writer critical section (an
  `anyio.Lock`, FIFO too), where the correlation id is assigned, the frame is encoded, the
  request joins the in-flight queue and the bytes are written. Doing all four under one
  lock makes wire order equal correlation order equal queue order. The frame is a list of
  buffers (`encode_request_parts`): a Produce request's large record batches are written
  as they are, never copied into the frame; small neighbours are joined into one write.
  A free slot and a free lock are taken without waiting. The write runs shielded
  from the caller's cancellation (a half-written frame would break the stream for every
  other request) but bounded by the request's deadline.
- The reader task owns the receive side: it splits frames (`FrameSplitter`), checks each
  response's correlation id against the head of the queue (a mismatch means the stream can
  no longer be trusted: fail loudly and close) and completes that request (read by the
  generic codec, or by the `reader` its `send()` named: the producer's Produce answers).
- Timeouts: the reader waits for bytes only until the earliest deadline in flight. A
  request past its deadline fails with `RequestTimeoutError` (ambiguous: the broker may
  have processed it) and the connection is closed, because every later response on it
  would come after the one we gave up on (the Java client does the same).

When the connection ends for any reason, each request in flight fails with
`ConnectionLostError` (ambiguous: it was written) and every sender still waiting for a slot
or the lock fails with `BrokerConnectionError` (retriable: it was never written). A request
that expects no response (Produce with acks=0) completes as soon as it is written.

**Versions** (KIP-35, KIP-511). Right after connecting, the selector's setup calls
`negotiate`, which asks ApiVersions and sets `api_versions`: for every API both sides
know, the highest version in both ranges. The client first asks at its own highest
ApiVersions version; a broker that does not know it answers UNSUPPORTED_VERSION with a v0
body listing its ApiVersions range, and the client asks again at the highest version
that range allows (v0 if it lists none). Features (KIP-584) come from the v3+
response's tagged fields: `SupportedFeatures` (what the broker can do: our CAS
extension advertises `expected.offset.cas` there) and `FinalizedFeatures` (what the
cluster has switched on: `transaction.version`, KIP-890); `ApiVersionsInfo` keeps them.
The connection does not authenticate: the selector's setup of a connection does that
(`_selector.py`, with `_sasl.py`).

Logging (`trio_kafka.net`, DEBUG only: none of it asks an operator to act): the
connection's start and end (with why it ended), and each request and response with
the broker's address, the API, its version and the correlation id.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import functools
import logging
import math
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Mapping
from typing import Any, Protocol, cast

import anyio
import anyio.abc
import attrs
import trio
from anyio.streams.tls import TLSStream

from trio_kafka._version import __version__
from trio_kafka.errors import (
    BrokerConnectionError,
    ConfigError,
    ConnectionLostError,
    ErrorCode,
    KafkaError,
    ProtocolError,
    RequestTimeoutError,
    error_for_code,
)
from trio_kafka.net._clock import (
    Clock,
    Event,
    LoopClock,
    Primitives,
    Scope,
    TaskGroup,
    primitives,
)
from trio_kafka.protocol import (
    REQUEST_CLASSES,
    FrameSplitter,
    coalesce,
    decode_response,
    encode_request_parts,
)
from trio_kafka.protocol.messages.api_versions import ApiVersionsRequest

Buffer = bytes | bytearray | memoryview

# -- the transport seam -------------------------------------------------------------------------

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


def _as_anyio(stream: ByteStream) -> anyio.abc.ByteStream:
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
        raw = _as_anyio(await self.inner.connect(host, port))
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


# -- one request's outcome ---------------------------------------------------------------------

_PRODUCE_KEY = 0


def request_name(request_class: type[Any]) -> str:
    """The request's API as its message class is named (`ProduceRequest`), also for a
    class that writes one its own way (the producer's `ProduceFrame`)."""
    return str(REQUEST_CLASSES.get(request_class.API_KEY, request_class).__name__)


#: (frame, version) -> (correlation id, response), as `decode_response` reads it.
ResponseReader = Callable[[bytes, int], tuple[int, Any]]


def expects_response(message: Any) -> bool:
    """False only for a Produce request with acks=0, which the broker never answers."""
    return not (type(message).API_KEY == _PRODUCE_KEY and getattr(message, "acks", -1) == 0)


@attrs.define(eq=False)
class PendingResponse:
    """The outcome of one request: `await pending` (or `await pending.wait()`) gives the
    response or raises; `done()` never blocks."""

    api_key: int
    version: int
    correlation_id: int
    #: When the response must have arrived (the event loop's timescale); inf for none.
    deadline: float
    request_class: type[Any]
    #: False for a Produce with acks=0: done as soon as it is written.
    expects_response: bool = True
    #: Reads the response frame at `version` into (correlation id, response); None for
    #: the generic codec (`decode_response`).
    reader: ResponseReader | None = None
    # Set exactly once, by the reader (response or error) or the closer (error). The
    # connection passes its backend's class (net/_clock.py: `primitives`).
    _event: Event = attrs.field(factory=anyio.Event, alias="event")
    _response: Any = attrs.field(default=None, init=False)
    _error: BaseException | None = attrs.field(default=None, init=False)
    # Called once, with no arguments, right after the outcome is set (`on_done`).
    _callback: Callable[[], None] | None = attrs.field(default=None, init=False)

    def done(self) -> bool:
        return self._event.is_set()

    @property
    def error(self) -> BaseException | None:
        """The error it ended with (None while pending or once answered)."""
        return self._error

    def on_done(self, callback: Callable[[], None]) -> None:
        """Call `callback()` once the outcome is set (now if it already is), in the task
        that sets it (the connection's reader for a response, the writer or the closer
        for an error), before that task goes on: one callback, set once."""
        if self._callback is not None:
            raise RuntimeError("a PendingResponse takes one on_done callback")
        if self._event.is_set():
            callback()
        else:
            self._callback = callback

    def read(self, frame: bytes, version: int) -> Any:
        """The response in `frame` (its reader's, or the generic codec's); raises
        `ProtocolError` for a frame that does not decode."""
        if self.reader is None:
            return decode_response(self.request_class, version, frame)[1]
        return self.reader(frame, version)[1]

    def result(self) -> Any:
        """The response (None for acks=0); raises the error; only once `done()`."""
        if not self._event.is_set():
            raise RuntimeError("the response has not arrived yet")
        if self._error is not None:
            raise self._error
        return self._response

    async def wait(self) -> Any:
        await self._event.wait()
        return self.result()

    def __await__(self) -> Generator[Any, None, Any]:
        return self.wait().__await__()

    def _set_response(self, response: Any) -> None:
        if not self._event.is_set():
            self._response = response
            self._event.set()
            self._call_back()

    def _set_error(self, error: BaseException) -> None:
        if not self._event.is_set():
            self._error = error
            self._event.set()
            self._call_back()

    def _call_back(self) -> None:
        callback = self._callback
        if callback is not None:
            self._callback = None
            callback()

    def __repr__(self) -> str:
        if not self._event.is_set():
            state = "IN-FLIGHT"
        elif self._error is not None:
            state = f"FAILED {type(self._error).__name__}"
        else:
            state = "DONE"
        return (
            f"<PendingResponse [{request_name(self.request_class)} v{self.version}, "
            f"correlation id {self.correlation_id}, {state}]>"
        )


# -- the connection ---------------------------------------------------------------------------

#: Java's request.timeout.ms default (30 s).
DEFAULT_REQUEST_TIMEOUT = 30.0
#: Java's max.in.flight.requests.per.connection default.
DEFAULT_MAX_IN_FLIGHT = 5
#: Largest response frame accepted; a bigger size prefix means a garbled stream.
DEFAULT_MAX_FRAME_SIZE = 128 * 1024 * 1024

logger = logging.getLogger("trio_kafka.net")
_debug = functools.partial(logger.isEnabledFor, logging.DEBUG)


_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_RECEIVE_SIZE = 64 * 1024


class ConnectionState(enum.Enum):
    OPEN = "OPEN"
    CLOSED = "CLOSED"


@attrs.define(eq=False)
class BrokerConnection:
    """One open stream to one broker. Start its reader with `start(nursery)` (or use
    `open_connection`)."""

    stream: ByteStream
    host: str
    port: int
    #: The broker's node id (negative for a bootstrap pseudo-node).
    node_id: int = -1
    client_id: str | None = "trio-kafka"
    clock: Clock = attrs.field(factory=LoopClock)
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    #: API key -> version to use, set by the selector after ApiVersions; consulted when
    #: `send()` gets no explicit version.
    api_versions: dict[int, int] = attrs.field(factory=dict)

    # OPEN until the first failure or close; never goes back.
    state: ConnectionState = attrs.field(default=ConnectionState.OPEN, init=False)
    #: Why the connection closed (None while open, or after a clean `aclose()`).
    close_reason: BaseException | None = attrs.field(default=None, init=False)
    #: clock time of the last byte written or read (the selector's idle reaper reads it).
    last_activity: float = attrs.field(default=0.0, init=False)
    #: Responses read so far, and the first bytes the peer sent (up to 8): what tells a
    #: listener that is not plaintext Kafka (TLS, SASL) from a broker (`_selector.py`).
    answered: int = attrs.field(default=0, init=False)
    first_bytes: bytes = attrs.field(default=b"", init=False)
    #: The largest request written so far, in bytes: a broker closes the connection at a
    #: request above its `socket.request.max.bytes` (`_selector.py` says so).
    largest_request: int = attrs.field(default=0, init=False)
    # Requests written and awaiting a response, oldest first. Owned by the writer section
    # (append) and the reader (popleft); the closer empties it.
    _in_flight: collections.deque[PendingResponse] = attrs.field(
        factory=collections.deque, init=False
    )
    # Senders waiting for a slot or the lock (for repr and for close diagnostics).
    _queued: int = attrs.field(default=0, init=False)
    # The backend's event and scope classes, for what runs per request (`primitives`).
    _primitives: Primitives = attrs.field(init=False)
    _slots: anyio.Semaphore = attrs.field(init=False)
    _write_lock: anyio.Lock = attrs.field(init=False)
    _next_correlation_id: int = attrs.field(default=0, init=False)
    # The reader's wait for bytes; its deadline is the earliest request deadline.
    _receive_scope: Scope | None = attrs.field(default=None, init=False)
    # Cancels the reader when the connection closes.
    _reader_scope: Scope = attrs.field(init=False)
    _closed_event: anyio.Event = attrs.field(init=False)
    # Called once, synchronously, when the connection closes (`on_close`).
    _close_callbacks: list[Callable[[BrokerConnection], None]] = attrs.field(
        factory=list, init=False
    )

    def __attrs_post_init__(self) -> None:
        if self.max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, not {self.max_in_flight}")
        # Made here, after the check: anyio's primitives need a running event loop.
        self._primitives = primitives()
        self._slots = anyio.Semaphore(self.max_in_flight)
        self._write_lock = anyio.Lock()
        self._reader_scope = self._primitives.scope()
        self._closed_event = anyio.Event()
        self.last_activity = self.clock.now()

    # -- public surface -------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self.state is ConnectionState.OPEN

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    @property
    def closed_by_peer(self) -> bool:
        """The other end closed the stream in order (an end of stream, not a reset, a
        timeout, bytes that are not Kafka, or our own close)."""
        return isinstance(self.close_reason, ConnectionLostError)

    @property
    def queued(self) -> int:
        return self._queued

    def start(self, tasks: TaskGroup) -> None:
        """Run the reader task in `tasks` (it ends when the connection closes)."""
        logger.debug("connection to %s:%d open", self.host, self.port)
        tasks.start_soon(self._reader, name=f"kafka-reader-{self.host}:{self.port}")

    async def wait_closed(self) -> None:
        await self._closed_event.wait()

    def on_close(self, callback: Callable[[BrokerConnection], None]) -> None:
        """Call `callback(self)` when the connection closes (at once if it is closed):
        what a task waiting in `wait_closed` would do, without a task per connection.
        It runs inside the close, so it must not block or raise."""
        if self.state is ConnectionState.CLOSED:
            callback(self)
        else:
            self._close_callbacks.append(callback)

    async def send(
        self,
        message: Any,
        *,
        version: int | None = None,
        timeout: float | None = None,
        reader: ResponseReader | None = None,
    ) -> PendingResponse:
        """Write `message` and return its pending response without waiting for it.

        Returns once the request is on the wire (or its write failed: the pending then
        holds the error), so calls made one after another are answered in that order.
        Raises `BrokerConnectionError` (retriable: nothing was written) if the connection
        is closed, or closes while this call waits for an in-flight slot or the lock.
        `reader(frame, version)` reads the response instead of the generic codec (and
        raises `ProtocolError` as it does).
        """
        request_class = type(message)
        if version is None:
            version = self._version_for(request_class)
        timeout = self.request_timeout if timeout is None else timeout
        self._check_open()
        self._queued += 1
        still_queued = True
        registered = False
        try:
            # A free slot and a free lock are taken without a trip through the scheduler
            # (the write below checkpoints anyway); FIFO order holds because neither is
            # free while someone waits for it.
            try:
                self._slots.acquire_nowait()
            except anyio.WouldBlock:
                await self._slots.acquire()
            try:
                try:
                    self._write_lock.acquire_nowait()
                except anyio.WouldBlock:
                    await self._write_lock.acquire()
                try:
                    self._check_open()
                    self._queued -= 1
                    still_queued = False
                    # Nothing was written up to here: failures so far are retriable. From
                    # the registration on the request may reach the broker: ambiguous.
                    pending, frame = self._register(message, version, timeout, reader)
                    registered = True
                    size = sum(map(len, frame))
                    self.largest_request = max(self.largest_request, size)
                    await self._write(frame, pending)
                finally:
                    self._write_lock.release()
            except BaseException:
                if not registered:
                    self._slots.release()
                raise
        finally:
            if still_queued:
                self._queued -= 1
        return pending

    async def request(
        self,
        message: Any,
        *,
        version: int | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Send `message` and wait for its response (None for a Produce with acks=0)."""
        pending = await self.send(message, version=version, timeout=timeout)
        return await pending.wait()

    async def aclose(self) -> None:
        """Close: requests in flight fail with ConnectionLostError, waiting senders with
        BrokerConnectionError."""
        await self._close(None)

    def __repr__(self) -> str:
        node = f"node {self.node_id}" if self.node_id >= 0 else f"bootstrap {self.node_id}"
        return (
            f"<BrokerConnection [{node} {self.host}:{self.port}, {self.state.value}, "
            f"in-flight {len(self._in_flight)}/{self.max_in_flight}, queued {self._queued}]>"
        )

    def _version_for(self, request_class: type[Any]) -> int:
        if not self.api_versions:  # not negotiated (a raw connection): our highest
            return int(request_class.MAX_VERSION)
        version = self.api_versions.get(request_class.API_KEY)
        if version is None:
            raise error_for_code(
                ErrorCode.UNSUPPORTED_VERSION,
                f"{self.host}:{self.port} supports no version of {request_name(request_class)} "
                f"that we speak ({request_class.MIN_VERSION}-{request_class.MAX_VERSION})",
            )
        return version

    # -- the writer critical section --------------------------------------------------------

    def _check_open(self) -> None:
        if self.state is not ConnectionState.OPEN:
            error = BrokerConnectionError(
                f"connection to {self.host}:{self.port} is closed; the request was not sent"
            )
            error.__cause__ = self.close_reason
            raise error

    def _register(
        self, message: Any, version: int, timeout: float, reader: ResponseReader | None
    ) -> tuple[PendingResponse, list[Buffer]]:
        """Assign the correlation id, encode, and queue the request (under the lock)."""
        correlation_id = self._next_correlation_id
        frame = encode_request_parts(
            message, version=version, correlation_id=correlation_id, client_id=self.client_id
        )
        # Correlation ids are int32 on the wire; wrap within the non-negative range.
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        deadline = self.clock.now() + timeout if timeout != math.inf else math.inf
        pending = PendingResponse(
            api_key=type(message).API_KEY,
            version=version,
            correlation_id=correlation_id,
            deadline=deadline,
            request_class=type(message),
            expects_response=expects_response(message),
            reader=reader,
            event=self._primitives.event(),
        )
        if _debug():
            logger.debug(
                "%s:%d: request %s v%d, correlation id %d",
                self.host,
                self.port,
                request_name(pending.request_class).removesuffix("Request"),
                version,
                correlation_id,
            )
        if pending.expects_response:
            self._in_flight.append(pending)
            if self._receive_scope is not None and deadline < self._receive_scope.deadline:
                self._receive_scope.deadline = deadline
        return pending, frame

    async def _write(self, frame: list[Buffer], pending: PendingResponse) -> None:
        failure: BaseException | None = None
        # Shielded: a caller cancelled mid-write would leave half a frame on the stream and
        # break every other request; bounded by the request's own deadline instead.
        with self._primitives.scope(shield=True, deadline=pending.deadline) as scope:
            try:
                if len(frame) == 1:
                    await self.stream.send_all(frame[0])
                else:
                    for chunk in coalesce(frame):
                        await self.stream.send_all(chunk)
            except STREAM_ERRORS as exc:
                failure = exc
        if scope.cancelled_caught:
            timeout = self._timeout_error(pending, "writing it")
            self._resolve(pending, error=timeout)
            await self._close(timeout)
        elif failure is not None:
            lost = self._lost_error(pending, f"failed while writing it ({failure!r})")
            lost.__cause__ = failure
            self._resolve(pending, error=lost)
            await self._close(failure)
        else:
            self.last_activity = self.clock.now()
            if not pending.expects_response:
                self._resolve(pending, response=None)

    # -- the reader task ----------------------------------------------------------------------

    async def _reader(self) -> None:
        splitter = FrameSplitter(max_frame_size=self.max_frame_size)
        with self._reader_scope:
            try:
                # One scope for the whole loop (a scope per receive cost more than the
                # receive): its deadline follows the earliest request deadline in flight
                # (`_register` lowers it, each response read moves it on). Only
                # `receive_some` waits inside it, so it fires only there.
                with self._primitives.scope(deadline=self._earliest_deadline()) as scope:
                    self._receive_scope = scope
                    while data := await self.stream.receive_some(_RECEIVE_SIZE):
                        self.last_activity = self.clock.now()
                        if not self.first_bytes:
                            self.first_bytes = bytes(data[:8])
                        for frame in splitter.feed(data):
                            self._dispatch(frame)
                        deadline = self._earliest_deadline()
                        if deadline != scope.deadline:
                            scope.deadline = deadline
                self._receive_scope = None
                if scope.cancelled_caught:
                    await self._expire()
                    return
                await self._close(
                    ConnectionLostError(f"{self.host}:{self.port} closed the connection")
                )
            except ProtocolError as exc:
                await self._close(exc)
            except STREAM_ERRORS as exc:
                await self._close(exc)

    def _earliest_deadline(self) -> float:
        return min((p.deadline for p in self._in_flight if not p.done()), default=math.inf)

    async def _expire(self) -> None:
        now = self.clock.now()
        expired = [p for p in self._in_flight if not p.done() and p.deadline <= now]
        if not expired and self._in_flight:
            # The deadline fired on the loop's clock; a custom clock may lag it by rounding.
            expired = [self._in_flight[0]]
        first: KafkaError | None = None
        for pending in expired:
            error = self._timeout_error(pending, "waiting for its response")
            first = first or error
            self._resolve(pending, error=error)
        await self._close(first)

    def _dispatch(self, frame: bytes) -> None:
        if len(frame) < 4:
            raise ProtocolError(
                f"response frame of {len(frame)} bytes from {self.host}:{self.port} is too "
                "short to hold a correlation id"
            )
        (correlation_id,) = _INT32.unpack_from(frame, 0)
        if not self._in_flight:
            raise ProtocolError(
                f"response with correlation id {correlation_id} from {self.host}:{self.port} "
                "but no request is in flight"
            )
        pending = self._in_flight[0]
        if correlation_id != pending.correlation_id:
            raise ProtocolError(
                f"response correlation id {correlation_id} from {self.host}:{self.port} does "
                f"not match the oldest request in flight ({request_name(pending.request_class)} "
                f"v{pending.version}, correlation id {pending.correlation_id}): the stream "
                "is out of order or garbled"
            )
        self._in_flight.popleft()
        self.answered += 1
        version = pending.version
        if (
            pending.api_key == ApiVersionsRequest.API_KEY
            and version > 0
            and len(frame) >= 6
            and _INT16.unpack_from(frame, 4)[0] == ErrorCode.UNSUPPORTED_VERSION
        ):
            # KIP-511: a broker that does not know our ApiVersions version answers at v0,
            # with its own range for ApiVersions, so the client can retry.
            version = 0
        try:
            response = pending.read(frame, version)
        except ProtocolError as exc:
            lost = self._lost_error(
                pending, f"answered with a response that does not decode ({exc})"
            )
            lost.__cause__ = exc
            self._resolve(pending, error=lost)
            raise
        if _debug():
            logger.debug(
                "%s:%d: response %s v%d, correlation id %d",
                self.host,
                self.port,
                request_name(pending.request_class).removesuffix("Request"),
                version,
                correlation_id,
            )
        self._resolve(pending, response=response)

    # -- completion and closing ---------------------------------------------------------------

    def _resolve(
        self,
        pending: PendingResponse,
        *,
        response: Any = None,
        error: BaseException | None = None,
    ) -> None:
        """Complete `pending` once and give its in-flight slot back."""
        if pending.done():
            return
        self._slots.release()  # (first: the outcome may call back, see `on_done`)
        if error is not None:
            pending._set_error(error)
        else:
            pending._set_response(response)

    def _timeout_error(self, pending: PendingResponse, doing: str) -> RequestTimeoutError:
        return RequestTimeoutError(
            f"{request_name(pending.request_class)} v{pending.version} (correlation id "
            f"{pending.correlation_id}) to {self.host}:{self.port} timed out {doing}: the "
            "broker may have processed it; the connection is closed"
        )

    def _lost_error(self, pending: PendingResponse, what: str) -> ConnectionLostError:
        return ConnectionLostError(
            f"connection to {self.host}:{self.port} {what} with "
            f"{request_name(pending.request_class)} v{pending.version} (correlation id "
            f"{pending.correlation_id}) in flight: the broker may have processed it"
        )

    async def _close(self, reason: BaseException | None) -> None:
        if self.state is ConnectionState.CLOSED:
            return
        self.state = ConnectionState.CLOSED
        self.close_reason = reason
        lost, self._in_flight = self._in_flight, collections.deque()
        what = "closed" if reason is None else f"was lost ({reason})"
        logger.debug(
            "connection to %s:%d %s, %d request(s) in flight", self.host, self.port, what, len(lost)
        )
        for pending in lost:
            error = self._lost_error(pending, what)
            error.__cause__ = reason
            self._resolve(pending, error=error)
        self._reader_scope.cancel()
        self._closed_event.set()
        callbacks, self._close_callbacks = self._close_callbacks, []
        for callback in callbacks:
            callback(self)
        # Closing a broken stream may complain; there is nothing left to save on it.
        with (
            contextlib.suppress(*STREAM_ERRORS, anyio.BusyResourceError),
            self._primitives.scope() as scope,
        ):
            scope.cancel()  # forceful: never wait on the network
            await self.stream.aclose()


@contextlib.asynccontextmanager
async def open_connection(
    stream: ByteStream, host: str, port: int, **options: Any
) -> AsyncIterator[BrokerConnection]:
    """A connection over `stream` with its reader running; closed on exit."""
    async with primitives().task_group() as tasks:
        connection = BrokerConnection(stream, host, port, **options)
        connection.start(tasks)
        try:
            yield connection
        finally:
            await connection.aclose()


# -- version negotiation ------------------------------------------------------------------------

#: KIP-511: client software name and version, sent with ApiVersions v3+.
CLIENT_SOFTWARE_NAME = "trio-kafka"
CLIENT_SOFTWARE_VERSION = __version__

#: Feature names the producer checks.
CAS_FEATURE = "expected.offset.cas"
TRANSACTION_VERSION_FEATURE = "transaction.version"


@attrs.frozen(slots=True)
class ApiVersionsInfo:
    """What one broker told us in ApiVersions, and the versions we will use with it."""

    #: API key -> (min, max) the broker supports.
    broker_versions: Mapping[int, tuple[int, int]]
    #: API key -> the version to use: the highest in both ranges (absent: no overlap).
    negotiated: Mapping[int, int]
    #: Feature name -> (min_version, max_version) the broker supports.
    supported_features: Mapping[str, tuple[int, int]] = attrs.field(factory=dict)
    #: Feature name -> (min_version_level, max_version_level) finalized in the cluster.
    finalized_features: Mapping[str, tuple[int, int]] = attrs.field(factory=dict)
    finalized_features_epoch: int = -1
    #: The ApiVersions version the broker answered.
    api_versions_version: int = 0

    def version_for(self, api_key: int) -> int | None:
        return self.negotiated.get(api_key)

    def supports_feature(self, name: str, version: int = 1) -> bool:
        """True when the broker's SupportedFeatures range for `name` includes `version`."""
        span = self.supported_features.get(name)
        return span is not None and span[0] <= version <= span[1]

    def finalized_level(self, name: str) -> int | None:
        """The cluster's finalized max version level of `name`, None when not finalized."""
        span = self.finalized_features.get(name)
        return None if span is None else span[1]

    @property
    def supports_cas(self) -> bool:
        return self.supports_feature(CAS_FEATURE, 1)

    @classmethod
    def from_response(cls, response: Any, *, version: int) -> ApiVersionsInfo:
        broker = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        negotiated: dict[int, int] = {}
        for api_key, (low, high) in sorted(broker.items()):
            request_class = REQUEST_CLASSES.get(api_key)
            if request_class is None:
                continue
            best = min(high, request_class.MAX_VERSION)
            if best >= max(low, request_class.MIN_VERSION):
                negotiated[api_key] = best
        return cls(
            broker_versions=broker,
            negotiated=negotiated,
            supported_features={
                f.name: (f.min_version, f.max_version)
                for f in getattr(response, "supported_features", ())
            },
            finalized_features={
                f.name: (f.min_version_level, f.max_version_level)
                for f in getattr(response, "finalized_features", ())
            },
            finalized_features_epoch=getattr(response, "finalized_features_epoch", -1),
            api_versions_version=version,
        )


@attrs.define(eq=False, slots=True)
class _ApiVersionsAnswer:
    """One ApiVersions answer as read (`_read_api_versions`), and what it negotiates
    (worked out by the first `negotiate` that needs it)."""

    response: Any
    info: ApiVersionsInfo | None = None


#: The ApiVersions answers read in this process, by (version, the frame's bytes after
#: the correlation id). Every connection asks, and a cluster's brokers answer alike on
#: every connection, so each distinct answer is decoded and negotiated once, not once
#: per connection (the simulator opens ~13 connections a seed; decoding the answer was
#: ~5% of a seed). The same bytes always read as the same answer: nothing else changes.
#: Bounded: a process that meets more distinct answers than this starts over.
_API_VERSIONS_ANSWERS: dict[tuple[int, bytes], _ApiVersionsAnswer] = {}
_API_VERSIONS_ANSWERS_MAX = 64


def _read_api_versions(frame: bytes, version: int) -> tuple[int, _ApiVersionsAnswer]:
    """A `ResponseReader` for ApiVersions: the generic codec's answer, once per distinct
    answer (`_API_VERSIONS_ANSWERS`); raises `ProtocolError` as the codec does."""
    key = (version, bytes(frame[4:]))
    answer = _API_VERSIONS_ANSWERS.get(key)
    if answer is None:
        correlation_id, response = decode_response(ApiVersionsRequest, version, frame)
        answer = _ApiVersionsAnswer(response)
        if len(_API_VERSIONS_ANSWERS) >= _API_VERSIONS_ANSWERS_MAX:
            _API_VERSIONS_ANSWERS.clear()
        _API_VERSIONS_ANSWERS[key] = answer
        return correlation_id, answer
    (correlation_id,) = _INT32.unpack_from(frame, 0)
    return correlation_id, answer


async def negotiate(connection: BrokerConnection) -> ApiVersionsInfo:
    """Ask `connection`'s broker for its versions and set `connection.api_versions`."""
    version = ApiVersionsRequest.MAX_VERSION
    request = ApiVersionsRequest(
        client_software_name=CLIENT_SOFTWARE_NAME,
        client_software_version=CLIENT_SOFTWARE_VERSION,
    )
    answer: _ApiVersionsAnswer = await (
        await connection.send(request, version=version, reader=_read_api_versions)
    )
    response = answer.response
    if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
        theirs = [
            k.max_version for k in response.api_keys if k.api_key == ApiVersionsRequest.API_KEY
        ]
        version = max(0, min(ApiVersionsRequest.MAX_VERSION, theirs[0])) if theirs else 0
        answer = await (await connection.send(request, version=version, reader=_read_api_versions))
        response = answer.response
    if response.error_code != ErrorCode.NONE:
        raise error_for_code(
            response.error_code,
            f"{connection.host}:{connection.port} refused ApiVersions v{version}",
        )
    info = answer.info
    if info is None:
        info = answer.info = ApiVersionsInfo.from_response(response, version=version)
    connection.api_versions = dict(info.negotiated)
    return info
