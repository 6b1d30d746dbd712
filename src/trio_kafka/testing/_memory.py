"""The in-memory harness: the real producer against the mock broker's handlers, with no
socket and no real clock.

Theory of operation
-------------------
`make_cluster()` builds a mock `Cluster` whose nodes advertise "broker0:9092",
"broker1:9092", ... and whose clock reads a fixed wall time. `MemoryTransport` is the
`Transport` the producer connects with: each `connect("brokerN", port)` makes a
`trio.testing.memory_stream_pair()` and serves the far end as node N in the nursery it
was given, so every request goes through the real codec on both sides. `producer_for()`
opens a producer on that transport with a seeded random generator and the same fixed
wall clock. Run the test under `trio.testing.MockClock(autojump_threshold=0)` (the
`autojump_clock` fixture of pytest-trio) and timeouts, backoffs and lingers take no real
time, so a test can wait out a 60 s delivery timeout and still assert exact virtual
times. Faults come from the cluster's hooks (`cluster.add_hook(ProduceRequest,
lambda call: BLACKHOLE)`, `DROP`, or an answer of your own) and from the transport
(`transport.refuse = True`).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import trio
import trio.testing

from trio_kafka.broker import Cluster
from trio_kafka.client import Producer, open_producer
from trio_kafka.records import parse_control_record

#: The wall clock of `make_cluster()` and `producer_for()`, in seconds since the epoch
#: (2023-11-14): record timestamps are `int(WALL_CLOCK * 1000)`, whatever the day.
WALL_CLOCK = 1_700_000_000.0

#: The port every node of a `make_cluster()` cluster advertises.
PORT = 9092

#: The bootstrap address of a `make_cluster()` cluster (its node 0), for clients given a
#: `MemoryTransport` (`open_selector(BOOTSTRAP, transport=...)`).
BOOTSTRAP = f"broker0:{PORT}"


def virtual_clock_ms() -> int:
    """Trio's clock in milliseconds, from `WALL_CLOCK` on: a broker clock for
    `make_cluster(clock=virtual_clock_ms)` under which transactions time out in virtual
    time. Call it inside `trio.run` only."""
    return int((WALL_CLOCK + trio.current_time()) * 1000)


def broker_host(node_id: int) -> str:
    """The host name node `node_id` of a `make_cluster()` cluster advertises."""
    return f"broker{node_id}"


@attrs.define(eq=False)
class MemoryTransport:
    """A `Transport` that connects "brokerN" (any port) to node N of `cluster` over a
    memory stream pair; the broker's end is served in `nursery` until either end closes.

    `refuse = True` makes every later connect fail with `ConnectionRefusedError`, as a
    broker that is down; `connects` counts the attempts, refused ones included.
    """

    cluster: Cluster
    nursery: trio.Nursery
    #: Set by the test: refuse every connect from now on.
    refuse: bool = False
    #: Connects attempted so far (owned by `connect`).
    connects: int = 0

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        self.connects += 1
        if self.refuse:
            raise ConnectionRefusedError(f"connection to {host}:{port} refused (transport.refuse)")
        node = _node_of(host)
        if node not in self.cluster.state.endpoints:
            known = ", ".join(broker_host(n) for n in sorted(self.cluster.state.endpoints))
            raise OSError(f"no broker {host!r} in this cluster (it has {known})")
        client, server = trio.testing.memory_stream_pair()
        self.nursery.start_soon(self.cluster.serve_stream, node, server)
        return client


def _node_of(host: str) -> int:
    digits = host.removeprefix("broker")
    if digits == host or not digits.isdigit():
        raise OSError(f"MemoryTransport connects to hosts named 'brokerN', not {host!r}")
    return int(digits)


def make_cluster(
    brokers: int = 1,
    topics: Mapping[str, int] | None = None,
    *,
    wall_clock: float = WALL_CLOCK,
    clock: Callable[[], int] | None = None,
    **options: Any,
) -> Cluster:
    """A mock cluster of `brokers` nodes advertised as "broker0:9092", ... for a
    `MemoryTransport`, with `topics` (name -> partition count) created.

    The brokers' clock (milliseconds: record timestamps, transaction timeouts) is fixed
    at `wall_clock` seconds unless `clock` is given; `virtual_clock_ms` lets them see
    trio's (virtual) time pass. `options` go to `Cluster.create`
    (`options=ClusterOptions(auto_create_topics=False)`, `sasl=`, ...)."""
    if brokers < 1:
        raise ValueError(f"make_cluster needs at least one broker, not brokers={brokers}")
    fixed_ms = int(wall_clock * 1000)
    cluster = Cluster.create(brokers, clock=clock or (lambda: fixed_ms), **options)
    for node in range(brokers):
        cluster.state.endpoints[node] = (broker_host(node), PORT)
    for name, partitions in (topics or {}).items():
        cluster.create_topic(name, partitions)
    return cluster


def producer_for(
    transport: MemoryTransport,
    *,
    seed: int = 7,
    wall_clock: float = WALL_CLOCK,
    **options: Any,
) -> contextlib.AbstractAsyncContextManager[Producer]:
    """`open_producer()` bootstrapped at node 0 of the transport's cluster, its random
    draws seeded with `seed` and its wall clock fixed at `wall_clock`. `options` are the
    producer's (`linger=`, `transactional_id=`, ...)."""
    return open_producer(
        bootstrap=BOOTSTRAP,
        transport=transport,
        rng=random.Random(seed),
        wall_clock=lambda: wall_clock,
        **options,
    )


def log_values(cluster: Cluster, topic: str, partition: int) -> list[bytes | None]:
    """The value of every data record of a partition in log order, as the broker holds
    them: aborted records included, control records left out."""
    return [
        r.value for b in cluster.decoded(topic, partition) if not b.is_control for r in b.records
    ]


def transaction_markers(cluster: Cluster, topic: str, partition: int) -> list[tuple[int, int]]:
    """(producer epoch, control type) of each transaction marker of a partition in log
    order; the control type is 0 for an abort, 1 for a commit."""
    return [
        (b.producer_epoch, int(parse_control_record(b.records[0]).type))
        for b in cluster.decoded(topic, partition)
        if b.is_control
    ]
