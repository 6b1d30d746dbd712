"""A loopback TCP proxy that injects network faults between clients and a real broker.

Theory of operation
-------------------
`FaultProxy` listens on a loopback port and forwards every accepted connection to one
upstream address (a broker). It rewrites nothing: the broker must advertise the proxy's
address (Tansu: `--advertised-listener-url`; the mock broker: `advertised=` of
`open_cluster` or `trio-kafka broker --advertised-listener`), so clients that follow the
metadata keep coming back through it.

Each accepted connection is a *link*: the client's socket, the broker's socket and two
one-way *pipes* (to-broker: requests; to-client: responses). A pipe is a reader task
that receives bytes from its source and decides their fate at once (forward, drop, or
cut mid-frame), and a writer task that delivers them to the destination in order, each
chunk at its delivery time (so delays never reorder bytes within a connection, as TCP
guarantees). Faults are state on the proxy, read by the pipes as bytes pass:

- `cut(how, side, mid_frame=)`: close a side of every open link with a FIN or a RST
  (SO_LINGER 0); with `mid_frame` the cut waits for the next chunk in `direction` and
  forwards only half of it first, so the peer sees a frame cut in the middle;
- `blackhole(direction)`: the connections stay open, the bytes are read and dropped;
- `delay(seconds, jitter=)`: every chunk is delivered `seconds` + uniform(0, jitter)
  later;
- `hold(seconds, requests=)`: the next `requests` chunks towards the broker are held
  `seconds` and delivered *even if the client has closed its connection meanwhile*: the
  link's broker side stays open until its held bytes are delivered (a zombie request:
  the client gave up and reconnected, the broker applies the old request late);
- `fragment(max_bytes)`: chunks are written in pieces of 1..max_bytes bytes;
- `refuse()`: new connections are accepted and reset at once (a partition from the
  client's side); `partition()` is refuse plus a blackhole of the open links;
- `heal()`: every fault off (bytes already held keep their delivery time).

When one side of a link closes (FIN or RST), the pipe towards the other side delivers
what it still holds and then closes that side the same way (a RST becomes a RST). When a
destination is gone, its pipe drops what is left. A link ends when both pipes end.

Randomness (jitter, fragment sizes) comes from `random.Random(seed)`, and every fault
applied is appended to `events` and counted in `counts`, so a test can print what it
did. Time is trio's clock (real time under `trio.run`, virtual under a MockClock).
"""

from __future__ import annotations

import enum
import math
import random
import socket
import struct
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager, suppress
from typing import Any

import attrs
import trio

_RECEIVE_SIZE = 65536


class Direction(enum.Enum):
    """A pipe of a link: requests go to the broker, responses to the client."""

    TO_BROKER = "to-broker"
    TO_CLIENT = "to-client"


class CutMode(enum.Enum):
    """How a side is closed: an orderly FIN or an abortive RST."""

    FIN = "fin"
    RST = "rst"


class Side(enum.Enum):
    """Which socket(s) of a link a cut closes."""

    CLIENT = "client"
    BROKER = "broker"
    BOTH = "both"


def _direction(value: Direction | str | None) -> frozenset[Direction]:
    if value is None or value == "both":
        return frozenset(Direction)
    return frozenset({Direction(value)})


@attrs.frozen(slots=True)
class FaultEvent:
    """One fault the proxy applied: when (trio's clock), what, and on what."""

    time: float
    kind: str
    detail: str = ""

    def render(self) -> str:
        return f"{self.time:.3f} {self.kind}" + (f" {self.detail}" if self.detail else "")


@attrs.frozen(slots=True)
class _Chunk:
    deliver_at: float
    data: bytes
    #: Held by the late-delivery fault (counted in `FaultProxy._held_undelivered`).
    held: bool = False


@attrs.frozen(slots=True)
class _End:
    """The source closed (`how` FIN or RST): close the destination the same way."""

    how: CutMode


@attrs.frozen(slots=True)
class _Cut:
    """A cut armed mid-frame: close `side` of the link once what precedes is written."""

    how: CutMode
    side: Side


_Item = _Chunk | _End | _Cut


def _reset(stream: trio.SocketStream) -> None:
    """Close with a RST (SO_LINGER on, zero timeout), synchronously."""
    with suppress(OSError):
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    stream.socket.close()


def _close(stream: trio.SocketStream, how: CutMode) -> None:
    if how is CutMode.RST:
        _reset(stream)
    else:
        stream.socket.close()


@attrs.define(eq=False)
class _Pipe:
    direction: Direction
    source: trio.SocketStream
    destination: trio.SocketStream
    send: trio.MemorySendChannel[_Item]
    receive: trio.MemoryReceiveChannel[_Item]
    # Delivery time of the last queued chunk: later chunks never overtake it (TCP order).
    last_deliver_at: float = 0.0
    # A mid-frame cut waiting for this pipe's next chunk (set by `FaultProxy.cut`).
    armed_cut: _Cut | None = None
    # Bytes still queued for delivery (a link with held bytes outlives its client).
    queued: int = 0
    # The destination is gone: drop whatever comes.
    destination_gone: bool = False
    # Some chunk of this pipe was held (late delivery): linger before closing.
    held: bool = False


@attrs.define(eq=False)
class _Link:
    id: int
    client: trio.SocketStream
    broker: trio.SocketStream
    pipes: dict[Direction, _Pipe] = attrs.field(factory=dict)

    def stream(self, side: Side) -> list[trio.SocketStream]:
        match side:
            case Side.CLIENT:
                return [self.client]
            case Side.BROKER:
                return [self.broker]
            case Side.BOTH:
                return [self.client, self.broker]


def _parse_address(address: str | tuple[str, int]) -> tuple[str, int]:
    if isinstance(address, tuple):
        return address
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"expected host:port, got {address!r}")
    return host, int(port)


@attrs.define(eq=False)
class FaultProxy:
    """A fault-injecting TCP proxy to `upstream` ("host:port"); see the module doc.

    Start it with `open_fault_proxy(...)` (or `await nursery.start(proxy.serve)`);
    `address` / `port` are where clients connect, once started.
    """

    upstream: tuple[str, int] = attrs.field(converter=_parse_address)
    host: str = "127.0.0.1"
    #: The port to listen on (0: a free one, known once started).
    listen_port: int = 0
    seed: int = 0
    #: Seconds a link whose held bytes were delivered stays open after its client left.
    zombie_linger: float = 1.0
    # -- fault state, read by the pipes as bytes pass (owned by the proxy's methods) --
    # Directions whose bytes are read and dropped.
    _blackholed: set[Direction] = attrs.field(factory=set)
    # Fixed delay and jitter (seconds) added to every chunk, by direction.
    _delay: dict[Direction, tuple[float, float]] = attrs.field(factory=dict)
    # (seconds, chunks left) of the late-delivery fault towards the broker.
    _hold: tuple[float, int] | None = None
    # Largest fragment written (None: chunks are written whole).
    _fragment: int | None = None
    # New connections are reset at once.
    _refusing: bool = False
    # -- bookkeeping --
    _rng: random.Random = attrs.field(init=False)
    _links: dict[int, _Link] = attrs.field(factory=dict)
    _next_link: int = 0
    _port: int | None = None
    # Held chunks not yet delivered or dropped (what `settle` waits for).
    _held_undelivered: int = 0
    events: list[FaultEvent] = attrs.field(factory=list)
    #: How often each thing happened (connections, refused, cuts, bytes dropped...).
    counts: dict[str, int] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    # -- where clients connect -------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the proxy is not started yet")
        return self._port

    @property
    def address(self) -> str:
        """ "host:port" of the proxy (what the broker must advertise)."""
        return f"{self.host}:{self.port}"

    @property
    def open_links(self) -> int:
        return len(self._links)

    # -- faults ------------------------------------------------------------------------

    def cut(
        self,
        how: CutMode | str = CutMode.RST,
        side: Side | str = Side.BOTH,
        *,
        mid_frame: bool = False,
        direction: Direction | str = Direction.TO_BROKER,
    ) -> int:
        """Close `side` of every open link with a FIN or a RST; returns how many links.

        `mid_frame`: instead of now, at each link's next chunk in `direction` (half of it
        is forwarded first). Links opened later are not affected.
        """
        how, side = CutMode(how), Side(side)
        links = list(self._links.values())
        if mid_frame:
            pipe_dir = Direction(direction)
            for link in links:
                link.pipes[pipe_dir].armed_cut = _Cut(how, side)
            self._event(
                "cut", f"{how.value} {side.value} mid-frame {pipe_dir.value} links={len(links)}"
            )
        else:
            for link in links:
                for stream in link.stream(side):
                    _close(stream, how)
            self._event("cut", f"{how.value} {side.value} links={len(links)}")
        return len(links)

    def blackhole(self, direction: Direction | str = "both") -> None:
        """Read and drop every byte in `direction` (both by default) until `heal()`."""
        dirs = _direction(direction)
        self._blackholed |= dirs
        self._event("blackhole", "+".join(sorted(d.value for d in dirs)))

    def delay(
        self, seconds: float, *, jitter: float = 0.0, direction: Direction | str = "both"
    ) -> None:
        """Deliver each chunk `seconds` + uniform(0, `jitter`) later (order is kept)."""
        if seconds < 0 or jitter < 0 or not math.isfinite(seconds + jitter):
            raise ValueError(f"delay and jitter must be finite and >= 0, got {seconds}, {jitter}")
        for d in _direction(direction):
            self._delay[d] = (seconds, jitter)
        self._event("delay", f"{seconds:.3f}s jitter {jitter:.3f}s")

    def hold(self, seconds: float, *, requests: int = 1) -> None:
        """Hold the next `requests` chunks towards the broker `seconds`, then deliver
        them even if their client has gone (a zombie request)."""
        if seconds < 0 or requests < 1:
            raise ValueError(
                f"hold needs seconds >= 0 and requests >= 1, got {seconds}, {requests}"
            )
        self._hold = (seconds, requests)
        self._event("hold", f"{seconds:.3f}s requests={requests}")

    def fragment(self, max_bytes: int) -> None:
        """Write every chunk in pieces of 1..`max_bytes` bytes."""
        if max_bytes < 1:
            raise ValueError(f"fragment needs max_bytes >= 1, got {max_bytes}")
        self._fragment = max_bytes
        self._event("fragment", f"max {max_bytes}B")

    def refuse(self) -> None:
        """Reset every new connection at once (open links are kept)."""
        self._refusing = True
        self._event("refuse")

    def partition(self) -> None:
        """Refuse new connections and blackhole the open ones."""
        self._refusing = True
        self._blackholed |= set(Direction)
        self._event("partition")

    def heal(self) -> None:
        """Every fault off. Bytes already held keep their delivery time."""
        self._blackholed.clear()
        self._delay.clear()
        self._hold = None
        self._fragment = None
        self._refusing = False
        for link in self._links.values():
            for pipe in link.pipes.values():
                pipe.armed_cut = None
        self._event("heal")

    async def settle(self, poll: float = 0.05) -> None:
        """Wait until every held request is delivered (or its broker side is gone),
        plus `zombie_linger` when some were: after `heal()`, before reading back."""
        waited = False
        while self._held_undelivered > 0:
            waited = True
            await trio.sleep(poll)
        if waited or self.counts.get("held"):
            await trio.sleep(self.zombie_linger)

    def note(self, kind: str, detail: str = "") -> None:
        """Append an event of your own (a schedule's seed, a test's phase) and count it."""
        self._event(kind, detail)

    def _event(self, kind: str, detail: str = "") -> None:
        self.events.append(FaultEvent(trio.current_time(), kind, detail))
        self._count(f"fault.{kind}")

    def _count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    # -- serving -----------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen and forward until cancelled (`task_status.started()` once listening)."""
        listeners = await trio.open_tcp_listeners(self.listen_port, host=self.host)
        self._port = int(listeners[0].socket.getsockname()[1])
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._accept, listeners)
            task_status.started()

    async def _accept(self, client: trio.SocketStream) -> None:
        if self._refusing:
            self._count("refused")
            _reset(client)
            return
        try:
            broker = await trio.open_tcp_stream(*self.upstream)
        except OSError:
            self._count("upstream_unreachable")
            _reset(client)
            return
        self._count("connections")
        link = _Link(self._next_link, client, broker)
        self._next_link += 1
        for direction, source, destination in (
            (Direction.TO_BROKER, client, broker),
            (Direction.TO_CLIENT, broker, client),
        ):
            send, receive = trio.open_memory_channel[_Item](math.inf)
            link.pipes[direction] = _Pipe(direction, source, destination, send, receive)
        self._links[link.id] = link
        try:
            async with trio.open_nursery() as nursery:
                for pipe in link.pipes.values():
                    nursery.start_soon(self._read, link, pipe)
                    nursery.start_soon(self._write, link, pipe)
        finally:
            del self._links[link.id]
            client.socket.close()
            broker.socket.close()

    async def _read(self, link: _Link, pipe: _Pipe) -> None:
        async with pipe.send:
            while True:
                try:
                    data = await pipe.source.receive_some(_RECEIVE_SIZE)
                except trio.ClosedResourceError:
                    # We closed it ourselves (a cut): the other side sees an orderly close.
                    await pipe.send.send(_End(CutMode.FIN))
                    return
                except (trio.BrokenResourceError, OSError):
                    # The peer reset it: pass the reset on.
                    await pipe.send.send(_End(CutMode.RST))
                    return
                if not data:
                    await pipe.send.send(_End(CutMode.FIN))
                    return
                self._count(f"bytes.{pipe.direction.value}", len(data))
                cut = pipe.armed_cut
                if cut is not None:
                    pipe.armed_cut = None
                    half = data[: len(data) // 2]
                    if half:
                        await pipe.send.send(_Chunk(self._deliver_at(pipe, 0.0), half))
                    await pipe.send.send(cut)
                    self._count("cut.mid_frame")
                    return
                if pipe.direction in self._blackholed:
                    self._count(f"blackholed.{pipe.direction.value}", len(data))
                    continue
                extra, held = 0.0, False
                if pipe.direction is Direction.TO_BROKER and self._hold is not None:
                    seconds, left = self._hold
                    self._hold = (seconds, left - 1) if left > 1 else None
                    extra, held = seconds, True
                    pipe.held = True
                    self._held_undelivered += 1
                    self._count("held")
                    self._event("held", f"link {link.id} {len(data)}B for {seconds:.3f}s")
                await pipe.send.send(_Chunk(self._deliver_at(pipe, extra), data, held))

    def _deliver_at(self, pipe: _Pipe, extra: float) -> float:
        seconds, jitter = self._delay.get(pipe.direction, (0.0, 0.0))
        if jitter:
            seconds += self._rng.uniform(0.0, jitter)
        at = max(trio.current_time() + seconds + extra, pipe.last_deliver_at)
        pipe.last_deliver_at = at
        return at

    async def _write(self, link: _Link, pipe: _Pipe) -> None:
        async with pipe.receive:
            async for item in pipe.receive:
                match item:
                    case _Chunk(deliver_at=at, data=data, held=held):
                        await trio.sleep_until(at)
                        if not pipe.destination_gone:
                            await self._send(pipe, data)
                        if held:
                            self._held_undelivered -= 1
                    case _End(how=how):
                        if pipe.held and not pipe.destination_gone:
                            # A zombie request was just delivered: give the broker time
                            # to apply it before it sees the connection close.
                            await trio.sleep(self.zombie_linger)
                        if not pipe.destination_gone:
                            _close(pipe.destination, how)
                            pipe.destination_gone = True
                        return
                    case _Cut(how=how, side=side):
                        for stream in link.stream(side):
                            _close(stream, how)
                        self._event("cut", f"{how.value} {side.value} mid-frame link {link.id}")
                        pipe.destination_gone = True

    async def _send(self, pipe: _Pipe, data: bytes) -> None:
        # Read once: a heal() while the pieces are written must not change them midway.
        limit = self._fragment
        try:
            if limit is None or len(data) <= 1:
                await pipe.destination.send_all(data)
                return
            view = memoryview(data)
            while view:
                size = self._rng.randint(1, limit)
                await pipe.destination.send_all(view[:size])
                view = view[size:]
                self._count("fragments")
                await trio.sleep(0)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pipe.destination_gone = True


@asynccontextmanager
async def open_fault_proxy(
    upstream: str | tuple[str, int], *, host: str = "127.0.0.1", port: int = 0, seed: int = 0
) -> AsyncIterator[FaultProxy]:
    """Run a `FaultProxy` to `upstream` for the duration of the block."""
    proxy = FaultProxy(upstream, host=host, listen_port=port, seed=seed)
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.serve)
        try:
            yield proxy
        finally:
            nursery.cancel_scope.cancel()


def summarize(events: Iterable[FaultEvent]) -> dict[str, Any]:
    """Faults applied by kind (what a report prints)."""
    out: dict[str, int] = {}
    for event in events:
        out[event.kind] = out.get(event.kind, 0) + 1
    return dict(sorted(out.items()))
