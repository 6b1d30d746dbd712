"""A cluster of mock brokers over real TCP (or any trio stream), and a thread to run it in.

Theory of operation
-------------------
`Cluster` ties one `ClusterState` (all the logic, pure) to the I/O around it: N nodes,
each a TCP listener whose connections `serve_connection` serves; the hooks; the SASL and
TLS settings; a trio condition that wakes waiting Fetches when data arrives; and a
background task that calls `state.tick()` so transaction timeouts fire without traffic.

`open_cluster(brokers=3)` binds 127.0.0.1 on free ports (or `port`, `port + 1`...) and
yields the running cluster; `cluster.bootstrap` is the "host:port,..." string for
clients. `run_in_thread()` does the same in a background thread with its own trio run,
for blocking clients (confluent-kafka, kafka-python) in synchronous tests; its `call`
runs a function in the broker's thread so state is never touched from two threads.

A simulator does not use listeners: it builds a `Cluster` with `Cluster.create(...)` and
calls `serve_stream(node_id, stream)` on its own memory streams, with its own clock.
"""

from __future__ import annotations

import contextlib
import queue
import ssl
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, TypeVar

import attrs
import trio

from trio_kafka.broker._hooks import Hook, HookFn, Phase, api_key_of
from trio_kafka.broker._log import StoredBatch
from trio_kafka.broker._sasl import SaslConfig
from trio_kafka.broker._server import serve_connection
from trio_kafka.broker._state import ClusterOptions, ClusterState
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol import DEFAULT_MAX_FRAME_SIZE
from trio_kafka.records import RecordBatch, decode_batches

_T = TypeVar("_T")
TICK_INTERVAL = 0.05


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@attrs.define(eq=False)
class Cluster:
    """N mock brokers sharing one `ClusterState`."""

    state: ClusterState
    sasl: SaslConfig | None = None
    ssl_context: ssl.SSLContext | None = None
    # SCRAM server nonce source (None: scramp draws from the OS).
    sasl_nonce: Callable[[], str] | None = None
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    # Interceptors, in order (see _hooks.py). Owned here; tests add and remove them.
    hooks: list[Hook] = attrs.field(factory=list)
    _changed: trio.Event = attrs.field(factory=trio.Event)
    # node id -> cancel scopes of the connections it serves (so a crash can cut them).
    _connections: dict[int, set[trio.CancelScope]] = attrs.field(factory=dict)
    #: node id -> (host, port) it listens on. What Metadata and FindCoordinator tell
    #: clients is `state.endpoints`: the same unless `advertise` changed it.
    listening: dict[int, tuple[str, int]] = attrs.field(factory=dict)

    @classmethod
    def create(
        cls,
        brokers: int = 1,
        *,
        options: ClusterOptions | None = None,
        clock: Callable[[], int] = wall_clock_ms,
        **kwargs: Any,
    ) -> Cluster:
        state = ClusterState(list(range(brokers)), options or ClusterOptions(), clock=clock)
        cluster = cls(state, **kwargs)
        state.changed = cluster._notify
        return cluster

    # -- I/O ---------------------------------------------------------------------------

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_changed(self) -> None:
        await self._changed.wait()

    @property
    def connection_count(self) -> int:
        """Client connections being served now, on every node. A client that died
        leaves its connections open here until the broker has read what it had sent
        (its last requests are then served, and appended) and reached the end."""
        return sum(len(scopes) for scopes in self._connections.values())

    async def serve_stream(self, node_id: int, stream: trio.abc.Stream, *, peer: str = "") -> None:
        """Serve one connection to `node_id` over any stream (TLS is applied if set)."""
        if self.ssl_context is not None:
            tls = trio.SSLStream(stream, self.ssl_context, server_side=True)
            try:
                await tls.do_handshake()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                await trio.aclose_forcefully(stream)
                return
            stream = tls
        scopes = self._connections.setdefault(node_id, set())
        with trio.CancelScope() as scope:
            scopes.add(scope)
            try:
                await serve_connection(self, node_id, stream, peer=peer)
            finally:
                scopes.discard(scope)
        if scope.cancelled_caught:
            await trio.aclose_forcefully(stream)

    def crash_node(self, node_id: int, *, lose_producer_state: bool = False) -> None:
        """Cut every connection of `node_id` at once (requests in flight get no answer).

        The node accepts new connections right away: a crash followed by a restart.
        With `lose_producer_state`, the partitions it leads forget their producers, as a
        broker restarting without its producer snapshots does (clients then see
        UNKNOWN_PRODUCER_ID for a non-zero sequence).
        """
        for scope in list(self._connections.get(node_id, ())):
            scope.cancel()
        if lose_producer_state:
            for topic in self.state.topics.values():
                for part in topic.partitions:
                    if part.leader == node_id:
                        part.producers.clear()

    async def tick_forever(self, interval: float = TICK_INTERVAL) -> None:
        while True:
            self.state.tick()
            await trio.sleep(interval)

    # -- what tests use ----------------------------------------------------------------

    def advertise(self, node_id: int, host: str, port: int) -> None:
        """Tell clients (Metadata, FindCoordinator) that `node_id` is at `host:port`,
        e.g. a `FaultProxy` in front of it; it keeps listening where it was."""
        if node_id not in self.state.endpoints:
            raise KeyError(f"no node {node_id} (nodes: {sorted(self.state.endpoints)})")
        self.state.endpoints[node_id] = (host, port)

    @property
    def bootstrap(self) -> str:
        return ",".join(
            f"{host}:{port}" for _, (host, port) in sorted(self.state.endpoints.items())
        )

    def add_hook(
        self,
        api: Any,
        fn: HookFn,
        *,
        after: bool = False,
        node: int | None = None,
        times: int | None = None,
    ) -> Hook:
        """Intercept requests of `api` (a request class, an API key, or None for all)."""
        hook = Hook(fn, api_key_of(api), Phase.AFTER if after else Phase.BEFORE, node, times)
        self.hooks.append(hook)
        return hook

    def remove_hook(self, hook: Hook) -> None:
        with contextlib.suppress(ValueError):
            self.hooks.remove(hook)

    def create_topic(
        self, name: str, partitions: int = 1, configs: dict[str, str | None] | None = None
    ) -> None:
        error, message = self.state.create_topic(name, partitions, configs)
        if error is not ErrorCode.NONE:
            raise ValueError(f"cannot create topic {name!r}: {error.name}: {message}")

    def move_leader(self, topic: str, partition: int, node_id: int) -> None:
        self.state.move_leader(topic, partition, node_id)

    def move_transaction_coordinator(self, node_id: int) -> None:
        self.state.move_transaction_coordinator(node_id)

    def batches(self, topic: str, partition: int) -> list[StoredBatch]:
        part = self.state.partition(topic, partition)
        if part is None:
            raise KeyError(f"no partition {topic}-{partition}")
        return list(part.log.batches)

    def decoded(self, topic: str, partition: int) -> list[RecordBatch]:
        """Every batch of a partition, decoded (control batches included)."""
        return [b for s in self.batches(topic, partition) for b in decode_batches(s.data)]


@contextlib.asynccontextmanager
async def open_cluster(
    brokers: int = 1,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    options: ClusterOptions | None = None,
    sasl: SaslConfig | None = None,
    ssl_context: ssl.SSLContext | None = None,
    clock: Callable[[], int] = wall_clock_ms,
    topics: dict[str, int] | None = None,
    advertised: Sequence[tuple[str, int]] | None = None,
) -> AsyncIterator[Cluster]:
    """Run `brokers` mock brokers on `host` (free ports unless `port` is given).

    `advertised`: one (host, port) per broker that clients are told instead of where it
    listens (a proxy in front of it, as Kafka's `advertised.listeners`).
    """
    if advertised is not None and len(advertised) != brokers:
        raise ValueError(f"advertised names {len(advertised)} address(es) for {brokers} broker(s)")
    cluster = Cluster.create(
        brokers, options=options, clock=clock, sasl=sasl, ssl_context=ssl_context
    )
    async with trio.open_nursery() as nursery:
        for node_id in cluster.state.node_ids:
            listeners = await trio.open_tcp_listeners(port + node_id if port else 0, host=host)
            sockname = listeners[0].socket.getsockname()
            cluster.listening[node_id] = (host, sockname[1])
            cluster.state.endpoints[node_id] = (
                advertised[node_id] if advertised is not None else (host, sockname[1])
            )

            async def handler(stream: trio.SocketStream, node_id: int = node_id) -> None:
                try:
                    peer_host, peer_port = stream.socket.getpeername()[:2]
                    peer = f"{peer_host}:{peer_port}"
                except OSError:
                    peer = "?"
                await cluster.serve_stream(node_id, stream, peer=peer)

            nursery.start_soon(trio.serve_listeners, handler, listeners)
        nursery.start_soon(cluster.tick_forever)
        for name, partitions in (topics or {}).items():
            cluster.create_topic(name, partitions)
        try:
            yield cluster
        finally:
            nursery.cancel_scope.cancel()


@attrs.define(eq=False)
class ThreadedCluster:
    """A cluster running in a background thread (see `run_in_thread`)."""

    cluster: Cluster
    token: trio.lowlevel.TrioToken

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    def call(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run `fn(*args)` in the broker's thread (state is only touched there)."""
        return trio.from_thread.run_sync(fn, *args, trio_token=self.token)


@contextlib.contextmanager
def run_in_thread(brokers: int = 1, **kwargs: Any) -> Iterator[ThreadedCluster]:
    """`open_cluster(brokers, **kwargs)` in a background thread, for blocking clients."""
    ready: queue.Queue[ThreadedCluster | BaseException] = queue.Queue()
    stop_holder: list[trio.Event] = []

    async def main() -> None:
        stop = trio.Event()
        stop_holder.append(stop)
        async with open_cluster(brokers, **kwargs) as cluster:
            ready.put(ThreadedCluster(cluster, trio.lowlevel.current_trio_token()))
            await stop.wait()

    def target() -> None:
        try:
            trio.run(main)
        except BaseException as exc:
            ready.put(exc)

    thread = threading.Thread(target=target, name="trio-kafka-broker", daemon=True)
    thread.start()
    started = ready.get(timeout=30)
    if isinstance(started, BaseException):
        raise RuntimeError("the mock broker failed to start") from started
    try:
        yield started
    finally:
        trio.from_thread.run_sync(stop_holder[0].set, trio_token=started.token)
        thread.join(timeout=30)
