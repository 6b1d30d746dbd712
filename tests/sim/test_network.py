"""The simulated network: TCP semantics within a connection, and each network fault's effect."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import attrs
import pytest
import trio
import trio.testing

from trio_kafka.net import Transport
from trio_kafka.sim._timers import VirtualClock
from trio_kafka.sim.determinism import run_seeded
from trio_kafka.sim.faults import STANDARD, FaultIdentity, FaultKind, FaultPlan, Profile
from trio_kafka.sim.network import SimNetwork, open_sim_network
from trio_kafka.sim.rand import Draws

HOST, PORT = "broker-0", 9092
#: Small segments so a few kilobytes arrive in several chunks.
PROFILE = attrs.evolve(STANDARD, segment_size=1000)


class Receiver(Protocol):
    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray: ...


async def read_exactly(stream: Receiver, n: int) -> bytes | None:
    """n bytes, or None on EOF before the first byte."""
    buf = bytearray()
    while len(buf) < n:
        chunk = await stream.receive_some(n - len(buf))
        if not chunk:
            if buf:
                raise AssertionError(f"EOF after {len(buf)} of {n} bytes")
            return None
        buf += chunk
    return bytes(buf)


def frame(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


@attrs.define
class EchoServer:
    """Reads length-prefixed requests and echoes them; remembers what it saw and how."""

    #: (virtual time, request body) per request applied.
    applied: list[tuple[float, bytes]] = attrs.field(factory=list)
    #: Sizes of every receive_some result.
    chunk_sizes: list[int] = attrs.field(factory=list)
    #: How each connection ended: "eof", "broken".
    endings: list[str] = attrs.field(factory=list)

    async def __call__(self, stream: trio.abc.Stream) -> None:
        counting = _Counting(stream, self.chunk_sizes)
        try:
            while True:
                header = await read_exactly(counting, 4)
                if header is None:
                    self.endings.append("eof")
                    return
                body = await read_exactly(counting, int.from_bytes(header, "big"))
                assert body is not None
                self.applied.append((trio.current_time(), body))
                await stream.send_all(frame(body))
        except trio.BrokenResourceError:
            self.endings.append("broken")


@attrs.define
class _Counting:
    inner: trio.abc.Stream
    sizes: list[int]

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        data = bytes(await self.inner.receive_some(max_bytes))
        if data:
            self.sizes.append(len(data))
        return data


async def request(stream: trio.abc.Stream, body: bytes) -> bytes:
    await stream.send_all(frame(body))
    header = await read_exactly(stream, 4)
    assert header is not None, "EOF instead of a response"
    reply = await read_exactly(stream, int.from_bytes(header, "big"))
    assert reply is not None
    return reply


def run(
    main: Callable[[SimNetwork], Awaitable[None]],
    *,
    plan: FaultPlan,
    seed: int = 1,
    profile: Profile = PROFILE,
) -> SimNetwork:
    holder: list[SimNetwork] = []

    async def body(clock: VirtualClock) -> None:
        async with open_sim_network(Draws(seed), profile, plan=plan) as net:
            holder.append(net)
            await main(net)

    run_seeded(body, seed=seed)
    return holder[0]


def fixed(**rates: float) -> FaultPlan:
    return FaultPlan.fixed({FaultKind[k.upper()]: r for k, r in rates.items()}, PROFILE)


def only(*identities: FaultIdentity) -> FaultPlan:
    """Exactly these faults (the fault phase never ends)."""
    return FaultPlan.fixed({}, PROFILE).restricted_to(identities)


# -- no faults -----------------------------------------------------------------------------


def test_echo_without_faults_delivers_every_byte_in_order_in_several_chunks() -> None:
    server = EchoServer()
    bodies = [bytes([i]) * (3000 + 17 * i) for i in range(5)]
    replies: list[bytes] = []

    async def main(net: SimNetwork) -> None:
        net.add_server(HOST, PORT, server)
        transport: Transport = net.transport()  # what the client's selector takes
        stream = await transport.connect(HOST, PORT)
        for body in bodies:
            replies.append(await request(stream, body))
        await stream.aclose()
        with trio.fail_after(1):
            while not server.endings:
                await trio.sleep(0.01)

    net = run(main, plan=FaultPlan.quiet(PROFILE))
    assert replies == bodies
    assert [b for _, b in server.applied] == bodies
    assert len(server.chunk_sizes) > 2 * len(bodies)
    assert max(server.chunk_sizes) <= PROFILE.segment_size
    assert server.endings == ["eof"]
    assert len(net.decider.log) == 0
    assert net.trace is not None and net.trace[-1][0] > 0  # took virtual time


def test_fragmentation_cuts_writes_at_random_points_and_loses_nothing() -> None:
    server = EchoServer()
    bodies = [bytes(range(256)) * 3 for _ in range(6)]
    replies: list[bytes] = []

    async def main(net: SimNetwork) -> None:
        net.add_server(HOST, PORT, server)
        stream = await net.transport().connect(HOST, PORT)
        for body in bodies:
            replies.append(await request(stream, body))

    net = run(main, plan=fixed(fragmentation=1.0))
    assert replies == bodies
    # 772-byte frames fit one segment: only the fault can split them.
    assert len(server.chunk_sizes) > len(bodies) * 2
    assert net.decider.log.count_by_kind()[FaultKind.FRAGMENTATION] == 2 * len(bodies)


def test_orderly_close_gives_the_peer_its_bytes_then_eof() -> None:
    got: list[bytes] = []

    async def sink(stream: trio.abc.Stream) -> None:
        while data := await stream.receive_some():
            got.append(bytes(data))
        got.append(b"<eof>")

    async def main(net: SimNetwork) -> None:
        net.add_server(HOST, PORT, sink)
        stream = await net.transport().connect(HOST, PORT)
        await stream.send_all(b"x" * 2500)
        await stream.aclose()
        with pytest.raises(trio.ClosedResourceError):
            await stream.send_all(b"y")
        await trio.sleep(1)

    run(main, plan=FaultPlan.quiet(PROFILE))
    assert b"".join(got[:-1]) == b"x" * 2500 and got[-1] == b"<eof>"


def test_writing_to_a_peer_that_closed_is_broken() -> None:
    async def close_at_once(stream: trio.abc.Stream) -> None:
        await stream.aclose()

    async def main(net: SimNetwork) -> None:
        net.add_server(HOST, PORT, close_at_once)
        stream = await net.transport().connect(HOST, PORT)
        assert await stream.receive_some() == b""
        with pytest.raises(trio.BrokenResourceError):
            await stream.send_all(b"hello")

    run(main, plan=FaultPlan.quiet(PROFILE))


def test_streams_pass_trios_half_closeable_stream_checks() -> None:
    async def main(net: SimNetwork) -> None:
        pairs: list[trio.abc.Stream] = []

        async def accept(stream: trio.abc.Stream) -> None:
            pairs.append(stream)
            await trio.sleep_forever()

        net.add_server(HOST, PORT, accept)

        async def maker() -> tuple[trio.abc.HalfCloseableStream, trio.abc.HalfCloseableStream]:
            client = await net.transport().connect(HOST, PORT)
            await trio.testing.wait_all_tasks_blocked()
            server = pairs.pop()
            assert isinstance(client, trio.abc.HalfCloseableStream)
            assert isinstance(server, trio.abc.HalfCloseableStream)
            return client, server

        await trio.testing.check_half_closeable_stream(maker, None)

    run(main, plan=FaultPlan.quiet(PROFILE))


# -- connection faults ----------------------------------------------------------------------


def test_reset_before_apply_breaks_both_ends_and_the_server_never_sees_the_request() -> None:
    server = EchoServer()
    errors: list[str] = []

    async def main(net: SimNetwork) -> None:
        net.add_server(HOST, PORT, server)
        stream = await net.transport().connect(HOST, PORT)
        with pytest.raises(trio.BrokenResourceError):
            await request(stream, b"produce")
        errors.append("client")
        with pytest.raises(trio.BrokenResourceError):
            await stream.send_all(b"more")
        await trio.sleep(1)

    net = run(main, plan=fixed(reset_before_apply=1.0))
    assert server.applied == []
    assert server.endings == ["broken"]
    assert errors == ["client"]
    [fired] = net.decider.log.identities()
    assert fired == FaultIdentity(
        FaultKind.RESET_BEFORE_APPLY, "client-write", ("client", HOST, PORT, 0, 0)
    )


def test_reset_after_apply_the_server_applied_the_request_the_client_sees_a_reset() -> None:
    server = EchoServer()

    async def main(net: SimNetwork) -> None:
        net.add_server(HOST, PORT, server)
        stream = await net.transport().connect(HOST, PORT)
        with pytest.raises(trio.BrokenResourceError):
            await request(stream, b"produce")
        await trio.sleep(1)

    net = run(main, plan=fixed(reset_after_apply=1.0))
    assert [b for _, b in server.applied] == [b"produce"]
    assert server.endings == ["broken"]
    assert net.decider.log.count_by_kind()[FaultKind.RESET_AFTER_APPLY] == 1


def test_black_hole_after_apply_blocks_the_client_until_its_own_timeout() -> None:
    server = EchoServer()
    timeline: dict[str, float] = {}

    async def main(net: SimNetwork) -> None:
        net.add_server(HOST, PORT, server)
        stream = await net.transport().connect(HOST, PORT)
        timeline["sent"] = trio.current_time()
        with trio.move_on_after(7.5) as scope:
            await request(stream, b"produce")
        assert scope.cancelled_caught
        timeline["gave up"] = trio.current_time()
        await stream.aclose()
        await trio.sleep(PROFILE.blackhole_server_reset + 1)

    net = run(main, plan=fixed(blackhole_after_apply=1.0))
    assert [b for _, b in server.applied] == [b"produce"]
    assert timeline["gave up"] - timeline["sent"] == pytest.approx(7.5)
    # The server learns only by a keepalive-style reset after the client went away.
    assert server.endings == ["broken"]
    assert net.trace is not None
    assert any("black-holed connection timed out" in e for _, e in net.trace)


def test_clog_then_unclog_delivers_late_but_delivers_everything() -> None:
    server = EchoServer()
    body = b"z" * 4321
    timeline: dict[str, float] = {}

    async def main(net: SimNetwork) -> None:
        net.add_server(HOST, PORT, server)
        stream = await net.transport().connect(HOST, PORT)
        timeline["clean"] = -trio.current_time()
        await request(stream, body)
        timeline["clean"] += trio.current_time()
        net.clog(HOST, PORT, "c2s")
        start = trio.current_time()
        async with trio.open_nursery() as nursery:

            async def unclog_later() -> None:
                await trio.sleep(3)
                net.unclog(HOST, PORT, "c2s")

            nursery.start_soon(unclog_later)
            assert await request(stream, body) == body
        timeline["clogged"] = trio.current_time() - start

    run(main, plan=FaultPlan.quiet(PROFILE))
    assert timeline["clean"] < 0.1
    assert timeline["clogged"] >= 3
    assert [b for _, b in server.applied] == [body, body]


def test_swizzle_clogging_delays_but_never_loses_bytes() -> None:
    servers = [EchoServer() for _ in range(3)]
    bodies = [i.to_bytes(2, "big") * 700 for i in range(40)]
    replies: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
    plan = FaultPlan.fixed({FaultKind.CLOG: 0.7}, PROFILE, fault_phase_end=30.0)

    async def main(net: SimNetwork) -> None:
        for i, server in enumerate(servers):
            net.add_server(f"broker-{i}", PORT, server)

        async def client(i: int) -> None:
            stream = await net.transport(f"client-{i}").connect(f"broker-{i}", PORT)
            for body in bodies:
                replies[i].append(await request(stream, body))
                await trio.sleep(0.5)

        async with trio.open_nursery() as nursery:
            for i in range(3):
                nursery.start_soon(client, i)

    net = run(main, plan=plan, seed=7)
    assert all(r == bodies for r in replies.values())
    assert net.decider.log.count_by_kind()[FaultKind.CLOG] >= 3
    assert net.trace is not None
    clogs = [e for _, e in net.trace if e.startswith("clog ")]
    unclogs = [e for _, e in net.trace if e.startswith("unclog ")]
    assert clogs and sorted(e[2:] for e in clogs) == sorted(e[4:] for e in unclogs)


def test_connect_to_an_address_without_a_server_is_refused_at_once() -> None:
    async def main(net: SimNetwork) -> None:
        with pytest.raises(OSError):
            await net.transport().connect("nowhere", 1)
        assert trio.current_time() == 0

    run(main, plan=FaultPlan.quiet(PROFILE))


def test_connect_failure_refused() -> None:
    profile = attrs.evolve(PROFILE, connect_hang_probability=0.0)

    async def main(net: SimNetwork) -> None:
        net.add_server(HOST, PORT, EchoServer())
        with pytest.raises(ConnectionRefusedError):
            await net.transport().connect(HOST, PORT)

    run(main, plan=FaultPlan.fixed({FaultKind.CONNECT_FAILURE: 1.0}, profile), profile=profile)


def test_connect_failure_hangs_until_the_callers_timeout() -> None:
    profile = attrs.evolve(PROFILE, connect_hang_probability=1.0)

    async def main(net: SimNetwork) -> None:
        net.add_server(HOST, PORT, EchoServer())
        with trio.move_on_after(12) as scope:
            await net.transport().connect(HOST, PORT)
        assert scope.cancelled_caught and trio.current_time() == pytest.approx(12)

    run(main, plan=FaultPlan.fixed({FaultKind.CONNECT_FAILURE: 1.0}, profile), profile=profile)


def test_zombie_request_reaches_the_server_after_the_client_reconnected() -> None:
    server = EchoServer()
    timeline: dict[str, float] = {}
    zombie = FaultIdentity(FaultKind.ZOMBIE_REQUEST, "client-write", ("client", HOST, PORT, 0, 0))

    async def main(net: SimNetwork) -> None:
        net.add_server(HOST, PORT, server)
        transport = net.transport()
        first = await transport.connect(HOST, PORT)
        with pytest.raises(trio.BrokenResourceError):
            await request(first, b"A: the zombie")
        timeline["client saw reset"] = trio.current_time()
        await first.aclose()
        second = await transport.connect(HOST, PORT)
        assert await request(second, b"B: the retry") == b"B: the retry"
        timeline["retry answered"] = trio.current_time()
        await trio.sleep(PROFILE.zombie_delay[1] + 1)

    net = run(main, plan=only(zombie))
    assert [b for _, b in server.applied] == [b"B: the retry", b"A: the zombie"]
    zombie_applied_at = server.applied[1][0]
    assert timeline["client saw reset"] < timeline["retry answered"] < zombie_applied_at
    assert net.decider.log.identities() == (zombie,)
    # The zombie connection ends with EOF after the delayed request; its response is dropped.
    assert sorted(server.endings) == ["eof"]


def test_remove_server_resets_its_connections_and_refuses_new_ones() -> None:
    server = EchoServer()

    async def main(net: SimNetwork) -> None:
        net.add_server(HOST, PORT, server)
        stream = await net.transport().connect(HOST, PORT)
        await request(stream, b"one")
        net.remove_server(HOST, PORT)
        with pytest.raises(trio.BrokenResourceError):
            await request(stream, b"two")
        with pytest.raises(OSError):
            await net.transport().connect(HOST, PORT)

    run(main, plan=FaultPlan.quiet(PROFILE))
    assert server.endings == ["broken"]


def test_heavy_tail_latency_spikes_slow_chunks_down() -> None:
    def elapsed(plan: FaultPlan) -> float:
        out: list[float] = []

        async def main(net: SimNetwork) -> None:
            net.add_server(HOST, PORT, EchoServer())
            stream = await net.transport().connect(HOST, PORT)
            start = trio.current_time()
            for i in range(20):
                await request(stream, bytes([i]) * 100)
            out.append(trio.current_time() - start)

        run(main, plan=plan)
        return out[0]

    assert elapsed(fixed(latency=0.5)) > 2 * elapsed(FaultPlan.quiet(PROFILE))


def test_a_writer_blocks_when_the_window_is_full_until_the_reader_reads() -> None:
    profile = attrs.evolve(PROFILE, window=4096)
    reading = trio.Event()
    received: list[int] = []

    async def slow_reader(stream: trio.abc.Stream) -> None:
        await reading.wait()
        while data := await stream.receive_some():
            received.append(len(data))

    async def main(net: SimNetwork) -> None:
        net.add_server(HOST, PORT, slow_reader)
        stream = await net.transport().connect(HOST, PORT)
        with trio.move_on_after(5) as scope:
            await stream.send_all(b"w" * 100_000)
        assert scope.cancelled_caught  # blocked on the window, not lost
        reading.set()
        with trio.move_on_after(5) as scope:
            await stream.wait_send_all_might_not_block()
        assert not scope.cancelled_caught
        await stream.send_all(b"v" * 10_000)
        await stream.aclose()
        await trio.sleep(1)

    run(main, plan=FaultPlan.quiet(profile), profile=profile)
    # What was accepted before the cancel, plus the second write, all arrived.
    assert 0 < sum(received) - 10_000 <= 4096
