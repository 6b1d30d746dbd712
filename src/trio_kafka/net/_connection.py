"""One connection to one broker: correlation ids, pipelining, timeouts, failure.

Theory of operation
-------------------
Kafka answers the requests of one connection in the order it received them, so a
connection is a FIFO of requests in flight. Three parties share it:

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

The connection does not negotiate versions or authenticate: the selector does that with
`request()` right after connecting and then sets `api_versions`.

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
import struct
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import attrs

from trio_kafka.errors import (
    BrokerConnectionError,
    ConnectionLostError,
    ErrorCode,
    KafkaError,
    ProtocolError,
    RequestTimeoutError,
    error_for_code,
)
from trio_kafka.net._clock import Clock, LoopClock, Primitives, TaskGroup, primitives
from trio_kafka.net._pending import (
    PendingResponse,
    ResponseReader,
    expects_response,
    request_name,
)
from trio_kafka.net._transport import STREAM_ERRORS, ByteStream
from trio_kafka.protocol import FrameSplitter, coalesce, encode_request_parts

#: Java's request.timeout.ms default (30 s).
DEFAULT_REQUEST_TIMEOUT = 30.0
#: Java's max.in.flight.requests.per.connection default.
DEFAULT_MAX_IN_FLIGHT = 5
#: Largest response frame accepted; a bigger size prefix means a garbled stream.
DEFAULT_MAX_FRAME_SIZE = 128 * 1024 * 1024

_API_VERSIONS_KEY = 18
logger = logging.getLogger("trio_kafka.net")
_debug = functools.partial(logger.isEnabledFor, logging.DEBUG)


_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_RECEIVE_SIZE = 64 * 1024

Buffer = bytes | bytearray | memoryview


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
    #: listener that is not plaintext Kafka (TLS, SASL) from a broker (`_node_setup.py`).
    answered: int = attrs.field(default=0, init=False)
    first_bytes: bytes = attrs.field(default=b"", init=False)
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
    _receive_scope: anyio.CancelScope | None = attrs.field(default=None, init=False)
    # Cancels the reader when the connection closes.
    _reader_scope: anyio.CancelScope = attrs.field(init=False)
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
        self._reader_scope = anyio.CancelScope()
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
                with anyio.CancelScope(deadline=self._earliest_deadline()) as scope:
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
            pending.api_key == _API_VERSIONS_KEY
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
        if error is not None:
            pending._set_error(error)
        else:
            pending._set_response(response)
        self._slots.release()

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
        with contextlib.suppress(*STREAM_ERRORS, anyio.BusyResourceError):
            with anyio.CancelScope() as scope:
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
