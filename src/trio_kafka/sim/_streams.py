"""The pieces of a simulated connection: links, one-way pipes, and the stream at each end.

Theory of operation: see `network.py`. A `Pipe` is one direction of a `Connection`: the
writer's `SimStream` appends chunks (each with its delivery time and what happens when it
arrives), the network's delivery timer for that pipe moves due chunks into `readable`,
and the reader's `SimStream` consumes `readable`. Every waiter on a pipe (reader, writer)
waits on the pipe (`Pipe.wait`) and re-checks its condition when woken, so a state change
only has to `Pipe.wake_all`. (A pipe keeps its waiters itself, as a `ParkingLot` would,
in the order they came, and wakes them in that order: the same scheduling, without the
lot's generator and calls, on the path of every chunk.) Decisions (faults, latencies)
are the network's (`_delivery.py`); this module only keeps state and implements the
`trio.abc.HalfCloseableStream` contract.
"""

from __future__ import annotations

import enum
import operator
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio
import trio.lowlevel

if TYPE_CHECKING:
    from trio_kafka.sim._timers import Timer

Handler = Callable[[trio.abc.Stream], Awaitable[None]]
Address = tuple[str, int]

C2S = "c2s"
S2C = "s2c"

_current_task = trio.lowlevel.current_task
_reschedule = trio.lowlevel.reschedule
_wait_task_rescheduled = trio.lowlevel.wait_task_rescheduled
_ABORT_SUCCEEDED = trio.lowlevel.Abort.SUCCEEDED


class Action(enum.Enum):
    """What happens when a chunk reaches the head of its pipe at its delivery time."""

    DELIVER = "deliver"
    EOF = "eof"
    RESET = "reset"
    BLACKHOLE = "blackhole"
    ZOMBIE = "zombie"


@attrs.define(eq=False, slots=True)
class Chunk:
    deliver_at: float
    data: bytes
    action: Action = Action.DELIVER
    #: The write number that decided the action (keys the fault's parameters).
    write_no: int = -1


@attrs.define(eq=False)
class Link:
    """A server address in one direction; clogs act on links, shared by connections."""

    address: Address
    direction: str
    #: Number of clogs holding this link (episodes may overlap); delivers when zero.
    clogs: int = 0
    #: Connects waiting for the link to unclog.
    lot: trio.lowlevel.ParkingLot = attrs.field(factory=trio.lowlevel.ParkingLot)
    #: Pipes whose delivery stopped at the clog, by (connection serial, direction), in the
    #: order they stopped: the unclog re-arms their timers. (Connection, Pipe) values.
    held: dict[tuple[int, str], tuple[Any, Any]] = attrs.field(factory=dict)


@attrs.define(eq=False)
class Pipe:
    """One direction of a connection. The writer's stream appends chunks, the network's
    delivery timer moves them to `readable`, the reader's stream consumes `readable`."""

    direction: str
    link: Link
    in_flight: deque[Chunk] = attrs.field(factory=deque)
    readable: bytearray = attrs.field(factory=bytearray)
    #: Bytes in flight or unread: the writer blocks when this reaches the window.
    unacked: int = 0
    #: Delivery time of the last chunk queued (chunks never overtake each other).
    last_deliver_at: float = 0.0
    chunks: int = 0
    writes: int = 0
    #: The writer sent EOF (send_eof or aclose): no more writes.
    writer_done: bool = False
    #: The EOF reached the reader: after `readable`, receive_some returns b"".
    eof_received: bool = False
    #: The reader closed its end: writes raise BrokenResourceError, bytes are dropped.
    reader_closed: bool = False
    #: The connection was reset: everything dropped, both ends broken.
    broken: bool = False
    #: Nothing is delivered any more, nothing errors.
    black_holed: bool = False
    #: Writes are accepted and dropped (the reader is a zombie request's vanished client).
    discard: bool = False
    #: The tasks in `wait` (the reader, the writer), in the order they came; woken when
    #: bytes arrive or are consumed and on every state change.
    waiters: dict[trio.lowlevel.Task, None] = attrs.field(factory=dict)
    #: The network's timer that delivers the head chunk when it is due (None: nothing
    #: queued, or delivery stopped by a clog, a black hole or the end of the pipe).
    timer: Timer | None = None
    #: The text of the key (connection key, direction) that this pipe's per-chunk and
    #: per-write draws start with (`rand.key_head`; set by the network).
    key_head: str = ""

    def wake_all(self) -> None:
        """Wake every task in `wait`, in the order they came (`ParkingLot.unpark_all`)."""
        waiters = self.waiters
        if waiters:
            self.waiters = {}
            for task in waiters:
                _reschedule(task)

    async def wait(self) -> None:
        """Wait until `wake_all` (cancellable; `ParkingLot.park`)."""
        task = _current_task()
        self.waiters[task] = None

        def abort(_: object) -> trio.lowlevel.Abort:
            # Still waiting, so still in `waiters` (`wake_all` empties it as it wakes).
            del self.waiters[task]
            return _ABORT_SUCCEEDED

        await _wait_task_rescheduled(abort)

    @property
    def finished(self) -> bool:
        # writer_done with nothing in flight: the EOF was never queued (reset, discard).
        return (
            self.broken
            or self.eof_received
            or self.reader_closed
            or (self.writer_done and not self.in_flight)
        )

    def drop(self) -> None:
        self.in_flight.clear()
        self.readable.clear()
        self.unacked = 0
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


@attrs.define(eq=False)
class Connection:
    serial: int
    #: (client name, host, port, attempt number to that address): the stable fault key.
    key: tuple[str, str, int, int]
    c2s: Pipe
    s2c: Pipe
    client: SimStream = attrs.field(init=False)
    server: SimStream = attrs.field(init=False)
    black_holed: bool = False
    #: Set when the connection reset, for the trace and `reset_connections`.
    reset: bool = False
    #: The text of `key` that per-write draws start with (`rand.key_head`).
    key_head: str = ""

    @property
    def address(self) -> Address:
        return (self.key[1], self.key[2])

    def pipe(self, direction: str) -> Pipe:
        return self.c2s if direction == C2S else self.s2c


class StreamNetwork(Protocol):
    """What a `SimStream` asks of the network that made it (`_delivery.Delivery`, the
    network's pipes), so that this module does not import the modules that import it."""

    @property
    def window(self) -> int:
        """Chunks a writer may have unacknowledged before `send_all` waits."""
        ...

    async def write(self, conn: Connection, pipe: Pipe, data: bytes, writer: SimStream) -> None:
        """Queue `data` on `pipe` (the network decides its delivery time and fate)."""

    def queue_eof(self, conn: Connection, pipe: Pipe) -> None:
        """Queue the end of `pipe` behind its data."""

    def stream_closed(self, conn: Connection, stream: SimStream) -> None:
        """`stream` was closed by its owner."""


class SimStream(trio.abc.HalfCloseableStream):
    """One end of a simulated connection."""

    def __init__(self, net: StreamNetwork, conn: Connection, end: str) -> None:
        self._net = net
        self._conn = conn
        #: "client" or "server".
        self.end = end
        self._out = conn.c2s if end == "client" else conn.s2c
        self._in = conn.s2c if end == "client" else conn.c2s
        #: This end was closed locally (ClosedResourceError from now on).
        self.closed = False
        #: This end saw a reset (BrokenResourceError from now on).
        self.broken = False
        self._sending = False
        self._receiving = False

    def __repr__(self) -> str:
        state = "closed" if self.closed else "broken" if self.broken else "open"
        return f"<SimStream {self.end} of c{self._conn.serial} {self._conn.key} {state}>"

    def check_send(self) -> None:
        """Raise why this end cannot send now (closed, reset, its half closed, or the
        peer gone): on each `send_all`, and again by the network (_delivery.py) after a
        write waited for room in the window, during which any of these may happen."""
        if self.closed:
            raise trio.ClosedResourceError("this end of the connection is closed")
        if self.broken or self._out.broken:
            raise trio.BrokenResourceError("connection reset")
        if self._out.writer_done:
            raise trio.ClosedResourceError("send_eof was called on this end")
        if self._out.reader_closed:
            raise trio.BrokenResourceError("the peer closed the connection")

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._sending:
            raise trio.BusyResourceError("another task is sending on this stream")
        self._sending = True
        try:
            await trio.lowlevel.checkpoint()
            if self._out.discard and not self.closed:
                # A zombie request's server: its client is gone, nobody will ever read
                # this, and the server cannot tell.
                return
            self.check_send()
            payload = bytes(data)
            if not payload:
                return
            await self._net.write(self._conn, self._out, payload, self)
        finally:
            self._sending = False

    async def wait_send_all_might_not_block(self) -> None:
        if self._sending:
            raise trio.BusyResourceError("another task is sending on this stream")
        self._sending = True
        try:
            await trio.lowlevel.checkpoint()
            while True:
                if self.closed:
                    raise trio.ClosedResourceError("this end of the connection is closed")
                out = self._out
                if self.broken or out.finished or out.unacked < self._net.window:
                    return
                await out.wait()
        finally:
            self._sending = False

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if max_bytes is not None:
            max_bytes = operator.index(max_bytes)
            if max_bytes < 1:
                raise ValueError("max_bytes must be >= 1")
        if self._receiving:
            raise trio.BusyResourceError("another task is receiving on this stream")
        self._receiving = True
        try:
            # A checkpoint either way: parking below is one, else the shielded one.
            await trio.lowlevel.checkpoint_if_cancelled()
            parked = False
            inp = self._in
            while True:
                if self.closed:
                    raise trio.ClosedResourceError("this end of the connection is closed")
                if self.broken or inp.broken:
                    raise trio.BrokenResourceError("connection reset")
                readable = inp.readable
                if readable:
                    if max_bytes is None or max_bytes >= len(readable):
                        data = bytes(readable)
                        readable.clear()
                    else:
                        data = bytes(readable[:max_bytes])
                        del readable[:max_bytes]
                    inp.unacked -= len(data)
                    if inp.waiters:  # a writer waits for room
                        inp.wake_all()
                    if not parked:
                        await trio.lowlevel.cancel_shielded_checkpoint()
                    return data
                if inp.eof_received:
                    if not parked:
                        await trio.lowlevel.cancel_shielded_checkpoint()
                    return b""
                parked = True
                await inp.wait()
        finally:
            self._receiving = False

    async def send_eof(self) -> None:
        if self.closed:
            raise trio.ClosedResourceError("this end of the connection is closed")
        await trio.lowlevel.checkpoint()
        self._net.queue_eof(self._conn, self._out)

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            self._net.stream_closed(self._conn, self)
        await trio.lowlevel.checkpoint()
