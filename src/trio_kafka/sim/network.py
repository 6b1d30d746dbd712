"""A simulated TCP network for seeded runs: servers at addresses, connections with faults.

Theory of operation. A `SimNetwork` maps (host, port) to a server handler, `async def
handler(stream)`, and hands out transports (`network.transport(name)`) whose `connect`
opens a simulated connection: two one-way pipes (client->server "c2s", server->client
"s2c") and a stream object at each end. A write is cut into chunks (segments, or random
pieces when fault FRAGMENTATION fires); each chunk gets a delivery time `max(previous
chunk's, now + latency) + size / bandwidth`, so a pipe never reorders, and a pump task per
pipe moves chunks, at their time, into the reader's buffer. The network owns a nursery
(`open_sim_network`) in which pumps, server handlers and fault timers run.

TCP semantics hold within a connection: no loss, no reordering, no duplication. Faults act
on whole connections, each decided by `FaultDecider` at a stable place:

- on a client write (key: connection key, write number): RESET_BEFORE_APPLY marks its first
  chunk so that when it would arrive, the connection resets instead (the server never sees
  it); ZOMBIE_REQUEST marks it so that when it would arrive, the client's end breaks at once
  but the write reaches the server `zombie_delay` later (the server applies a request the
  client has given up on, typically after the client reconnected), followed by EOF;
- on a server write (a response): RESET_AFTER_APPLY resets the connection when the response
  would arrive; BLACKHOLE_AFTER_APPLY silences both directions from then on: nothing
  errors, writes block once the window fills, and the client learns of it only from its own
  timeout. When either end closes a black-holed connection, the other sees a reset
  `blackhole_server_reset` later (keepalive, coarsely);
- per chunk: LATENCY adds a heavy-tailed spike;
- per connect attempt (key: client name, host, port, attempt number to that address):
  CONNECT_FAILURE refuses (`ConnectionRefusedError`, an OSError) or hangs until the
  caller's timeout;
- CLOG: a swizzler task offers an episode every ~`clog_interval` seconds of the fault phase
  (episode k at a time fixed by k alone); an episode clogs a random subset of links (a link
  is a server address and a direction, shared by all its connections) one by one, holds,
  then unclogs them in another random order. A clogged link delivers nothing; chunks keep
  their times, so after the unclog everything due arrives at once, in order.

A reset breaks both ends: their pending and later `send_all` / `receive_some` raise
`trio.BrokenResourceError`, and undelivered bytes are dropped (as an RST does). An orderly
`aclose` (or `send_eof`) queues an EOF behind the bytes already written, so the peer reads
them, then b"". Writing to a peer that has closed raises `trio.BrokenResourceError`.

Determinism: every decision is a `Draws` lookup keyed by connection key, direction, write
or chunk number; connections are kept in dicts in creation order; nothing reads wall time,
`id()` or `hash()`. `trace` records (virtual time, event) for the determinism check.
"""

from __future__ import annotations

import enum
import errno
import operator
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import attrs
import trio
import trio.lowlevel

from trio_kafka.sim.faults import FaultDecider, FaultKind, FaultPlan, Profile
from trio_kafka.sim.rand import Draws

Handler = Callable[[trio.abc.Stream], Awaitable[None]]
Address = tuple[str, int]

C2S = "c2s"
S2C = "s2c"


class _Action(enum.Enum):
    """What happens when a chunk reaches the head of its pipe at its delivery time."""

    DELIVER = "deliver"
    EOF = "eof"
    RESET = "reset"
    BLACKHOLE = "blackhole"
    ZOMBIE = "zombie"


@attrs.define(eq=False, slots=True)
class _Chunk:
    deliver_at: float
    data: bytes
    action: _Action = _Action.DELIVER
    #: The write number that decided the action (keys the fault's parameters).
    write_no: int = -1


@attrs.define(eq=False)
class _Link:
    """A server address in one direction; clogs act on links, shared by connections."""

    address: Address
    direction: str
    #: Number of clogs holding this link (episodes may overlap); delivers when zero.
    clogs: int = 0
    lot: trio.lowlevel.ParkingLot = attrs.field(factory=trio.lowlevel.ParkingLot)


@attrs.define(eq=False)
class _Pipe:
    """One direction of a connection. The writer's stream appends chunks, the pump moves
    them to `readable`, the reader's stream consumes `readable`."""

    direction: str
    link: _Link
    in_flight: deque[_Chunk] = attrs.field(factory=deque)
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
    #: Waiters on this pipe: its pump, the reader, the writer. Woken on every change.
    lot: trio.lowlevel.ParkingLot = attrs.field(factory=trio.lowlevel.ParkingLot)

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


@attrs.define(eq=False)
class _Connection:
    serial: int
    #: (client name, host, port, attempt number to that address): the stable fault key.
    key: tuple[str, str, int, int]
    c2s: _Pipe
    s2c: _Pipe
    client: SimStream = attrs.field(init=False)
    server: SimStream = attrs.field(init=False)
    black_holed: bool = False
    #: Set when the connection reset, for the trace and `reset_connections`.
    reset: bool = False

    @property
    def address(self) -> Address:
        return (self.key[1], self.key[2])

    def pipe(self, direction: str) -> _Pipe:
        return self.c2s if direction == C2S else self.s2c


class SimStream(trio.abc.HalfCloseableStream):
    """One end of a simulated connection."""

    def __init__(self, net: SimNetwork, conn: _Connection, end: str) -> None:
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

    def _check_send(self) -> None:
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
            self._check_send()
            payload = bytes(data)
            if not payload:
                return
            await self._net._write(self._conn, self._out, payload, self)
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
                if self.broken or out.finished or out.unacked < self._net.profile.window:
                    return
                await out.lot.park()
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
            await trio.lowlevel.checkpoint()
            inp = self._in
            while True:
                if self.closed:
                    raise trio.ClosedResourceError("this end of the connection is closed")
                if self.broken or inp.broken:
                    raise trio.BrokenResourceError("connection reset")
                if inp.readable:
                    n = len(inp.readable) if max_bytes is None else max_bytes
                    data = bytes(inp.readable[:n])
                    del inp.readable[:n]
                    inp.unacked -= len(data)
                    inp.lot.unpark_all()
                    return data
                if inp.eof_received:
                    return b""
                await inp.lot.park()
        finally:
            self._receiving = False

    async def send_eof(self) -> None:
        if self.closed:
            raise trio.ClosedResourceError("this end of the connection is closed")
        await trio.lowlevel.checkpoint()
        self._net._queue_eof(self._conn, self._out)

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            self._net._closed(self._conn, self)
        await trio.lowlevel.checkpoint()


@attrs.define(eq=False)
class SimTransport:
    """A `trio_kafka.net.Transport` whose connections are simulated. `name` tells clients
    apart in fault keys (two producers in one run)."""

    network: SimNetwork
    name: str = "client"

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        return await self.network.connect(host, port, client=self.name)


class SimNetwork:
    """Servers by address, simulated connections, and the network-level faults."""

    def __init__(
        self,
        draws: Draws,
        profile: Profile,
        *,
        plan: FaultPlan | None = None,
        decider: FaultDecider | None = None,
        trace: bool = True,
    ) -> None:
        self.draws = draws
        self.profile = profile
        if decider is None:
            decider = FaultDecider(plan or FaultPlan.swarm(draws, profile), draws)
        #: Shared with the broker's and the client's fault hooks: one log per run.
        self.decider = decider
        #: (virtual time, event) in the order things happened, or None when off.
        self.trace: list[tuple[float, str]] | None = [] if trace else None
        self._servers: dict[Address, Handler] = {}
        self._links: dict[tuple[str, int, str], _Link] = {}
        #: Live connections by serial (creation order, so iteration is deterministic).
        self._connections: dict[int, _Connection] = {}
        self._serial = 0
        #: Connect attempts so far per (client name, host, port).
        self._attempts: dict[tuple[str, str, int], int] = {}
        self._nursery: trio.Nursery | None = None

    @property
    def plan(self) -> FaultPlan:
        return self.decider.plan

    def __repr__(self) -> str:
        return (
            f"<SimNetwork seed={self.draws.seed} servers={sorted(self._servers)} "
            f"connections={len(self._connections)} faults={len(self.decider.log)}>"
        )

    def transport(self, name: str = "client") -> SimTransport:
        return SimTransport(self, name)

    # -- servers ------------------------------------------------------------------------

    def add_server(self, host: str, port: int, handler: Handler) -> None:
        """Serve `handler(stream)` at (host, port), one task per accepted connection."""
        self._servers[(host, port)] = handler
        self._note(f"server up {host}:{port}")

    def remove_server(self, host: str, port: int, *, reset: bool = True) -> None:
        """Stop accepting at (host, port) (connects are refused); reset its connections."""
        self._servers.pop((host, port), None)
        self._note(f"server down {host}:{port}")
        if reset:
            self.reset_connections(host, port)

    def reset_connections(self, host: str, port: int) -> int:
        """Reset every live connection to (host, port), e.g. a broker crash. Returns how many."""
        victims = [c for c in self._connections.values() if c.address == (host, port)]
        for conn in victims:
            self._reset(conn, "server reset")
        return len(victims)

    def server_addresses(self) -> list[Address]:
        return sorted(self._servers)

    # -- links and clogs ----------------------------------------------------------------

    def _link(self, address: Address, direction: str) -> _Link:
        key = (address[0], address[1], direction)
        link = self._links.get(key)
        if link is None:
            link = self._links[key] = _Link(address, direction)
        return link

    def clog(self, host: str, port: int, direction: str | None = None) -> None:
        """Pause delivery on the link(s) to (host, port); nests with other clogs."""
        for d in (C2S, S2C) if direction is None else (direction,):
            self._link((host, port), d).clogs += 1
            self._note(f"clog {host}:{port} {d}")

    def unclog(self, host: str, port: int, direction: str | None = None) -> None:
        for d in (C2S, S2C) if direction is None else (direction,):
            link = self._link((host, port), d)
            link.clogs = max(0, link.clogs - 1)
            self._note(f"unclog {host}:{port} {d}")
            if not link.clogs:
                link.lot.unpark_all()

    # -- connecting ---------------------------------------------------------------------

    async def connect(self, host: str, port: int, *, client: str = "client") -> SimStream:
        await trio.lowlevel.checkpoint()
        n = self._attempts.get((client, host, port), 0)
        self._attempts[(client, host, port)] = n + 1
        key = (client, host, port, n)
        self._note(f"connect {client} {host}:{port} #{n}")
        if (host, port) not in self._servers:
            raise self._refused(key, "no server")
        if self.decider.fires(FaultKind.CONNECT_FAILURE, "connect", *key, now=self._now()):
            hang = self.decider.param(FaultKind.CONNECT_FAILURE, "hang", "connect", *key)
            if hang < self.profile.connect_hang_probability:
                self._note(f"connect hangs {key}")
                await trio.sleep_forever()
            raise self._refused(key, "injected")
        # The handshake: one round trip, which a clogged link holds up.
        latency = self.profile.latency
        rtt = latency.base(self.draws.uniform("handshake.syn", *key)) + latency.base(
            self.draws.uniform("handshake.synack", *key)
        )
        await trio.sleep(rtt)
        for direction in (C2S, S2C):
            link = self._link((host, port), direction)
            while link.clogs:
                await link.lot.park()
        handler = self._servers.get((host, port))
        if handler is None:
            raise self._refused(key, "server went down")
        return self._open(key, handler)

    def _refused(self, key: tuple[str, str, int, int], why: str) -> OSError:
        self._note(f"connect refused {key} ({why})")
        return ConnectionRefusedError(
            errno.ECONNREFUSED, f"simulated: connection to {key[1]}:{key[2]} refused ({why})"
        )

    def _open(self, key: tuple[str, str, int, int], handler: Handler) -> SimStream:
        assert self._nursery is not None, "use `async with open_sim_network(...)`"
        self._serial += 1
        address = (key[1], key[2])
        conn = _Connection(
            self._serial,
            key,
            _Pipe(C2S, self._link(address, C2S)),
            _Pipe(S2C, self._link(address, S2C)),
        )
        now = self._now()
        conn.c2s.last_deliver_at = conn.s2c.last_deliver_at = now
        conn.client = SimStream(self, conn, "client")
        conn.server = SimStream(self, conn, "server")
        self._connections[conn.serial] = conn
        self._note(f"c{conn.serial} open {key}")
        self._nursery.start_soon(self._pump, conn, conn.c2s)
        self._nursery.start_soon(self._pump, conn, conn.s2c)
        self._nursery.start_soon(self._serve, handler, conn.server)
        return conn.client

    async def _serve(self, handler: Handler, stream: SimStream) -> None:
        try:
            await handler(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            # A reset or a closed peer ends a server's connection; anything else is a bug
            # in the handler and must fail the run.
            pass
        finally:
            await stream.aclose()

    # -- writing ------------------------------------------------------------------------

    async def _write(self, conn: _Connection, pipe: _Pipe, data: bytes, writer: SimStream) -> None:
        now = self._now()
        write_no = pipe.writes
        pipe.writes += 1
        action = self._write_fault(conn, pipe.direction, write_no, now)
        window = self.profile.window
        for i, piece in enumerate(self._fragment(conn, pipe.direction, write_no, data)):
            while pipe.unacked and pipe.unacked + len(piece) > window:
                await pipe.lot.park()
                writer._check_send()
                if pipe.discard:
                    return
            self._enqueue(conn, pipe, piece, action if i == 0 else _Action.DELIVER, write_no)

    def _write_fault(self, conn: _Connection, direction: str, write_no: int, now: float) -> _Action:
        fires = self.decider.fires
        if direction == C2S:
            if fires(FaultKind.RESET_BEFORE_APPLY, "client-write", *conn.key, write_no, now=now):
                return _Action.RESET
            if fires(FaultKind.ZOMBIE_REQUEST, "client-write", *conn.key, write_no, now=now):
                return _Action.ZOMBIE
        else:
            if fires(FaultKind.RESET_AFTER_APPLY, "server-write", *conn.key, write_no, now=now):
                return _Action.RESET
            if fires(FaultKind.BLACKHOLE_AFTER_APPLY, "server-write", *conn.key, write_no, now=now):
                return _Action.BLACKHOLE
        return _Action.DELIVER

    def _fragment(
        self, conn: _Connection, direction: str, write_no: int, data: bytes
    ) -> list[bytes]:
        cuts: list[int] = []
        if len(data) > 1 and self.decider.fires(
            FaultKind.FRAGMENTATION, "write", *conn.key, direction, write_no, now=self._now()
        ):
            rng = self.draws.rng("fragment", *conn.key, direction, write_no)
            count = rng.randint(1, min(len(data) - 1, self.profile.max_fragments - 1))
            cuts = sorted(rng.sample(range(1, len(data)), count))
        segment = self.profile.segment_size
        pieces: list[bytes] = []
        start = 0
        for end in [*cuts, len(data)]:
            for at in range(start, end, segment):
                pieces.append(data[at : min(end, at + segment)])
            start = end
        return pieces

    def _enqueue(
        self, conn: _Connection, pipe: _Pipe, data: bytes, action: _Action, write_no: int
    ) -> None:
        now = self._now()
        chunk_no = pipe.chunks
        pipe.chunks += 1
        key = (*conn.key, pipe.direction, chunk_no)
        latency = self.profile.latency.base(self.draws.uniform("latency", *key))
        if self.decider.fires(FaultKind.LATENCY, "chunk", *key, now=now):
            latency += self.profile.latency.spike(
                self.decider.param(FaultKind.LATENCY, "spike", "chunk", *key)
            )
        at = max(pipe.last_deliver_at, now + latency) + len(data) / self.profile.bandwidth
        pipe.last_deliver_at = at
        pipe.in_flight.append(_Chunk(at, data, action, write_no))
        pipe.unacked += len(data)
        pipe.lot.unpark_all()

    def _queue_eof(self, conn: _Connection, pipe: _Pipe) -> None:
        if pipe.writer_done:
            return
        pipe.writer_done = True
        if pipe.broken or pipe.discard or pipe.reader_closed:
            return
        at = max(pipe.last_deliver_at, self._now() + self.profile.latency.minimum)
        pipe.last_deliver_at = at
        pipe.in_flight.append(_Chunk(at, b"", _Action.EOF))
        pipe.lot.unpark_all()

    # -- delivering ---------------------------------------------------------------------

    async def _pump(self, conn: _Connection, pipe: _Pipe) -> None:
        while not pipe.finished:
            if pipe.link.clogs:
                await pipe.link.lot.park()
                continue
            if not pipe.in_flight or pipe.black_holed:
                await pipe.lot.park()
                continue
            head = pipe.in_flight[0]
            if head.deliver_at > self._now():
                await trio.sleep_until(head.deliver_at)
                continue
            self._arrive(conn, pipe, head)

    def _arrive(self, conn: _Connection, pipe: _Pipe, chunk: _Chunk) -> None:
        match chunk.action:
            case _Action.DELIVER:
                pipe.in_flight.popleft()
                pipe.readable += chunk.data
                self._note(f"c{conn.serial} {pipe.direction} +{len(chunk.data)}")
                pipe.lot.unpark_all()
            case _Action.EOF:
                pipe.in_flight.popleft()
                pipe.eof_received = True
                self._note(f"c{conn.serial} {pipe.direction} eof")
                pipe.lot.unpark_all()
            case _Action.RESET:
                self._reset(conn, f"fault on {pipe.direction} write {chunk.write_no}")
            case _Action.BLACKHOLE:
                chunk.action = _Action.DELIVER
                self._black_hole(conn)
            case _Action.ZOMBIE:
                chunk.action = _Action.DELIVER
                self._zombify(conn, chunk)

    def _reset(self, conn: _Connection, why: str) -> None:
        if conn.reset:
            return
        conn.reset = True
        self._note(f"c{conn.serial} reset ({why})")
        for stream in (conn.client, conn.server):
            stream.broken = True
        for pipe in (conn.c2s, conn.s2c):
            pipe.broken = True
            pipe.drop()
            pipe.lot.unpark_all()
        self._connections.pop(conn.serial, None)

    def _black_hole(self, conn: _Connection) -> None:
        conn.black_holed = True
        self._note(f"c{conn.serial} black hole")
        for pipe in (conn.c2s, conn.s2c):
            pipe.black_holed = True
            pipe.lot.unpark_all()
        if conn.client.closed or conn.server.closed:
            self._reset_later(conn)

    def _zombify(self, conn: _Connection, chunk: _Chunk) -> None:
        """The client's end breaks now; its write reaches the server much later."""
        low, high = self.profile.zombie_delay
        u = self.decider.param(
            FaultKind.ZOMBIE_REQUEST, "delay", "client-write", *conn.key, chunk.write_no
        )
        delay = low + (high - low) * u
        self._note(f"c{conn.serial} zombie: client reset, request delayed {delay!r}")
        conn.client.broken = True
        s2c, c2s = conn.s2c, conn.c2s
        s2c.discard = True
        s2c.drop()
        s2c.lot.unpark_all()
        for queued in c2s.in_flight:
            queued.deliver_at += delay
        c2s.last_deliver_at += delay
        self._queue_eof(conn, c2s)
        c2s.lot.unpark_all()
        self._connections.pop(conn.serial, None)

    def _reset_later(self, conn: _Connection) -> None:
        assert self._nursery is not None
        self._nursery.start_soon(self._reset_after, conn, self.profile.blackhole_server_reset)

    async def _reset_after(self, conn: _Connection, delay: float) -> None:
        await trio.sleep(delay)
        self._reset(conn, "black-holed connection timed out")

    def _closed(self, conn: _Connection, stream: SimStream) -> None:
        """`stream` was closed locally: EOF to the peer, drop what it would have read."""
        out = conn.c2s if stream.end == "client" else conn.s2c
        inp = conn.s2c if stream.end == "client" else conn.c2s
        self._note(f"c{conn.serial} {stream.end} close")
        self._queue_eof(conn, out)
        inp.reader_closed = True
        inp.drop()
        for pipe in (out, inp):
            pipe.lot.unpark_all()
        if conn.black_holed and not conn.reset:
            self._reset_later(conn)
        if conn.client.closed and conn.server.closed:
            self._connections.pop(conn.serial, None)

    # -- clog swizzling -----------------------------------------------------------------

    async def _swizzler(self) -> None:
        """Offer a clog episode at fixed times; each episode's identity is its number."""
        start = self._now()
        episode = 0
        offset = 0.0
        while True:
            offset += 2 * self.profile.clog_interval * self.draws.uniform("clog.gap", episode)
            await trio.sleep_until(start + offset)
            now = self._now()
            if now >= self.plan.fault_phase_end:
                return
            if self.decider.fires(FaultKind.CLOG, "swizzle", episode, now=now):
                assert self._nursery is not None
                self._nursery.start_soon(self._swizzle_episode, episode)
            episode += 1

    async def _swizzle_episode(self, episode: int) -> None:
        rng = self.draws.rng("clog.episode", episode)
        links = [(h, p, d) for (h, p) in self.server_addresses() for d in (C2S, S2C)]
        if not links:
            return
        chosen = rng.sample(links, rng.randint(1, len(links)))
        low, high = self.profile.clog_duration
        stagger = 0.1 * high
        self._note(f"swizzle #{episode}: {len(chosen)} links")
        for host, port, direction in chosen:
            self.clog(host, port, direction)
            await trio.sleep(stagger * rng.random())
        await trio.sleep(low + (high - low) * rng.random())
        rng.shuffle(chosen)
        for host, port, direction in chosen:
            self.unclog(host, port, direction)
            await trio.sleep(stagger * rng.random())

    # -- helpers ------------------------------------------------------------------------

    def _now(self) -> float:
        return trio.current_time()

    def _note(self, event: str) -> None:
        if self.trace is not None:
            self.trace.append((trio.current_time(), event))

    def trace_text(self) -> str:
        """The trace as text, one `time event` a line (compare runs byte for byte)."""
        return "".join(f"{t!r} {e}\n" for t, e in self.trace or ())


@asynccontextmanager
async def open_sim_network(
    draws: Draws,
    profile: Profile,
    *,
    plan: FaultPlan | None = None,
    decider: FaultDecider | None = None,
    trace: bool = True,
) -> AsyncIterator[SimNetwork]:
    """A `SimNetwork` whose pumps, servers and fault timers run until the block exits
    (then they are cancelled: servers do not outlive the network)."""
    net = SimNetwork(draws, profile, plan=plan, decider=decider, trace=trace)
    async with trio.open_nursery() as nursery:
        net._nursery = nursery
        if net.plan.may_fire(FaultKind.CLOG):
            nursery.start_soon(net._swizzler)
        try:
            yield net
        finally:
            nursery.cancel_scope.cancel()
