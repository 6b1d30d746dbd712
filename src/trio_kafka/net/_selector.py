"""The shared selector: every broker connection of a process, in one object.

Theory of operation
-------------------
Any number of producers share one `KafkaSelector` (the "KafkaSelector" of the producer
API proposal in the seeds). It owns, per node, at most one `BrokerConnection`, and the
cluster metadata that says which node is where.

- Nodes: bootstrap servers are pseudo-nodes with ids -1, -2, ...; real node ids come from
  Metadata responses. A node's connection is opened lazily, on the first `connection()`
  for it; concurrent callers share one attempt. An attempt connects through the injected
  `Transport` (bounded by `connection_setup_timeout`), negotiates versions with
  ApiVersions and authenticates with SASL when configured; only then is the connection
  handed out.
- Backoff: a failed attempt, or a connection that drops, makes the node wait
  `reconnect_backoff * 2**failures` (jittered from the injected rng, capped at
  `reconnect_backoff_max`) before the next attempt; a successful setup resets the count.
- Metadata: `refresh_metadata()` asks a least-loaded node (an open connection with the
  fewest requests in flight, even a bootstrap one, else a node not backing off) for the
  topics of interest; a connection not up within `_HEDGE_DELAY` is left connecting and
  the next candidate is asked, so one blackholed broker cannot hold a refresh for the
  whole `connection_setup_timeout`.
  A refresh for named topics asks for those only (KIP-526), with any others named
  while a request was out; one without names asks for every topic of interest.
  Concurrent refreshes share a request that covers what they ask. A background task
  refreshes once the snapshot is `metadata_max_age` old. If every node fails, the error
  names every address tried and the last OS error.
- Idle reaping: a background task closes connections with nothing in flight and no
  traffic for `connections_max_idle`.

The background tasks and the connections' reader tasks run in a task group of the
selector's own, started inside the task group (a trio nursery is one too) the caller gives
to `start()` (`open_selector()` does both);
`aclose()` closes every connection and ends them.

Files: this one (the nodes, their connections and backoff, the metadata snapshot, the
background tasks), `_node_setup.py` (setting up one connection), `_metadata_ask.py`
(which node to ask for metadata, and the hedged asking), `_topic_wait.py` (waiting for a
topic), `_nodes.py` (the per-node bookkeeping).
"""

from __future__ import annotations

import contextlib
import functools
import math
import random
from collections.abc import AsyncIterator, Iterable
from typing import Any

import anyio
import anyio.abc
import attrs

from trio_kafka.errors import BrokerConnectionError, KafkaError
from trio_kafka.net._backoff import ExponentialBackoff
from trio_kafka.net._clock import Clock, LoopClock, TaskGroup, default_rng, primitives, sleep_until
from trio_kafka.net._config import SelectorConfig
from trio_kafka.net._connection import BrokerConnection
from trio_kafka.net._groups import only_error
from trio_kafka.net._metadata import (
    BrokerMetadata,
    ClusterMetadata,
    TopicMetadata,
)
from trio_kafka.net._metadata_ask import ask_for_metadata, metadata_candidates
from trio_kafka.net._node_setup import note_closed, open_node
from trio_kafka.net._nodes import Attempt, Interest, Node, Refresh
from trio_kafka.net._pending import PendingResponse
from trio_kafka.net._topic_wait import wait_for_topic
from trio_kafka.net._transport import TcpTransport, Transport
from trio_kafka.net._versions import ApiVersionsInfo


@attrs.define(eq=False)
class KafkaSelector:
    """Owns every broker connection of a process. Build it, then `await start(nursery)`
    (or use `open_selector()`)."""

    config: SelectorConfig
    transport: Transport = attrs.field(factory=TcpTransport)
    clock: Clock = attrs.field(factory=LoopClock)
    rng: random.Random = attrs.field(factory=lambda: default_rng(None))

    #: The latest metadata snapshot (replaced whole on each refresh).
    metadata: ClusterMetadata = attrs.field(factory=ClusterMetadata, init=False)
    # Node id -> node; bootstrap pseudo-nodes have negative ids. Insertion-ordered dict
    # (never a set) so iteration order, and thus a simulated run, is deterministic.
    _nodes: dict[int, Node] = attrs.field(factory=dict, init=False)
    # Topics whose metadata we keep, with when each was last used.
    _interest: Interest = attrs.field(factory=Interest, init=False)
    _refresh: Refresh | None = attrs.field(default=None, init=False)
    # Where `metadata_max_age` counts from: the last refresh of all topics of interest
    # (or the first one); as Java's, new topics' refreshes do not put it off.
    _aged_from: float | None = attrs.field(default=None, init=False)
    _last_refresh_attempt: float = attrs.field(default=-math.inf, init=False)
    # Consecutive failed refreshes (spaces the age task's retries).
    _refresh_failures: int = attrs.field(default=0, init=False)
    _backoff: ExponentialBackoff = attrs.field(init=False)
    _nursery: TaskGroup | None = attrs.field(default=None, init=False)
    _closed: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        self._backoff = ExponentialBackoff(
            self.config.reconnect_backoff, self.config.reconnect_backoff_max
        )
        for index, (host, port) in enumerate(self.config.bootstrap_servers):
            node_id = -1 - index
            self._nodes[node_id] = Node(node_id, host, port)

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self, tasks: TaskGroup) -> None:
        """Start the background tasks in a task group of ours inside `tasks`."""
        await tasks.start(self._serve)

    async def _serve(
        self, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        async with primitives().task_group() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._reap_idle, name="kafka-idle-reaper")
            nursery.start_soon(self._refresh_when_old, name="kafka-metadata-age")
            task_status.started()

    async def aclose(self) -> None:
        """Close every connection and stop the background tasks."""
        self._closed = True
        # Shielded: under cancellation the first close would raise Cancelled and leave
        # the other sockets open (each close is forceful: it never waits on the network).
        with anyio.CancelScope(shield=True):
            for node in list(self._nodes.values()):
                if node.connection is not None:
                    node.deliberate.add(id(node.connection))
                    await node.connection.aclose()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    # -- connections ----------------------------------------------------------------------------

    @property
    def node_ids(self) -> list[int]:
        return list(self._nodes)

    def node_address(self, node_id: int) -> str:
        return self._node(node_id).address

    def api_versions(self, node_id: int) -> ApiVersionsInfo | None:
        """What the node said in ApiVersions on its current (or last) connection."""
        return self._node(node_id).info

    async def connection(self, node_id: int) -> BrokerConnection:
        """The node's open connection, opening it (after any backoff) if needed.

        Raises `BrokerConnectionError` (retriable) when the attempt fails and
        `AuthenticationError` when the broker refuses our credentials or certificate.
        """
        node = self._node(node_id)
        while True:
            if self._closed:
                raise BrokerConnectionError("the selector is closed")
            if node.connection is not None and node.connection.is_open:
                return node.connection
            attempt = node.attempt
            if attempt is None:
                attempt = node.attempt = Attempt()
                self._service_nursery().start_soon(self._connect, node, attempt)
            await attempt.done.wait()
            if attempt.error is not None:
                raise attempt.error
            # Success; loop to hand out the connection (or retry if it already dropped).

    async def send(
        self,
        node_id: int,
        message: Any,
        *,
        version: int | None = None,
        timeout: float | None = None,
    ) -> PendingResponse:
        """Write `message` to the node; the response is awaited later (pipelining)."""
        connection = await self.connection(node_id)
        return await connection.send(message, version=version, timeout=timeout)

    async def request(
        self,
        node_id: int,
        message: Any,
        *,
        version: int | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Send `message` to the node and wait for its response."""
        connection = await self.connection(node_id)
        return await connection.request(message, version=version, timeout=timeout)

    def is_ready(self, node_id: int) -> bool:
        """True when the node has an open, set-up connection (never blocks)."""
        return self._node(node_id).ready

    def retry_at(self, node_id: int) -> float:
        """Clock time before which no new connection attempt to the node starts."""
        return self._node(node_id).retry_at

    async def disconnect(self, node_id: int) -> None:
        """Close the node's connection on purpose (no reconnect backoff): its requests in
        flight fail with ConnectionLostError."""
        node = self._node(node_id)
        connection, node.connection = node.connection, None
        if connection is not None:
            node.deliberate.add(id(connection))
            await connection.aclose()

    def least_loaded_node(self) -> int:
        """A node to ask for cluster-wide things: an open connection with the fewest
        requests in flight, else the node whose backoff ends first (ties: rng)."""
        candidates = self._metadata_candidates()
        return candidates[0].node_id

    async def _connect(self, node: Node, attempt: Attempt) -> None:
        try:
            connection, info = await open_node(
                node,
                transport=self.transport,
                config=self.config,
                clock=self.clock,
                rng=self.rng,
                tasks=self._service_nursery(),
            )
        except Exception as exc:
            self._record_failure(node, exc)
            attempt.error = exc
        except BaseException:
            # Cancelled (the selector is closing): waiters get a plain error, not our
            # Cancelled, which must only propagate in this task.
            attempt.error = BrokerConnectionError(
                f"connecting to node {node.node_id} at {node.address} was cancelled"
            )
            raise
        else:
            node.connection, node.info, node.failures = connection, info, 0
            node.last_error = None
            attempt.connection = connection
            connection.on_close(functools.partial(self._connection_closed, node))
        finally:
            node.attempt = None
            attempt.done.set()

    def _record_failure(self, node: Node, error: BaseException | None) -> None:
        node.retry_at = self.clock.now() + self._backoff.backoff(node.failures, self.rng)
        node.failures += 1
        if error is not None:
            node.last_error = error

    def _connection_closed(self, node: Node, connection: BrokerConnection) -> None:
        """`connection` (the node's) closed: forget it; unless we closed it on purpose,
        count a failure (the reconnect backs off)."""
        if node.connection is connection:
            node.connection = None
        note_closed(node, connection)  # a SASL listener closing us: `_node_setup.py`
        if id(connection) in node.deliberate:
            node.deliberate.discard(id(connection))
        else:
            self._record_failure(node, connection.close_reason)

    def _node(self, node_id: int) -> Node:
        try:
            return self._nodes[node_id]
        except KeyError:
            raise KeyError(
                f"unknown node {node_id}; known: {sorted(self._nodes)} (refresh the metadata?)"
            ) from None

    def _service_nursery(self) -> TaskGroup:
        if self._nursery is None:
            raise RuntimeError("the selector is not started: use open_selector() or start()")
        return self._nursery

    # -- metadata -------------------------------------------------------------------------------

    async def refresh_metadata(self, topics: Iterable[str] = ()) -> ClusterMetadata:
        """Fetch fresh metadata: with `topics`, for those (they join the topics of
        interest) and any named while a request was out, in one request (KIP-526: a
        producer meeting its 1,000th topic does not ask again for the 999 it knows,
        aiokafka#943); without, for every topic of interest. A request in progress that
        covers what is asked is shared."""
        wanted = frozenset(topics)
        interest = self._interest
        interest.ask(wanted, self.clock.now())
        while True:
            refresh = self._refresh
            if refresh is None:
                refresh = interest.next_refresh(self.clock.now(), self.config.metadata_max_idle)
                self._refresh = refresh
                self._service_nursery().start_soon(self._run_refresh, refresh)
            if refresh.full if not wanted else refresh.covers(wanted):
                interest.shared(wanted)
                break
            await refresh.done.wait()
        await refresh.done.wait()
        if refresh.error is not None:
            raise refresh.error
        return self.metadata

    async def wait_for_topic(self, topic: str, *, timeout: float | None = None) -> TopicMetadata:
        """The topic's metadata, refreshing until it has partitions.

        Fails fast when waiting cannot help: `InvalidTopicError` at the first answer
        saying INVALID_TOPIC_EXCEPTION (Java's `maybeThrowExceptionForTopic`), and
        `UnknownTopicError` after `UNKNOWN_TOPIC_ANSWERS` answers over `TOPIC_PROPAGATION`
        seconds saying the topic does not exist (the broker did not auto-create it; a
        few answers, not one, because a topic just created elsewhere takes a moment to
        reach every broker). Otherwise,
        after `timeout` (default `max_block`), `UnknownTopicError`, or
        `BrokerConnectionError` (naming the addresses) when no broker has ever
        answered: then the address, not the topic, is what is wrong."""
        return await wait_for_topic(self, topic, timeout)

    async def _run_refresh(self, refresh: Refresh) -> None:
        self._last_refresh_attempt = self.clock.now()
        try:
            await self._fetch_metadata(refresh.topics, refresh.expired)
        except Exception as exc:
            refresh.error = exc
            self._refresh_failures += 1
        else:
            self._refresh_failures = 0
            if refresh.full or self._aged_from is None:
                self._aged_from = self.clock.now()
        finally:
            self._refresh = None
            refresh.done.set()

    async def _fetch_metadata(
        self, topics: frozenset[str] | None, expired: frozenset[str] = frozenset()
    ) -> None:
        """Ask the candidates in order, hedged (`ask_for_metadata`), and apply the answer
        (without the `expired` topics)."""
        response = await ask_for_metadata(
            self.config, self.connection, self._metadata_candidates(), topics
        )
        self._apply_metadata(response, None if topics is None else topics | expired)

    def touch(self, topics: list[str]) -> None:
        """`topics` were just used (a batch sent, a read): their metadata is kept
        (`metadata_max_idle`)."""
        self._interest.touch(topics, self.clock.now())

    def apply_leaders(
        self,
        leaders: Iterable[tuple[str, int, int, int]],
        endpoints: Iterable[BrokerMetadata] = (),
    ) -> bool:
        """KIP-951: take the current leaders a Produce answer named (see
        `ClusterMetadata.with_leaders`) into the metadata without a refresh. Returns
        whether the snapshot changed."""
        updated = self.metadata.with_leaders(leaders, endpoints)
        if updated is self.metadata:
            return False
        self.metadata = updated
        for broker in updated.brokers.values():
            if broker.node_id not in self._nodes:
                self._nodes[broker.node_id] = Node(broker.node_id, broker.host, broker.port)
        return True

    def _apply_metadata(self, response: Any, topics: frozenset[str] | None) -> None:
        self.metadata = self.metadata.with_response(
            response, now=self.clock.now(), requested=topics
        )
        for broker in self.metadata.brokers.values():
            node = self._nodes.get(broker.node_id)
            if node is None:
                self._nodes[broker.node_id] = Node(broker.node_id, broker.host, broker.port)
            elif (node.host, node.port) != (broker.host, broker.port):
                # The broker moved: the old connection talks to someone else now.
                old = node.connection
                node.host, node.port, node.failures, node.retry_at = (
                    broker.host,
                    broker.port,
                    0,
                    -math.inf,
                )
                if old is not None:
                    node.deliberate.add(id(old))
                    node.connection = None
                    self._service_nursery().start_soon(old.aclose)

    def _metadata_candidates(self) -> list[Node]:
        """Nodes in the order to ask (`metadata_candidates`)."""
        nodes = list(self._nodes.values())
        return metadata_candidates(nodes, self.metadata, self.rng, self.clock.now())

    def request_refresh(self) -> None:
        """Start a metadata refresh in the background (shared with any in progress) and
        return at once: what the producer calls when an error `invalidates_metadata`."""
        self._service_nursery().start_soon(self._refresh_quietly)

    async def _refresh_quietly(self) -> None:
        with contextlib.suppress(KafkaError):
            await self.refresh_metadata()

    async def _refresh_when_old(self) -> None:
        retry = ExponentialBackoff(self.config.retry_backoff, self.config.retry_backoff_max)
        while True:
            updated = self._aged_from
            now = self.clock.now()
            if updated is not None and self._refresh_failures == 0:
                due = updated + self.config.metadata_max_age
            elif self._refresh_failures:
                due = self._last_refresh_attempt + retry.backoff(
                    self._refresh_failures - 1, self.rng
                )
            else:
                due = now + self.config.metadata_max_age  # nothing asked for yet
            await sleep_until(due)
            if updated is not None and self._aged_from != updated:
                continue  # someone else refreshed meanwhile
            if self._interest or self.metadata.updated_at is not None:
                await self._refresh_quietly()

        # -- idle connections -----------------------------------------------------------------------

    async def _reap_idle(self) -> None:
        idle = self.config.connections_max_idle
        while True:
            now = self.clock.now()
            wake = now + idle
            for node in list(self._nodes.values()):
                connection = node.connection
                if connection is None or not connection.is_open:
                    continue
                if connection.in_flight or connection.queued:
                    continue
                due = connection.last_activity + idle
                if due <= now:
                    node.deliberate.add(id(connection))
                    node.connection = None
                    await connection.aclose()
                else:
                    wake = min(wake, due)
            await sleep_until(wake)

    def __repr__(self) -> str:
        try:
            now = self.clock.now()
        except RuntimeError:  # repr outside a run (sniffio's error is a RuntimeError)
            now = -math.inf
        ready = sum(1 for n in self._nodes.values() if n.ready)
        connecting = sum(1 for n in self._nodes.values() if n.attempt is not None)
        backing_off = sum(
            1
            for n in self._nodes.values()
            if not n.ready and n.attempt is None and n.retry_at > now
        )
        state = "CLOSED" if self._closed else "OPEN"
        return (
            f"<KafkaSelector [{state}, nodes {len(self._nodes)}: ready {ready}, connecting "
            f"{connecting}, backing off {backing_off}; metadata: "
            f"{len(self.metadata.brokers)} brokers, {len(self.metadata.topics)} topics]>"
        )


@contextlib.asynccontextmanager
async def open_selector(
    bootstrap_servers: str | Iterable[str],
    *,
    transport: Transport | None = None,
    clock: Clock | None = None,
    rng: random.Random | None = None,
    **options: Any,
) -> AsyncIterator[KafkaSelector]:
    """A started selector, closed on exit. `options` are `SelectorConfig` fields."""
    config = SelectorConfig(bootstrap_servers=bootstrap_servers, **options)
    selector = KafkaSelector(
        config,
        transport=transport if transport is not None else TcpTransport(),
        clock=clock if clock is not None else LoopClock(),
        rng=default_rng(rng),
    )
    # The body's own exception comes out as raised, not in the nursery's group
    # (net/_groups.py): `except KafkaError` around `open_selector` must work.
    body_error: BaseException | None = None
    try:
        async with primitives().task_group() as nursery:
            await selector.start(nursery)
            try:
                yield selector
            except BaseException as exc:
                body_error = exc
                raise
            finally:
                await selector.aclose()
    except BaseExceptionGroup as group:
        if body_error is not None and only_error(group, body_error):
            raise body_error from body_error.__cause__
        raise
