"""What becomes of the bytes written on a simulated connection: the network's pipes.

Theory of operation: see `network.py` (the network as a whole) and `_streams.py` (the
state of a pipe). `Delivery` is the `_streams.StreamNetwork` the two `SimStream` ends of
every connection write to. A write is cut into chunks (segments, or random pieces when
FRAGMENTATION fires); each chunk gets a delivery time `max(previous chunk's, now +
latency) + size / bandwidth`, so a pipe never reorders. One virtual-time timer per pipe,
armed for the chunk at its head, moves every due chunk into the reader's buffer and is
re-armed for the next. The faults decided here act on whole connections, at stable keys:
a client write may carry RESET_BEFORE_APPLY or ZOMBIE_REQUEST, a server write
RESET_AFTER_APPLY or BLACKHOLE_AFTER_APPLY (the chunk's `Action`, carried out when it
arrives), a chunk a LATENCY spike. A reset, a black hole, a zombie request and an orderly
close are carried out here too; a clogged link (`_clogs.py`) holds a pipe's delivery.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from trio_kafka.sim._streams import C2S, Action, Chunk, Connection, Pipe, SimStream
from trio_kafka.sim._timers import VirtualTimers
from trio_kafka.sim.faults import FaultDecider, FaultKind, Profile
from trio_kafka.sim.rand import Draws, keyed


class Delivery:
    """Writes, delivery times, arrivals and the connection faults of one network."""

    def __init__(
        self,
        draws: Draws,
        profile: Profile,
        decider: FaultDecider,
        connections: dict[int, Connection],
        note: Callable[[str], None],
        *,
        tracing: bool,
    ) -> None:
        self.draws = draws
        self.profile = profile
        self.decider = decider
        #: The network's live connections by serial (owned by `SimNetwork`, which adds
        #: them): a reset, a zombie request or the close of both ends removes one.
        self._connections = connections
        #: The network's trace (`SimNetwork._note`).
        self._note = note
        #: The network keeps a trace: only then are event texts built (hot).
        self._tracing = tracing
        # Kinds this run's plan can never fire, asked about per chunk or per write: skip
        # the question (hot).
        may_fire = decider.plan.may_fire
        self._may_spike = may_fire(FaultKind.LATENCY)
        self._may_fragment = may_fire(FaultKind.FRAGMENTATION)
        self._may_reset_before = may_fire(FaultKind.RESET_BEFORE_APPLY)
        self._may_zombie = may_fire(FaultKind.ZOMBIE_REQUEST)
        self._may_reset_after = may_fire(FaultKind.RESET_AFTER_APPLY)
        self._may_black_hole = may_fire(FaultKind.BLACKHOLE_AFTER_APPLY)
        self._may_fail_writes = (
            self._may_reset_before
            or self._may_zombie
            or self._may_reset_after
            or self._may_black_hole
        )
        #: The run's virtual-time timers (`bind`).
        self._timers: VirtualTimers | None = None
        #: The virtual time (`bind` reads the clock directly: every chunk and write asks).
        self._now: Callable[[], float] = trio.current_time

    def bind(self, timers: VirtualTimers) -> None:
        """Deliver on `timers` (the run's, once `open_sim_network` has them)."""
        self._timers = timers
        self._now = timers.clock.current_time

    @property
    def window(self) -> int:
        """Chunks a writer may have unacknowledged (the profile's TCP window)."""
        return self.profile.window

    # -- writing ------------------------------------------------------------------------

    async def write(self, conn: Connection, pipe: Pipe, data: bytes, writer: SimStream) -> None:
        now = self._now()
        write_no = pipe.writes
        pipe.writes += 1
        action = self._write_fault(conn, pipe.direction, write_no, now)
        window = self.profile.window
        for i, piece in enumerate(self._fragment(conn, pipe.direction, write_no, data)):
            while pipe.unacked and pipe.unacked + len(piece) > window:
                await pipe.wait()
                writer.check_send()
                if pipe.discard:
                    return
            self._enqueue(conn, pipe, piece, action if i == 0 else Action.DELIVER, write_no)

    def _write_fault(self, conn: Connection, direction: str, write_no: int, now: float) -> Action:
        fires = self.decider.fires
        if not self._may_fail_writes:
            return Action.DELIVER
        k = keyed(conn.key_head, write_no)  # repr((*conn.key, write_no))
        if direction == C2S:
            if self._may_reset_before and fires(
                FaultKind.RESET_BEFORE_APPLY,
                "client-write",
                *conn.key,
                write_no,
                now=now,
                key_repr=k,
            ):
                return Action.RESET
            if self._may_zombie and fires(
                FaultKind.ZOMBIE_REQUEST, "client-write", *conn.key, write_no, now=now, key_repr=k
            ):
                return Action.ZOMBIE
        else:
            if self._may_reset_after and fires(
                FaultKind.RESET_AFTER_APPLY,
                "server-write",
                *conn.key,
                write_no,
                now=now,
                key_repr=k,
            ):
                return Action.RESET
            if self._may_black_hole and fires(
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
        text = keyed(pipe.key_head, chunk_no)  # repr((*conn.key, pipe.direction, chunk_no))
        latency = self.profile.latency.base(self.draws.uniform_keyed("latency", text))
        if self._may_spike:
            key = (*conn.key, pipe.direction, chunk_no)
            if self.decider.fires(FaultKind.LATENCY, "chunk", *key, now=now, key_repr=text):
                latency += self.profile.latency.spike(
                    self.decider.param(FaultKind.LATENCY, "spike", "chunk", *key)
                )
        at = max(pipe.last_deliver_at, now + latency) + len(data) / self.profile.bandwidth
        pipe.last_deliver_at = at
        pipe.in_flight.append(Chunk(at, data, action, write_no))
        pipe.unacked += len(data)
        if pipe.timer is None:
            self.arm(conn, pipe, at)

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
            self.arm(conn, pipe, at)

    # -- delivering ---------------------------------------------------------------------

    def arm(self, conn: Connection, pipe: Pipe, at: float) -> None:
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
                self.arm(conn, pipe, head.deliver_at)
                return
            self._arrive(conn, pipe, head)

    def _arrive(self, conn: Connection, pipe: Pipe, chunk: Chunk) -> None:
        match chunk.action:
            case Action.DELIVER:
                pipe.in_flight.popleft()
                pipe.readable += chunk.data
                if self._tracing:  # (no text to build when untraced: hot)
                    self._note(f"c{conn.serial} {pipe.direction} +{len(chunk.data)}")
                pipe.wake_all()
            case Action.EOF:
                pipe.in_flight.popleft()
                pipe.eof_received = True
                if self._tracing:  # (no text to build when untraced: hot)
                    self._note(f"c{conn.serial} {pipe.direction} eof")
                pipe.wake_all()
            case Action.RESET:
                self.reset(conn, f"fault on {pipe.direction} write {chunk.write_no}")
            case Action.BLACKHOLE:
                chunk.action = Action.DELIVER
                self._black_hole(conn)
            case Action.ZOMBIE:
                chunk.action = Action.DELIVER
                self._zombify(conn, chunk)

    # -- ending connections -------------------------------------------------------------

    def reset(self, conn: Connection, why: str) -> None:
        """Break both ends of `conn` and drop what is undelivered (an RST)."""
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
            self.reset,
            conn,
            "black-holed connection timed out",
        )

    def stream_closed(self, conn: Connection, stream: SimStream) -> None:
        """`stream` was closed locally: EOF to the peer, drop what it would have read."""
        out = conn.c2s if stream.end == "client" else conn.s2c
        inp = conn.s2c if stream.end == "client" else conn.c2s
        if self._tracing:  # (no text to build when untraced: hot)
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

    def _timers_(self) -> VirtualTimers:
        assert self._timers is not None, "use `async with open_sim_network(...)`"
        return self._timers
