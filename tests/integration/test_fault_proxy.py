"""The fault proxy over real TCP on 127.0.0.1: each fault kind, seen from both ends.

The upstream is a small recording server (what it received per connection and how each
connection ended); the client is a plain trio TCP stream. Tests that depend on time run
under a MockClock without autojump, so "not delivered yet" and "delivered after the
hold" are decided by `clock.jump`, never by the wall clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing
from click.testing import CliRunner

from tests.integration._helpers import interrupt_and_collect
from trio_kafka.cli import main
from trio_kafka.testing import (
    CutMode,
    FaultKind,
    FaultProxy,
    ScheduleConfig,
    Side,
    open_fault_proxy,
    parse_kinds,
    run_schedule,
)


@attrs.define(eq=False)
class _Conn:
    received: bytearray = attrs.field(factory=bytearray)
    #: "eof" (FIN), "reset" (RST) or None while open.
    ended: str | None = None
    stream: trio.SocketStream | None = None


@attrs.define(eq=False)
class Upstream:
    """A TCP server recording each connection; it echoes when `echo` is on."""

    port: int = 0
    echo: bool = True
    conns: list[_Conn] = attrs.field(factory=list)
    #: When set, connections read nothing until it fires (the socket buffers fill up).
    gate: trio.Event | None = None

    async def handle(self, stream: trio.SocketStream) -> None:
        conn = _Conn(stream=stream)
        self.conns.append(conn)
        if self.gate is not None:
            await self.gate.wait()
        while True:
            try:
                data = await stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                conn.ended = "reset"
                return
            if not data:
                conn.ended = "eof"
                await stream.aclose()
                return
            conn.received += data
            if self.echo:
                try:
                    await stream.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    conn.ended = "reset"
                    return


async def until(predicate: Callable[[], bool], what: str) -> None:
    """Let the loop (and the kernel) run until `predicate()` holds: no clock involved."""
    for _ in range(200_000):
        if predicate():
            return
        await trio.lowlevel.checkpoint()
        # Give the I/O manager a real poll: only a blocking-free checkpoint otherwise.
        await trio.testing.wait_all_tasks_blocked()
    raise AssertionError(f"never happened: {what}")


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> AsyncIterator[Upstream]:
    server = Upstream()
    listeners = await nursery.start(trio.serve_tcp, server.handle, 0)
    server.port = listeners[0].socket.getsockname()[1]
    yield server


@pytest.fixture
async def proxy(upstream: Upstream) -> AsyncIterator[FaultProxy]:
    async with open_fault_proxy(("127.0.0.1", upstream.port), seed=7) as p:
        yield p


Connect = Callable[[FaultProxy], Awaitable[trio.SocketStream]]


@pytest.fixture
async def connect() -> AsyncIterator[Connect]:
    """Open client connections to a proxy; all closed after the test."""
    opened: list[trio.SocketStream] = []

    async def open_(proxy: FaultProxy) -> trio.SocketStream:
        stream = await trio.open_tcp_stream("127.0.0.1", proxy.port)
        opened.append(stream)
        return stream

    yield open_
    for stream in opened:
        await trio.aclose_forcefully(stream)


async def receive_exactly(stream: trio.SocketStream, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = await stream.receive_some(n - len(out))
        if not chunk:
            break
        out += chunk
    return bytes(out)


async def ending(stream: trio.SocketStream) -> str:
    """How the peer ended the connection: "eof" or "reset"."""
    try:
        while await stream.receive_some(65536):
            pass
    except trio.BrokenResourceError:
        return "reset"
    return "eof"


async def test_bytes_pass_unchanged_both_ways(
    connect: Connect, proxy: FaultProxy, upstream: Upstream
) -> None:
    client = await connect(proxy)
    payload = bytes(range(256)) * 40
    await client.send_all(payload)
    assert await receive_exactly(client, len(payload)) == payload
    assert upstream.conns[0].received == payload
    await client.aclose()
    await until(lambda: upstream.conns[0].ended == "eof", "the upstream sees the FIN")
    assert proxy.counts["connections"] == 1


@pytest.mark.parametrize(("how", "client_sees"), [(CutMode.RST, "reset"), (CutMode.FIN, "eof")])
async def test_cut_of_the_client_side(
    connect: Connect, proxy: FaultProxy, upstream: Upstream, how: CutMode, client_sees: str
) -> None:
    client = await connect(proxy)
    await client.send_all(b"ping")
    assert await receive_exactly(client, 4) == b"ping"
    assert proxy.cut(how, Side.CLIENT) == 1
    assert await ending(client) == client_sees
    # The proxy lost its client: it closes the broker side in order.
    await until(lambda: upstream.conns[0].ended == "eof", "the upstream sees the FIN")


async def test_rst_of_the_broker_side_reaches_the_broker_and_the_client_sees_eof(
    connect: Connect, proxy: FaultProxy, upstream: Upstream
) -> None:
    client = await connect(proxy)
    await client.send_all(b"ping")
    assert await receive_exactly(client, 4) == b"ping"
    proxy.cut("rst", "broker")
    await until(lambda: upstream.conns[0].ended == "reset", "the upstream sees the RST")
    assert await ending(client) == "eof"


async def test_mid_frame_cut_delivers_half_a_request(
    connect: Connect, proxy: FaultProxy, upstream: Upstream
) -> None:
    upstream.echo = False
    client = await connect(proxy)
    await until(lambda: proxy.open_links == 1, "the link is up")
    proxy.cut(CutMode.RST, Side.BOTH, mid_frame=True, direction="to-broker")
    frame = (96).to_bytes(4, "big") + b"x" * 96
    await client.send_all(frame)
    await until(lambda: upstream.conns and upstream.conns[0].ended is not None, "cut")
    assert upstream.conns[0].received == frame[:50]
    assert upstream.conns[0].ended == "reset"
    assert await ending(client) == "reset"
    assert proxy.counts["cut.mid_frame"] == 1


async def test_mid_frame_cut_of_a_response(
    connect: Connect, proxy: FaultProxy, upstream: Upstream
) -> None:
    client = await connect(proxy)
    await until(lambda: proxy.open_links == 1, "the link is up")
    proxy.cut(CutMode.FIN, Side.BOTH, mid_frame=True, direction="to-client")
    await client.send_all(b"0123456789")
    assert await receive_exactly(client, 10) == b"01234"


async def test_blackhole_drops_bytes_and_keeps_the_connection_open(
    connect: Connect, proxy: FaultProxy, upstream: Upstream
) -> None:
    client = await connect(proxy)
    proxy.blackhole()
    await client.send_all(b"lost")
    await until(lambda: proxy.counts.get("blackholed.to-broker") == 4, "dropped")
    proxy.heal()
    await client.send_all(b"kept")
    assert await receive_exactly(client, 4) == b"kept"
    assert upstream.conns[0].received == b"kept"
    assert upstream.conns[0].ended is None


async def test_blackhole_of_responses_only(
    connect: Connect, proxy: FaultProxy, upstream: Upstream
) -> None:
    client = await connect(proxy)
    proxy.blackhole("to-client")
    await client.send_all(b"applied")
    await until(lambda: proxy.counts.get("blackholed.to-client") == 7, "answer dropped")
    assert upstream.conns[0].received == b"applied"  # the request was applied


async def test_delay_and_jitter_hold_bytes_and_keep_their_order(
    connect: Connect, proxy: FaultProxy, upstream: Upstream, mock_clock: trio.testing.MockClock
) -> None:
    upstream.echo = False
    client = await connect(proxy)
    proxy.delay(5.0, jitter=1.0, direction="to-broker")
    sent = b""
    for n in range(20):
        piece = f"<{n}>".encode()
        sent += piece
        await client.send_all(piece)
        want = len(sent)
        await until(lambda w=want: proxy.counts.get("bytes.to-broker", 0) == w, "read")
    await trio.testing.wait_all_tasks_blocked()
    assert upstream.conns[0].received == b""  # nothing before 5 s
    mock_clock.jump(6.01)
    await until(lambda: len(upstream.conns[0].received) == len(sent), "delivered")
    assert upstream.conns[0].received == sent


async def test_held_request_is_delivered_after_its_client_left(
    connect: Connect, proxy: FaultProxy, upstream: Upstream, mock_clock: trio.testing.MockClock
) -> None:
    """A zombie: the client sends, gives up and closes; the broker still gets it."""
    upstream.echo = False
    proxy.hold(10.0)
    client = await connect(proxy)
    await client.send_all(b"produce-v1")
    await until(lambda: proxy.counts.get("held") == 1, "held")
    await client.aclose()
    await trio.testing.wait_all_tasks_blocked()
    assert upstream.conns[0].received == b""
    assert upstream.conns[0].ended is None  # the broker side stays open for it
    # A new connection is not held (the hold took one request).
    second = await connect(proxy)
    await second.send_all(b"produce-v2")
    await until(lambda: len(upstream.conns) == 2 and upstream.conns[1].received, "fresh")
    mock_clock.jump(10.01)
    await until(lambda: upstream.conns[0].received == b"produce-v1", "the zombie lands")
    mock_clock.jump(proxy.zombie_linger + 0.01)
    await until(lambda: upstream.conns[0].ended == "eof", "then the broker side closes")


async def test_fragmentation_splits_writes_and_keeps_the_bytes(
    connect: Connect, proxy: FaultProxy, upstream: Upstream
) -> None:
    proxy.fragment(3)
    client = await connect(proxy)
    payload = bytes(range(200)) * 3
    await client.send_all(payload)
    assert await receive_exactly(client, len(payload)) == payload
    # Both ways: at least len / 3 pieces each way.
    assert proxy.counts["fragments"] >= 2 * len(payload) // 3


async def test_refused_connections_are_reset_until_the_heal(
    connect: Connect, proxy: FaultProxy, upstream: Upstream
) -> None:
    proxy.refuse()
    client = await connect(proxy)
    assert await ending(client) == "reset"
    assert proxy.counts["refused"] == 1
    assert upstream.conns == []
    proxy.heal()
    client = await connect(proxy)
    await client.send_all(b"in")
    assert await receive_exactly(client, 2) == b"in"


async def test_partition_refuses_new_and_silences_open_connections(
    connect: Connect, proxy: FaultProxy, upstream: Upstream
) -> None:
    old = await connect(proxy)
    await old.send_all(b"a")
    assert await receive_exactly(old, 1) == b"a"
    proxy.partition()
    await old.send_all(b"b")
    await until(lambda: proxy.counts.get("blackholed.to-broker") == 1, "dropped")
    assert await ending(await connect(proxy)) == "reset"
    proxy.heal()
    await old.send_all(b"c")
    assert await receive_exactly(old, 1) == b"c"
    assert upstream.conns[0].received == b"ac"


async def test_unreachable_upstream_resets_the_client() -> None:
    async with open_fault_proxy(("127.0.0.1", 1)) as p:
        client = await trio.open_tcp_stream("127.0.0.1", p.port)
        assert await ending(client) == "reset"
        await client.aclose()
        assert p.counts["upstream_unreachable"] == 1


def _schedule_events(seed: int) -> list[str]:
    async def main_() -> list[str]:
        proxy = FaultProxy(("127.0.0.1", 1), seed=seed)
        await run_schedule(proxy, seed, duration=60.0)
        return [f"{e.kind} {e.detail}" for e in proxy.events]

    return trio.run(main_, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_schedule_is_a_function_of_its_seed() -> None:
    first = _schedule_events(3)
    assert first == _schedule_events(3)
    assert first != _schedule_events(4)
    kinds = {line.split()[0] for line in first}
    assert {"schedule", "heal"} <= kinds
    assert len(kinds) >= 5  # a minute of faults draws most kinds
    assert first[-1] == "heal "  # always ends healed


def test_schedule_kinds_are_parsed_and_unknown_ones_named() -> None:
    assert parse_kinds("cut-rst, blackhole") == (FaultKind.CUT_RST, FaultKind.BLACKHOLE)
    assert parse_kinds("all") == tuple(FaultKind)
    with pytest.raises(ValueError, match="unknown fault kind 'cut'"):
        parse_kinds("cut")
    with pytest.raises(ValueError, match="quiet"):
        ScheduleConfig(quiet=(2.0, 1.0))


def test_fault_arguments_are_checked() -> None:
    proxy = FaultProxy("127.0.0.1:9092")
    with pytest.raises(ValueError, match="delay and jitter"):
        proxy.delay(-1)
    with pytest.raises(ValueError, match="max_bytes >= 1"):
        proxy.fragment(0)
    with pytest.raises(ValueError, match="requests >= 1"):
        proxy.hold(1.0, requests=0)
    with pytest.raises(ValueError, match="expected host:port"):
        FaultProxy("localhost")
    with pytest.raises(RuntimeError, match="not started"):
        _ = proxy.port


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--upstream", "nowhere"], "expected HOST:PORT, got 'nowhere'"),
        (["--upstream", "127.0.0.1:9092", "--faults", "cut"], "unknown fault kind 'cut'"),
        (["--upstream", "127.0.0.1:9092", "--fragment", "0"], "expected N >= 1"),
        (["--upstream", "127.0.0.1:9092", "--quiet", "3:1"], "0 <= LOW <= HIGH"),
    ],
)
def test_proxy_command_names_bad_input(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["proxy", *args])
    assert result.exit_code == 2
    assert message in result.output


def test_broker_command_refuses_advertised_listeners_that_do_not_match() -> None:
    result = CliRunner().invoke(
        main, ["broker", "--brokers", "2", "--advertised-listener", "127.0.0.1:9"]
    )
    assert result.exit_code == 2
    assert "1 address(es) for 2 broker(s)" in result.output


async def test_heal_in_the_middle_of_a_fragmented_write_delivers_the_rest(
    connect: Connect, proxy: FaultProxy, upstream: Upstream
) -> None:
    """Found by the long chaos tier: a heal while a chunk was being written in pieces
    crashed the link (the piece size was read again after the heal)."""
    upstream.echo = False
    upstream.gate = trio.Event()  # the broker reads nothing: the proxy's writes block
    proxy.fragment(1000)
    client = await connect(proxy)
    payload = bytes(range(256)) * 40_000  # 10 MB: more than the socket buffers hold
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.send_all, payload)
        await until(lambda: proxy.counts.get("fragments", 0) > 0, "fragmenting")
        await trio.testing.wait_all_tasks_blocked()  # the writer is blocked mid-chunk
        proxy.heal()
        upstream.gate.set()
        await until(lambda: len(upstream.conns[0].received) == len(payload), "delivered")
    assert upstream.conns[0].received == payload


def test_proxy_command_runs_a_schedule_and_stops_on_sigint() -> None:
    import signal
    import subprocess
    import sys
    import time

    from trio_kafka.testing import free_port

    port = free_port()
    cli = Path(sys.executable).parent / "trio-kafka"
    with subprocess.Popen(
        [
            str(cli),
            "proxy",
            "--upstream",
            "127.0.0.1:1",
            "--listen",
            f"127.0.0.1:{port}",
            "--seed",
            "3",
            "--faults",
            "cut-rst,delay",
            "--quiet",
            "0.05:0.1",
            "--fault-time",
            "0.05:0.1",
            "--duration",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:  # leaving it closes the pipes and reaps the process
        try:
            deadline = time.monotonic() + 30
            err = ""
            assert process.stderr is not None
            while "schedule done" not in err and time.monotonic() < deadline:
                err += process.stderr.readline()
            assert f"trio-kafka proxy: 127.0.0.1:{port} -> 127.0.0.1:1 (seed 3)" in err
            assert "schedule done" in err
        finally:
            out, rest = interrupt_and_collect(process, signal.SIGINT, 30)
    assert process.returncode == 0, rest
    kinds = {line.split()[1] for line in out.splitlines() if line.strip()}
    assert {"schedule", "heal"} <= kinds and kinds & {"cut", "delay"}
