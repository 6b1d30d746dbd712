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

Who does what: this module keeps the servers, the connect attempts and the live
connections, and the trace; `_delivery.py` decides and carries out what becomes of each
write and chunk (faults included); `_clogs.py` keeps the links and runs CLOG episodes;
`_streams.py` holds the state of pipes and links and the `SimStream` ends.
"""

from __future__ import annotations

import errno
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio
import trio.lowlevel

from trio_kafka.sim._clogs import Clogs
from trio_kafka.sim._delivery import Delivery
from trio_kafka.sim._streams import C2S, S2C, Address, Connection, Handler, Pipe, SimStream
from trio_kafka.sim._timers import Timer, VirtualTimers, current_timers
from trio_kafka.sim.faults import FaultDecider, FaultKind, FaultPlan, Profile
from trio_kafka.sim.rand import Draws, key_head


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
        #: Live connections by serial (creation order, so iteration is deterministic).
        #: Opened here; `_delivery` removes the ones that reset or close.
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
        #: What becomes of the bytes written (the `StreamNetwork` of every stream).
        self._delivery = Delivery(
            draws, profile, decider, self._connections, self._note, tracing=trace
        )
        #: Links, clogs and CLOG episodes.
        self._clogs = Clogs(
            draws,
            profile,
            decider,
            arm=self._delivery.arm,
            note=self._note,
            server_addresses=self.server_addresses,
        )

    def _bind(self, timers: VirtualTimers) -> None:
        self._timers = timers
        self._now = timers.clock.current_time
        self._delivery.bind(timers)
        self._clogs.bind(timers)

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
            self._delivery.reset(conn, "server reset")
        return len(victims)

    def server_addresses(self) -> list[Address]:
        return sorted(self._servers)

    # -- clogs (`_clogs.py`) ------------------------------------------------------------

    def clog(self, host: str, port: int, direction: str | None = None) -> None:
        """Pause delivery on the link(s) to (host, port); nests with other clogs."""
        self._clogs.clog(host, port, direction)

    def unclog(self, host: str, port: int, direction: str | None = None) -> None:
        self._clogs.unclog(host, port, direction)

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
            link = self._clogs.link((host, port), direction)
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
            Pipe(C2S, self._clogs.link(address, C2S)),
            Pipe(S2C, self._clogs.link(address, S2C)),
        )
        now = self._now()
        conn.c2s.last_deliver_at = conn.s2c.last_deliver_at = now
        conn.key_head = key_head(*key)
        conn.c2s.key_head = key_head(*key, C2S)
        conn.s2c.key_head = key_head(*key, S2C)
        conn.client = SimStream(self._delivery, conn, "client")
        conn.server = SimStream(self._delivery, conn, "server")
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
    net._bind(current_timers())
    async with trio.open_nursery() as nursery:
        net._nursery = nursery
        if net.plan.may_fire(FaultKind.CLOG):
            net._clogs.start()
        try:
            yield net
        finally:
            nursery.cancel_scope.cancel()
