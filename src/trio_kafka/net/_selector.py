"""The shared selector: every broker connection of a process, in one object.

Theory of operation
-------------------
Any number of producers share one `KafkaSelector` (the "KafkaSelector" of the producer
API proposal in the seeds). It owns, per node, at most one `BrokerConnection`, and the
cluster metadata that says which node is where.

- Nodes: bootstrap servers are pseudo-nodes with ids -1, -2, ...; real node ids come from
  Metadata responses. A node's connection is opened lazily, on the first `connection()`
  for it; concurrent callers share one `Attempt`. An attempt (`_open_node`) connects
  through the injected `Transport` (bounded by `connection_setup_timeout`), negotiates
  versions with ApiVersions and authenticates with SASL when configured (`_sasl.py`);
  only then is the connection handed out. A failure names the node and, for TLS and
  refused connections, what to check.
- Listeners that want TLS or SASL, met by a client without them, are told at once
  rather than retried until `max_block` (`AuthenticationError`, naming
  `security_protocol`): nothing listening (connect refused) or a hang may be a broker
  starting, and stays a retriable `BrokerConnectionError`, but something that answered
  is known. A TLS listener answers our plaintext ApiVersions with a TLS alert (bytes
  that are not Kafka: refused at the first answer) or closes at once; a SASL listener
  answers ApiVersions and closes at the first request before authentication. A close
  can also be a broker going down, so it takes `LISTENER_CLOSES` in a row, each an
  orderly end of stream: a reset (what the simulator's network faults make), a refused
  connect or a hang starts the count again.
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
- Waiting for a topic (`wait_for_topic`): refresh until the topic has partitions, or
  say why it never will: invalid (at the first answer), unknown after
  `UNKNOWN_TOPIC_ANSWERS` answers over `TOPIC_PROPAGATION` seconds, or no broker
  answering at all (then the address, not the topic, is what is wrong).
- Idle reaping: a background task closes connections with nothing in flight and no
  traffic for `connections_max_idle`.

The background tasks and the connections' reader tasks run in a task group of the
selector's own, started inside the task group (a trio nursery is one too) the caller gives
to `start()` (`open_selector()` does both);
`aclose()` closes every connection and ends them. The options are `SelectorConfig`'s
(names and defaults follow the Java client's).
"""

from __future__ import annotations

import contextlib
import functools
import math
import random
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Any

import anyio
import anyio.abc
import attrs

from trio_kafka.core import (
    ExponentialBackoff,
    must_be_flag,
    must_be_positive,
    must_be_str,
    must_not_be_negative,
)
from trio_kafka.errors import (
    AuthenticationError,
    BrokerConnectionError,
    ConnectionLostError,
    ErrorCode,
    InvalidTopicError,
    KafkaError,
    ProtocolError,
    RequestTooLargeError,
    TopicAuthorizationError,
    UnknownTopicError,
    error_info,
)
from trio_kafka.net._clock import Clock, LoopClock, TaskGroup, default_rng, primitives, sleep_until
from trio_kafka.net._connection import (
    DEFAULT_MAX_FRAME_SIZE,
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_REQUEST_TIMEOUT,
    STREAM_ERRORS,
    ApiVersionsInfo,
    BrokerConnection,
    PendingResponse,
    TcpTransport,
    Transport,
    negotiate,
    root_error,
)
from trio_kafka.net._groups import only_error
from trio_kafka.net._metadata import (
    BrokerMetadata,
    ClusterMetadata,
    TopicMetadata,
    check_topic_name,
    parse_bootstrap,
)
from trio_kafka.net._sasl import SaslConfig, authenticate
from trio_kafka.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic

# -- configuration ---------------------------------------------------------------------------------


def _bootstrap(value: str | Iterable[str]) -> tuple[tuple[str, int], ...]:
    return tuple(parse_bootstrap(value))


@attrs.frozen(slots=True)
class SelectorConfig:
    """Times are seconds (floats), as everywhere in trio."""

    #: "host:port,host:port" or a list of "host:port": where to find the first broker.
    bootstrap_servers: tuple[tuple[str, int], ...] = attrs.field(converter=_bootstrap)
    client_id: str = attrs.field(default="trio-kafka", validator=must_be_str)
    #: request.timeout.ms: how long a written request may wait for its response.
    request_timeout: float = attrs.field(
        default=DEFAULT_REQUEST_TIMEOUT, validator=must_be_positive
    )
    #: max.in.flight.requests.per.connection.
    max_in_flight: int = attrs.field(default=DEFAULT_MAX_IN_FLIGHT, validator=must_be_positive)
    #: reconnect.backoff.ms and reconnect.backoff.max.ms (50 ms, 1 s).
    reconnect_backoff: float = attrs.field(default=0.05, validator=must_not_be_negative)
    reconnect_backoff_max: float = attrs.field(default=1.0, validator=must_not_be_negative)
    #: retry.backoff.ms and retry.backoff.max.ms (100 ms, 1 s): between metadata retries.
    retry_backoff: float = attrs.field(default=0.1, validator=must_not_be_negative)
    retry_backoff_max: float = attrs.field(default=1.0, validator=must_not_be_negative)
    #: connections.max.idle.ms (9 minutes).
    connections_max_idle: float = attrs.field(default=540.0, validator=must_be_positive)
    #: metadata.max.age.ms (5 minutes).
    metadata_max_age: float = attrs.field(default=300.0, validator=must_be_positive)
    #: metadata.max.idle.ms (5 minutes): a topic unused this long leaves the metadata.
    metadata_max_idle: float = attrs.field(default=300.0, validator=must_be_positive)
    #: max.block.ms: how long to wait for a topic to appear in the metadata.
    max_block: float = attrs.field(default=60.0, validator=must_not_be_negative)
    #: socket.connection.setup.timeout.ms: TCP connect plus TLS handshake.
    connection_setup_timeout: float = attrs.field(default=10.0, validator=must_be_positive)
    #: allow.auto.create.topics (the producer's default is true).
    allow_auto_create_topics: bool = attrs.field(default=True, validator=must_be_flag)
    sasl: SaslConfig | None = None
    max_frame_size: int = attrs.field(default=DEFAULT_MAX_FRAME_SIZE, validator=must_be_positive)


# -- the selector's bookkeeping -------------------------------------------------------------------


@attrs.define(eq=False)
class Attempt:
    """One connection attempt; everyone waiting for the node waits for it."""

    done: anyio.Event = attrs.field(factory=anyio.Event)
    connection: BrokerConnection | None = None
    error: BaseException | None = None


@attrs.define(eq=False)
class Node:
    node_id: int
    host: str
    port: int
    #: The open (negotiated, authenticated) connection, None when there is none.
    connection: BrokerConnection | None = None
    info: ApiVersionsInfo | None = None
    #: The attempt in progress, None when none is.
    attempt: Attempt | None = None
    #: Consecutive failed attempts (and drops) since the last successful setup.
    failures: int = 0
    #: Clock time before which no new attempt starts.
    retry_at: float = -math.inf
    last_error: BaseException | None = None
    #: Consecutive connections the peer closed in order before they answered a request
    #: past ApiVersions, and whether the last had answered ApiVersions: a TLS listener
    #: met in plaintext closes at once, a SASL one at the first request (`_note_closed`).
    closed_unused: int = 0
    closed_after_api_versions: bool = False
    #: The largest request the last of them had written (bytes): a broker also closes
    #: at a request above its socket.request.max.bytes.
    closed_request_size: int = 0
    # Connections we closed on purpose (idle, address change): no backoff for them.
    deliberate: set[int] = attrs.field(factory=set)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def ready(self) -> bool:
        return self.connection is not None and self.connection.is_open


@attrs.define(eq=False)
class Interest:
    """The topics whose metadata a selector keeps, and when each was last used (an
    insertion-ordered dict: the same order every run). A topic unused for
    `metadata_max_idle` is dropped at the next refresh of all of them (Java's
    metadata.max.idle.ms), so a producer that once wrote to thousands of topics does
    not ask for them all every `metadata_max_age`."""

    last_used: dict[str, float] = attrs.field(factory=dict)
    # Topics named since the last request started (the next asks for them), and
    # whether a refresh of all of them was asked for.
    queued: set[str] = attrs.field(factory=set)
    queued_all: bool = False

    def ask(self, topics: frozenset[str], now: float) -> None:
        """`topics` are wanted (they join the topics of interest); none: all of them."""
        for topic in sorted(topics):
            self.last_used[topic] = now
        if topics:
            self.queued.update(topics)
        else:
            self.queued_all = True

    def next_refresh(self, now: float, idle: float) -> Refresh:
        """The request for what was asked since the last one started."""
        full, expired = self.queued_all, frozenset[str]()
        if full:
            expired = self.expire(now, idle)
        asked = frozenset(self.last_used if full else self.queued)
        self.queued.clear()
        self.queued_all = False
        return Refresh(asked, full=full, expired=expired)

    def shared(self, topics: frozenset[str]) -> None:
        """A request already out covers `topics` (none: all): not asked for again."""
        if topics:
            self.queued -= topics
        else:
            self.queued_all = False

    def touch(self, topics: list[str], now: float) -> None:
        """`topics` were just used (a batch sent, a read): keep them."""
        last_used = self.last_used
        for topic in topics:
            if topic in last_used:
                last_used[topic] = now

    def expire(self, now: float, idle: float) -> frozenset[str]:
        """Drop and return the topics unused for more than `idle` seconds."""
        gone = [topic for topic, used in self.last_used.items() if now - used > idle]
        for topic in gone:
            del self.last_used[topic]
        return frozenset(gone)

    def __iter__(self) -> Iterator[str]:
        return iter(self.last_used)

    def __len__(self) -> int:
        return len(self.last_used)


@attrs.define(eq=False)
class Refresh:
    """One Metadata request in progress; `topics` None means every topic. `full`: it
    asks for every topic of interest (not only topics named by a caller); `expired`:
    topics it drops from the metadata (no longer of interest)."""

    topics: frozenset[str] | None
    full: bool = False
    expired: frozenset[str] = frozenset()
    done: anyio.Event = attrs.field(factory=anyio.Event)
    error: BaseException | None = None

    def covers(self, topics: frozenset[str]) -> bool:
        return self.topics is None or self.topics >= topics


# wait_for_topic: this many Metadata answers saying UNKNOWN_TOPIC_OR_PARTITION (the
# broker did not auto-create it), spread over at least TOPIC_PROPAGATION seconds, end the
# wait before max_block. Topic creation reaches the brokers asynchronously, so one answer
# is not enough (librdkafka waits topic.metadata.propagation.max.ms, 30 s, for this);
# the window is short because a user waiting on a typo'd topic waits all of it.
UNKNOWN_TOPIC_ANSWERS = 3
TOPIC_PROPAGATION = 2.0


# -- the selector ----------------------------------------------------------------------------------


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
    # The one backoff (core/_backoff.py): reconnects with `reconnect_backoff` and
    # `reconnect_backoff_max`, metadata retries and topic waits with `retry_backoff` and
    # `retry_backoff_max`; each delay drawn from `rng`.
    _reconnect_backoff: ExponentialBackoff = attrs.field(init=False)
    _retry_backoff: ExponentialBackoff = attrs.field(init=False)
    _nursery: TaskGroup | None = attrs.field(default=None, init=False)
    _closed: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        self._reconnect_backoff = ExponentialBackoff(
            self.config.reconnect_backoff, self.config.reconnect_backoff_max
        )
        self._retry_backoff = ExponentialBackoff.of(self.config)
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
        with primitives().scope(shield=True):
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

    async def negotiated_versions(self, node_id: int | None = None) -> ApiVersionsInfo:
        """What `node_id` (default: the least loaded node) said in ApiVersions, connecting
        to it first if need be (e.g. `supports_cas`: the expected-offset extension)."""
        if node_id is None:
            node_id = self.least_loaded_node()
        await self.connection(node_id)
        info = self._node(node_id).info
        assert info is not None  # (set with the connection, kept after it)
        return info

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
            connection, info = await _open_node(
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
        node.retry_at = self.clock.now() + self._reconnect_backoff.backoff(node.failures, self.rng)
        node.failures += 1
        if error is not None:
            node.last_error = error

    def _connection_closed(self, node: Node, connection: BrokerConnection) -> None:
        """`connection` (the node's) closed: forget it; unless we closed it on purpose,
        count a failure (the reconnect backs off)."""
        if node.connection is connection:
            node.connection = None
        _note_closed(node, connection)  # a SASL listener closing us (the module doc)
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
        saying INVALID_TOPIC_EXCEPTION and `TopicAuthorizationError` at the first saying
        TOPIC_AUTHORIZATION_FAILED (Java's `maybeThrowExceptionForTopic`), and
        `UnknownTopicError` after `UNKNOWN_TOPIC_ANSWERS` answers over `TOPIC_PROPAGATION`
        seconds saying the topic does not exist (the broker did not auto-create it; a
        few answers, not one, because a topic just created elsewhere takes a moment to
        reach every broker). Otherwise,
        after `timeout` (default `max_block`), `UnknownTopicError`, or
        `BrokerConnectionError` (naming the addresses) when no broker has ever
        answered: then the address, not the topic, is what is wrong."""
        found = self.metadata.topic(topic)
        if found is None:
            check_topic_name(topic)  # a known topic is valid: checked only when unknown
        timeout = self.config.max_block if timeout is None else timeout
        deadline = self.clock.now() + timeout
        retry = self._retry_backoff
        attempts = 0
        unknown_answers = 0
        unknown_since: float | None = None
        last_error: BaseException | None = None
        while found is None or not found.is_usable:
            with primitives().scope(deadline=deadline):
                try:
                    await self.refresh_metadata([topic])
                except BrokerConnectionError as exc:
                    last_error = exc
                else:
                    found = self.metadata.topic(topic)
                    code = ErrorCode.NONE if found is None else found.error_code
                    if code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                        # An ACL, not time, is missing (Java's maybeThrowExceptionForTopic).
                        raise TopicAuthorizationError(topic=topic, metadata=True)
                    if code == ErrorCode.INVALID_TOPIC_EXCEPTION:
                        raise InvalidTopicError(
                            f"topic {topic!r} is invalid: the broker answers "
                            "INVALID_TOPIC_EXCEPTION for it (a reserved or illegal name)",
                            topic=topic,
                        )
                    if found is None or code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                        if unknown_since is None:
                            unknown_since = self.clock.now()
                        unknown_answers += 1
                        if (
                            unknown_answers >= UNKNOWN_TOPIC_ANSWERS
                            and self.clock.now() - unknown_since >= TOPIC_PROPAGATION
                        ):
                            elapsed = timeout - max(deadline - self.clock.now(), 0.0)
                            raise UnknownTopicError(
                                _unknown_topic_message(self, topic, elapsed, found, None),
                                topic=topic,
                            )
                found = self.metadata.topic(topic)
                if found is not None and found.is_usable:
                    break
                await anyio.sleep(retry.backoff(attempts, self.rng))
                attempts += 1
            if self.clock.now() >= deadline:
                message = _unknown_topic_message(self, topic, timeout, found, last_error)
                if self.metadata.updated_at is None:
                    raise BrokerConnectionError(message) from last_error
                raise UnknownTopicError(message, topic=topic)
        return found

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
        """Ask the candidates in order, hedged (`_ask_for_metadata`), and apply the answer
        (without the `expired` topics)."""
        response = await _ask_for_metadata(
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
        """Nodes in the order to ask (`_candidates`)."""
        nodes = list(self._nodes.values())
        return _candidates(nodes, self.metadata, self.rng, self.clock.now())

    def request_refresh(self) -> None:
        """Start a metadata refresh in the background (shared with any in progress) and
        return at once: what the producer calls when an error `invalidates_metadata`."""
        self._service_nursery().start_soon(self._refresh_quietly)

    async def _refresh_quietly(self) -> None:
        with contextlib.suppress(KafkaError):
            await self.refresh_metadata()

    async def _refresh_when_old(self) -> None:
        retry = self._retry_backoff
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


# -- setting up one connection ----------------------------------------------------------------------


async def _open_node(
    node: Node,
    *,
    transport: Transport,
    config: SelectorConfig,
    clock: Clock,
    rng: random.Random,
    tasks: TaskGroup,
) -> tuple[BrokerConnection, ApiVersionsInfo]:
    """A set-up connection to `node`: after its backoff, connected through `transport`
    (within `connection_setup_timeout`), its reader started in `tasks`, versions
    negotiated, SASL done when configured. Raises `BrokerConnectionError` (or
    `AuthenticationError`) naming the node."""
    if node.retry_at > clock.now():
        await sleep_until(node.retry_at)
    where = f"node {node.node_id} at {node.address}"
    refusal = _listener_refusal(node)
    if refusal is not None:
        raise refusal
    stream = None
    try:
        with anyio.move_on_after(config.connection_setup_timeout):
            stream = await transport.connect(node.host, node.port)
    except STREAM_ERRORS as exc:
        node.closed_unused = 0
        cause = root_error(exc)
        if isinstance(cause, ssl.SSLCertVerificationError):
            raise AuthenticationError(
                f"TLS certificate of {where} failed verification: {cause.verify_message}"
            ) from exc
        hint = (
            " (nothing listens there: is the broker running, at this host and port?)"
            if isinstance(cause, ConnectionRefusedError)
            else ""
        )
        raise BrokerConnectionError(f"cannot connect to {where}: {cause}{hint}") from exc
    if stream is None:
        node.closed_unused = 0
        raise BrokerConnectionError(
            f"cannot connect to {where}: no connection within {config.connection_setup_timeout} s"
        )
    connection = BrokerConnection(
        stream,
        node.host,
        node.port,
        node_id=node.node_id,
        client_id=config.client_id,
        clock=clock,
        max_in_flight=config.max_in_flight,
        request_timeout=config.request_timeout,
        max_frame_size=config.max_frame_size,
    )
    connection.start(tasks)
    try:
        info = await negotiate(connection)
        if config.sasl is not None:
            await authenticate(connection, config.sasl, rng)
    except AuthenticationError:
        await connection.aclose()
        raise
    except KafkaError as exc:
        await connection.aclose()
        refusal = _not_plaintext_kafka(node, connection)
        if refusal is not None:
            raise refusal from exc
        raise BrokerConnectionError(f"setting up the connection to {where} failed: {exc}") from exc
    except BaseException:
        await connection.aclose()
        raise
    return connection, info


#: Connections in a row a node's peer closes in order, before answering past
#: ApiVersions, that make it "a TLS or SASL listener" rather than a broker going down.
LISTENER_CLOSES = 3
#: Above this many bytes, the request such a peer closed at says "too large for the
#: broker" rather than "a SASL listener": a client's first requests (Metadata,
#: InitProducerId, ...) are far smaller, and a broker's socket.request.max.bytes is
#: rarely set below a megabyte (Kafka's max.request.size default).
LARGE_REQUEST = 1024 * 1024

_SASL_OPTIONS = "sasl_mechanism, sasl_plain_username and sasl_plain_password"


def _note_closed(node: Node, connection: BrokerConnection) -> None:
    """Count `connection`'s end towards `LISTENER_CLOSES`: the peer closed it in order
    before it answered anything past ApiVersions (with SASL configured, setup alone
    answers more); any other end starts the count again."""
    if connection.closed_by_peer and connection.answered <= 1:
        node.closed_unused += 1
        node.closed_after_api_versions = connection.answered == 1
        node.closed_request_size = connection.largest_request
    else:
        node.closed_unused = 0


def _not_plaintext_kafka(
    node: Node, connection: BrokerConnection
) -> AuthenticationError | RequestTooLargeError | None:
    """Why `connection`'s setup failed, when it says the listener is not plaintext
    Kafka: bytes that are not a Kafka answer to ApiVersions (at once), or the closes
    `_note_closed` counts reaching `LISTENER_CLOSES`. None: an ordinary failure."""
    if not connection.api_versions and isinstance(connection.close_reason, ProtocolError):
        node.closed_unused = 0
        seen = " ".join(f"{b:02x}" for b in connection.first_bytes)
        # A TLS record starts with its content type (20-24: 0x15 an alert, 0x16 a
        # handshake) and the major version 3.
        tls = (
            len(connection.first_bytes) >= 2
            and 20 <= connection.first_bytes[0] <= 24
            and connection.first_bytes[1] == 3
        )
        return AuthenticationError(
            f"the broker at {node.address} answered ApiVersions with bytes that are not "
            f"Kafka ({seen or 'none'}{': a TLS record' if tls else ''}): is it a TLS or "
            "SASL_SSL listener? Set security_protocol='SSL' (or 'SASL_SSL' with "
            f"{_SASL_OPTIONS}) and ssl_cafile=..., or use the broker's plaintext port "
            f"(docs/security.md); it said: {connection.close_reason}"
        )
    _note_closed(node, connection)
    return _listener_refusal(node)


def _listener_refusal(node: Node) -> AuthenticationError | RequestTooLargeError | None:
    """The error for a node whose peer closed `LISTENER_CLOSES` connections in a row
    before answering past ApiVersions (the count starts again), else None: a request
    larger than `LARGE_REQUEST` was too large for the broker, anything else met a TLS
    or SASL listener."""
    closes = node.closed_unused
    if closes < LISTENER_CLOSES:
        return None
    node.closed_unused = 0
    size = node.closed_request_size
    if node.closed_after_api_versions and size > LARGE_REQUEST:
        return RequestTooLargeError(
            f"the broker at {node.address} answered ApiVersions, then closed the "
            f"connection at a request of {size:,} bytes, {closes} times in a row: a "
            "broker closes a connection whose request is larger than its "
            "socket.request.max.bytes (104,857,600 bytes unless set otherwise). Lower "
            "max_request_size below the broker's limit (each request carries at most "
            "that many bytes of batches), or raise socket.request.max.bytes on the broker",
            request_size=size,
        )
    if node.closed_after_api_versions:
        return AuthenticationError(
            f"the broker at {node.address} answered ApiVersions, then closed the "
            f"connection at the first request, {closes} times in a row: is it a SASL "
            "listener? A SASL listener closes a client that has not authenticated. Set "
            f"security_protocol='SASL_PLAINTEXT' (or 'SASL_SSL' over TLS) with "
            f"{_SASL_OPTIONS}, or sasl=SaslConfig(...) (docs/security.md)"
        )
    return AuthenticationError(
        f"the broker at {node.address} closed the connection on ApiVersions, before "
        f"answering anything, {closes} times in a row: is it a TLS or SASL_SSL listener? "
        "A TLS listener closes a plaintext client at once. Set security_protocol='SSL' "
        f"(or 'SASL_SSL' with {_SASL_OPTIONS}) and ssl_cafile=..., or use the broker's "
        "plaintext port (docs/security.md); a broker that limits connections from one "
        "address (max.connections.per.ip) closes them this way too"
    )


# -- asking for metadata -----------------------------------------------------------------------------

#: How long a metadata refresh waits for a connection to come up before it also asks
#: the next candidate (the attempt goes on). A healthy connect and ApiVersions take
#: milliseconds; a blackholed address takes `connection_setup_timeout` to fail.
_HEDGE_DELAY = 1.0


def _candidates(
    nodes: list[Node], metadata: ClusterMetadata, rng: random.Random, now: float
) -> list[Node]:
    """Nodes in the order to ask: open connections by load, then the rest by when
    their backoff ends. Among the unconnected, metadata brokers come before
    bootstrap pseudo-nodes, which stay as the fallback (re-bootstrap) when every
    known broker fails."""
    offset = rng.randrange(len(nodes)) if nodes else 0
    nodes = nodes[offset:] + nodes[:offset]  # spread load; rng keeps it deterministic

    def key(node: Node) -> tuple[int, int, float]:
        # An open connection first, even to a bootstrap address: it answers now,
        # while a new connection may hang for connection_setup_timeout (sim
        # transactional seed 62 lost a send()'s max_block that way).
        if node.connection is not None and node.connection.is_open:
            return (0, 0, float(node.connection.in_flight))
        bootstrap = 1 if node.node_id < 0 and metadata.brokers else 0
        return (1, bootstrap, max(node.retry_at, now))

    return sorted(nodes, key=key)


async def _ask_for_metadata(
    config: SelectorConfig,
    connect: Callable[[int], Awaitable[BrokerConnection]],
    candidates: list[Node],
    topics: frozenset[str] | None,
) -> Any:
    """The first Metadata answer (for `topics`; None: every topic) from `candidates`,
    asked in order, each connected through `connect(node_id)`.
    A connection not up within `_HEDGE_DELAY` is
    left connecting (the attempt goes on in the background) and the next candidate
    is asked, so one hanging connect does not hold the refresh for the whole
    `connection_setup_timeout` while other brokers answer; the nodes left
    connecting get a last, full wait once every other candidate has failed."""
    tried: list[str] = []
    last_error: BaseException | None = None
    request = MetadataRequest(
        topics=None if topics is None else [MetadataRequestTopic(name=t) for t in sorted(topics)],
        allow_auto_topic_creation=config.allow_auto_create_topics,
    )
    hedge = min(_HEDGE_DELAY, config.connection_setup_timeout)
    queue = list(candidates)
    connecting: list[Node] = []
    while queue or connecting:
        # Waiting fully for a node left connecting comes last.
        node, hedged = (queue.pop(0), True) if queue else (connecting.pop(0), False)
        try:
            connection: BrokerConnection | None = None
            with anyio.move_on_after(hedge if hedged and (queue or connecting) else math.inf):
                connection = await connect(node.node_id)
            if connection is None:
                connecting.append(node)
                continue
            response = await connection.request(request)
        except AuthenticationError:
            raise
        except KafkaError as exc:
            last_error = exc
            tried.append(f"{node.address} ({type(root_error(exc)).__name__})")
            continue
        return response
    raise BrokerConnectionError(
        f"no broker answered Metadata; tried {', '.join(tried)}; last error: {last_error}"
    ) from last_error


# -- waiting for a topic ------------------------------------------------------------------------------


def _unknown_topic_message(
    selector: KafkaSelector,
    topic: str,
    timeout: float,
    found: TopicMetadata | None,
    last_error: BaseException | None,
) -> str:
    if found is not None and found.error_code:
        why = f"the brokers answer {error_info(found.error_code).name} for it"
    elif found is not None:
        why = "it has no partitions yet"
    elif selector.metadata.updated_at is None:
        # Nothing answered at all: the topic is not the problem, the address is.
        servers = ",".join(f"{host}:{port}" for host, port in selector.config.bootstrap_servers)
        why = (
            f" ({last_error})"
            if last_error is not None
            else " (connections hang or nothing answers on them)"
        )
        if last_error is not None and isinstance(last_error.__cause__, ConnectionLostError):
            # Connected, then closed by the other end: something listens there.
            return (
                f"no Kafka broker answered within {timeout:.1f} s, so topic {topic!r} could "
                f"not be looked up{why}. Something at {servers} accepts connections but "
                "closes them: a listener that requires SASL or TLS closes a client that "
                "has neither (set security_protocol=..., see docs/security.md), or it is "
                "not a Kafka broker"
            )
        return (
            f"no Kafka broker answered within {timeout:.1f} s, so topic {topic!r} could "
            f"not be looked up{why}. Is a broker running at {servers}? "
            "Check the host and port (bootstrap=), or start "
            "trio-kafka's mock broker there: `trio-kafka broker --port "
            f"{selector.config.bootstrap_servers[0][1]}`"
        )
    else:
        why = "the brokers do not know it"
    return (
        f"topic {topic!r} is not in the metadata after {timeout:.1f} s ({why}). Create "
        "it (CreateTopics, `kafka-topics.sh --create`, trio_kafka.client.create_topic), "
        "enable auto-creation on the broker, or check the topic name and the client's ACLs"
    )
