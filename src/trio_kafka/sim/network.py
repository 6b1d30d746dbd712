"""A simulated TCP network for seeded runs: servers at addresses, connections with faults.

Theory of operation. A `SimNetwork` maps (host, port) to a server handler, `async def
handler(stream)`, and hands out transports (`network.transport(name)`) whose `connect`
opens a simulated connection: two one-way pipes (client->server "c2s", server->client
"s2c") and a stream object at each end. A write is cut into chunks (segments, or random
pieces when fault FRAGMENTATION fires); each chunk gets a delivery time `max(previous
chunk's, now + latency) + size / bandwidth`, so a pipe never reorders. Delivery is one
virtual-time timer per pipe, armed for the chunk at its head (`_timers.VirtualTimers`,
fired by trio's run loop itself: no task per pipe, no cancel scope per chunk): when it
fires, every due chunk moves into the reader's buffer and the timer is re-armed for the
next. The network owns a nursery (`open_sim_network`) in which the server handlers run,
and the timers that deliver chunks, end handshakes, reset black-holed connections and
drive clog episodes.

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
- CLOG: a timer offers an episode every ~`clog_interval` seconds of the fault phase
  (episode k at a time fixed by k alone); an episode clogs a random subset of links (a link
  is a server address and a direction, shared by all its connections) one by one, holds,
  then unclogs them in another random order. A clogged link delivers nothing; chunks keep
  their times, so after the unclog everything due arrives at once, in order. (Timers, not
  tasks: whether a clog can fire changes no task's schedule, so a replay restricted to
  the faults that fired schedules its tasks like the run.)

A reset breaks both ends: their pending and later `send_all` / `receive_some` raise
`trio.BrokenResourceError`, and undelivered bytes are dropped (as an RST does). An orderly
`aclose` (or `send_eof`) queues an EOF behind the bytes already written, so the peer reads
them, then b"". Writing to a peer that has closed raises `trio.BrokenResourceError`.

Determinism: every decision is a `Draws` lookup keyed by connection key, direction, write
or chunk number; connections are kept in dicts in creation order; timers due at one time
fire in the order they were armed; nothing reads wall time, `id()` or `hash()`. `trace`
records (virtual time, event) for the determinism check.
"""

from __future__ import annotations

import errno
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio
import trio.lowlevel

from trio_kafka.sim._streams import (
    C2S,
    S2C,
    Action,
    Address,
    Chunk,
    Connection,
    Handler,
    Link,
    Pipe,
    SimStream,
)
from trio_kafka.sim._timers import Timer, VirtualTimers, current_timers
from trio_kafka.sim.faults import FaultDecider, FaultKind, FaultPlan, Profile
from trio_kafka.sim.rand import Draws, key_head, keyed


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
        # Kinds this run's plan can never fire, asked about per chunk or per write: skip
        # the question (hot).
        may_fire = decider.plan.may_fire
        self._may_spike = may_fire(FaultKind.LATENCY)
        self._may_fragment = may_fire(FaultKind.FRAGMENTATION)
        self._may_fail_writes = any(
            may_fire(k)
            for k in (
                FaultKind.RESET_BEFORE_APPLY,
                FaultKind.ZOMBIE_REQUEST,
                FaultKind.RESET_AFTER_APPLY,
                FaultKind.BLACKHOLE_AFTER_APPLY,
            )
        )
        #: (virtual time, event) in the order things happened, or None when off.
        self.trace: list[tuple[float, str]] | None = [] if trace else None
        self._servers: dict[Address, Handler] = {}
        self._links: dict[tuple[str, int, str], Link] = {}
        #: Live connections by serial (creation order, so iteration is deterministic).
        self._connections: dict[int, Connection] = {}
        self._serial = 0
        #: Connect attempts so far per (client name, host, port).
        self._attempts: dict[tuple[str, str, int], int] = {}
        self._nursery: trio.Nursery | None = None
        #: The run's virtual-time timers (set by `open_sim_network`).
        self._timers: VirtualTimers | None = None
        #: The virtual time (`open_sim_network` reads its clock directly: every chunk
        #: and write asks, and `trio.current_time` is three calls deep).
        self._now: Callable[[], float] = trio.current_time

    @property
    def plan(self) -> FaultPlan:
        return self.decider.plan

    @property
    def window(self) -> int:
        """Chunks a writer may have unacknowledged (the profile's TCP window)."""
        return self.profile.window

    def __repr__(self) -> str:
        return (
            f"<SimNetwork seed={self.draws.seed} servers={sorted(self._servers)} "
            f"connections={len(self._connections)} faults={len(self.decider.log)}>"
        )

    def transport(self, name: str = "client") -> SimTransport:
        return SimTransport(self, name)

    def call_at(self, when: float, callback: Callable[..., object], *args: Any) -> Timer:
        """Call `callback(*args)` (a plain function: it must not block) when the virtual
        time reaches `when`: the simulator's own timed events (fault ticks, restarts)
        without a task of their own."""
        return self._timers_().call_at(when, callback, *args)

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

    def _link(self, address: Address, direction: str) -> Link:
        key = (address[0], address[1], direction)
        link = self._links.get(key)
        if link is None:
            link = self._links[key] = Link(address, direction)
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
                # Its pipes deliver what came due meanwhile (from the timers, as a chunk
                # arriving on time would: after this task's step, not inside it).
                held, link.held = link.held, {}
                for conn, pipe in held.values():
                    self._arm(conn, pipe, self._now())

    # -- connecting ---------------------------------------------------------------------

    async def connect(self, host: str, port: int, *, client: str = "client") -> SimStream:
        # Every path below is a checkpoint (a refusal checkpoints before it raises; the
        # handshake sleeps): no extra scheduler step up front.
        n = self._attempts.get((client, host, port), 0)
        self._attempts[(client, host, port)] = n + 1
        key = (client, host, port, n)
        if self.trace is not None:  # (no text to build when untraced: hot)
            self._note(f"connect {client} {host}:{port} #{n}")
        if (host, port) not in self._servers:
            await trio.lowlevel.checkpoint()
            raise self._refused(key, "no server")
        if self.decider.fires(FaultKind.CONNECT_FAILURE, "connect", *key, now=self._now()):
            hang = self.decider.param(FaultKind.CONNECT_FAILURE, "hang", "connect", *key)
            if hang < self.profile.connect_hang_probability:
                self._note(f"connect hangs {key}")
                await trio.sleep_forever()
            await trio.lowlevel.checkpoint()
            raise self._refused(key, "injected")
        # The handshake: one round trip, which a clogged link holds up.
        latency = self.profile.latency
        rtt = latency.base(self.draws.uniform("handshake.syn", *key)) + latency.base(
            self.draws.uniform("handshake.synack", *key)
        )
        await self._timers_().sleep(rtt)
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
        conn = Connection(
            self._serial,
            key,
            Pipe(C2S, self._link(address, C2S)),
            Pipe(S2C, self._link(address, S2C)),
        )
        now = self._now()
        conn.c2s.last_deliver_at = conn.s2c.last_deliver_at = now
        conn.key_head = key_head(*key)
        conn.c2s.key_head = key_head(*key, C2S)
        conn.s2c.key_head = key_head(*key, S2C)
        conn.client = SimStream(self, conn, "client")
        conn.server = SimStream(self, conn, "server")
        self._connections[conn.serial] = conn
        if self.trace is not None:  # (no text to build when untraced: hot)
            self._note(f"c{conn.serial} open {key}")
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
            if not stream.closed:  # the handler's own close is the usual end
                await stream.aclose()

    # -- writing ------------------------------------------------------------------------

    async def write(self, conn: Connection, pipe: Pipe, data: bytes, writer: SimStream) -> None:
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
            self._enqueue(conn, pipe, piece, action if i == 0 else Action.DELIVER, write_no)

    def _write_fault(self, conn: Connection, direction: str, write_no: int, now: float) -> Action:
        fires = self.decider.fires
        if not self._may_fail_writes:
            return Action.DELIVER
        k = keyed(conn.key_head, write_no)  # repr((*conn.key, write_no))
        if direction == C2S:
            if fires(
                FaultKind.RESET_BEFORE_APPLY,
                "client-write",
                *conn.key,
                write_no,
                now=now,
                key_repr=k,
            ):
                return Action.RESET
            if fires(
                FaultKind.ZOMBIE_REQUEST, "client-write", *conn.key, write_no, now=now, key_repr=k
            ):
                return Action.ZOMBIE
        else:
            if fires(
                FaultKind.RESET_AFTER_APPLY,
                "server-write",
                *conn.key,
                write_no,
                now=now,
                key_repr=k,
            ):
                return Action.RESET
            if fires(
                FaultKind.BLACKHOLE_AFTER_APPLY,
                "server-write",
                *conn.key,
                write_no,
                now=now,
                key_repr=k,
            ):
                return Action.BLACKHOLE
        return Action.DELIVER

    def _fragment(
        self, conn: Connection, direction: str, write_no: int, data: bytes
    ) -> list[bytes]:
        cuts: list[int] = []
        if (
            len(data) > 1
            and self._may_fragment
            and self.decider.fires(
                FaultKind.FRAGMENTATION,
                "write",
                *conn.key,
                direction,
                write_no,
                now=self._now(),
                key_repr=keyed(conn.pipe(direction).key_head, write_no),
            )
        ):
            rng = self.draws.rng("fragment", *conn.key, direction, write_no)
            count = rng.randint(1, min(len(data) - 1, self.profile.max_fragments - 1))
            cuts = sorted(rng.sample(range(1, len(data)), count))
        segment = self.profile.segment_size
        if not cuts and len(data) <= segment:
            return [data]  # one segment (the usual case)
        pieces: list[bytes] = []
        start = 0
        for end in [*cuts, len(data)]:
            for at in range(start, end, segment):
                pieces.append(data[at : min(end, at + segment)])
            start = end
        return pieces

    def _enqueue(
        self, conn: Connection, pipe: Pipe, data: bytes, action: Action, write_no: int
    ) -> None:
        now = self._now()
        chunk_no = pipe.chunks
        pipe.chunks += 1
        key = (*conn.key, pipe.direction, chunk_no)
        text = keyed(pipe.key_head, chunk_no)  # repr(key)
        latency = self.profile.latency.base(self.draws.uniform_keyed("latency", text))
        if self._may_spike and self.decider.fires(
            FaultKind.LATENCY, "chunk", *key, now=now, key_repr=text
        ):
            latency += self.profile.latency.spike(
                self.decider.param(FaultKind.LATENCY, "spike", "chunk", *key)
            )
        at = max(pipe.last_deliver_at, now + latency) + len(data) / self.profile.bandwidth
        pipe.last_deliver_at = at
        pipe.in_flight.append(Chunk(at, data, action, write_no))
        pipe.unacked += len(data)
        if pipe.timer is None:
            self._arm(conn, pipe, at)

    def queue_eof(self, conn: Connection, pipe: Pipe) -> None:
        if pipe.writer_done:
            return
        pipe.writer_done = True
        if pipe.broken or pipe.discard or pipe.reader_closed:
            return
        at = max(pipe.last_deliver_at, self._now() + self.profile.latency.minimum)
        pipe.last_deliver_at = at
        pipe.in_flight.append(Chunk(at, b"", Action.EOF))
        if pipe.timer is None:
            self._arm(conn, pipe, at)

    # -- delivering ---------------------------------------------------------------------

    def _arm(self, conn: Connection, pipe: Pipe, at: float) -> None:
        """(Re-)arm the pipe's delivery timer for `at` (its head chunk's time)."""
        if pipe.timer is not None:
            pipe.timer.cancel()
        pipe.timer = self._timers_().call_at(at, self._deliver, conn, pipe)

    def _deliver(self, conn: Connection, pipe: Pipe) -> None:
        """The pipe's timer fired: every chunk due by now arrives, in order; then the
        timer is re-armed for the next chunk (or left off: nothing queued, clogged,
        black-holed, finished)."""
        pipe.timer = None
        now = self._now()
        while not pipe.finished and pipe.in_flight:
            if pipe.link.clogs:
                pipe.link.held[conn.serial, pipe.direction] = (conn, pipe)  # `unclog` re-arms it
                return
            if pipe.black_holed:
                return
            head = pipe.in_flight[0]
            if head.deliver_at > now:
                self._arm(conn, pipe, head.deliver_at)
                return
            self._arrive(conn, pipe, head)

    def _arrive(self, conn: Connection, pipe: Pipe, chunk: Chunk) -> None:
        match chunk.action:
            case Action.DELIVER:
                pipe.in_flight.popleft()
                pipe.readable += chunk.data
                if self.trace is not None:  # (no text to build when untraced: hot)
                    self._note(f"c{conn.serial} {pipe.direction} +{len(chunk.data)}")
                pipe.wake_all()
            case Action.EOF:
                pipe.in_flight.popleft()
                pipe.eof_received = True
                if self.trace is not None:  # (no text to build when untraced: hot)
                    self._note(f"c{conn.serial} {pipe.direction} eof")
                pipe.lot.unpark_all()
            case Action.RESET:
                self._reset(conn, f"fault on {pipe.direction} write {chunk.write_no}")
            case Action.BLACKHOLE:
                chunk.action = Action.DELIVER
                self._black_hole(conn)
            case Action.ZOMBIE:
                chunk.action = Action.DELIVER
                self._zombify(conn, chunk)

    def _reset(self, conn: Connection, why: str) -> None:
        if conn.reset:
            return
        conn.reset = True
        self._note(f"c{conn.serial} reset ({why})")
        for stream in (conn.client, conn.server):
            stream.broken = True
        for pipe in (conn.c2s, conn.s2c):
            pipe.broken = True
            pipe.drop()
            pipe.wake_all()
        self._connections.pop(conn.serial, None)

    def _black_hole(self, conn: Connection) -> None:
        conn.black_holed = True
        self._note(f"c{conn.serial} black hole")
        for pipe in (conn.c2s, conn.s2c):
            pipe.black_holed = True
            pipe.wake_all()
        if conn.client.closed or conn.server.closed:
            self._reset_later(conn)

    def _zombify(self, conn: Connection, chunk: Chunk) -> None:
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
        s2c.wake_all()
        for queued in c2s.in_flight:
            queued.deliver_at += delay
        c2s.last_deliver_at += delay
        self.queue_eof(conn, c2s)
        c2s.wake_all()  # its delivery (which called this) re-arms for the delayed head
        self._connections.pop(conn.serial, None)

    def _reset_later(self, conn: Connection) -> None:
        self._timers_().call_at(
            self._now() + self.profile.blackhole_server_reset,
            self._reset,
            conn,
            "black-holed connection timed out",
        )

    def stream_closed(self, conn: Connection, stream: SimStream) -> None:
        """`stream` was closed locally: EOF to the peer, drop what it would have read."""
        out = conn.c2s if stream.end == "client" else conn.s2c
        inp = conn.s2c if stream.end == "client" else conn.c2s
        if self.trace is not None:  # (no text to build when untraced: hot)
            self._note(f"c{conn.serial} {stream.end} close")
        self.queue_eof(conn, out)
        inp.reader_closed = True
        inp.drop()
        for pipe in (out, inp):
            pipe.wake_all()
        if conn.black_holed and not conn.reset:
            self._reset_later(conn)
        if conn.client.closed and conn.server.closed:
            self._connections.pop(conn.serial, None)

    # -- clog swizzling -----------------------------------------------------------------

    def _swizzler(self) -> Iterator[float]:
        """Offer a clog episode at fixed times; each episode's identity is its number."""
        start = self._now()
        episode = 0
        offset = 0.0
        while True:
            offset += 2 * self.profile.clog_interval * self.draws.uniform("clog.gap", episode)
            yield start + offset
            now = self._now()
            if now >= self.plan.fault_phase_end:
                return
            if self.decider.fires(FaultKind.CLOG, "swizzle", episode, now=now):
                self._run_timed(self._swizzle_episode(episode))
            episode += 1

    def _swizzle_episode(self, episode: int) -> Iterator[float]:
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
            yield self._now() + stagger * rng.random()
        yield self._now() + low + (high - low) * rng.random()
        rng.shuffle(chosen)
        for host, port, direction in chosen:
            self.unclog(host, port, direction)
            yield self._now() + stagger * rng.random()

    def _run_timed(self, steps: Iterator[float]) -> None:
        """Run `steps` on the timers: each value it yields is the virtual time at which
        it goes on (a task's `sleep_until`, without a task)."""
        when = next(steps, None)
        if when is not None:
            self._timers_().call_at(when, self._run_timed, steps)

    # -- helpers ------------------------------------------------------------------------

    def _timers_(self) -> VirtualTimers:
        assert self._timers is not None, "use `async with open_sim_network(...)`"
        return self._timers

    def _note(self, event: str) -> None:
        if self.trace is not None:
            self.trace.append((self._now(), event))

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
    """A `SimNetwork` whose servers and timers run until the block exits (then they are
    cancelled: servers do not outlive the network). The run must be
    `determinism.run_seeded`'s (its virtual clock drives the network's timers)."""
    net = SimNetwork(draws, profile, plan=plan, decider=decider, trace=trace)
    net._timers = current_timers()
    net._now = net._timers.clock.current_time
    async with trio.open_nursery() as nursery:
        net._nursery = nursery
        if net.plan.may_fire(FaultKind.CLOG):
            net._run_timed(net._swizzler())
        try:
            yield net
        finally:
            nursery.cancel_scope.cancel()
