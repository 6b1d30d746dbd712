"""The sender: Java's `Sender.runOnce` as one task, plus one writer and one reader task
per broker (`NodeSender`), which own the requests to that broker (`ProduceAttempt`s).

Theory of operation
-------------------
The sender task loops over one pass of the core (`ProducerCore`):

1. take the selector's newest metadata snapshot into the core (cheap: an identity check);
2. start InitProducerId in the background when the core needs a producer id (the first
   one, or a fresh one after its epoch is exhausted; epoch bumps are the core's own);
3. `expire(now)`, `ready(now)`: topics without a leader start a metadata refresh; ready
   nodes without an open connection start connecting (the loop is woken when done) or,
   after a failed attempt, wait for the selector's backoff (`retry_at`) to end: a node
   that is not connected never counts as sendable now, nor one whose last answer asked
   us to wait (`throttle_time_ms`, KIP-219: the broker mutes the channel meanwhile);
4. `drain(now, connected)`: each node's batches go to that node's `NodeSender`;
5. sleep until the core's next deadline or a node's backoff end, or until woken (a new
   batch opened by `send()`, a response handled, a connection opened, a producer id
   installed, flush or close). Never until `now` itself: a pass at the same instant with
   no event in between changes nothing, so every pass either makes progress or sleeps
   until virtual (or real) time moves.

A `NodeSender` owns the requests for one node, in drain order. Its writer task encodes
each request and writes it (`BrokerConnection.send`, which returns once the bytes are
out: pipelining up to `max_in_flight`, order kept by the connection's FIFO lock) and
asks the pending response to call back when it ends. The callback (`_answered`, in the
connection's reader task) feeds the answers to the core in the order the requests were
written: the oldest unsettled request first, and none before it has its answer (and a
NOT_LEADER_OR_FOLLOWER answer's current leader and its endpoint, KIP-951, to the
selector's metadata: the retries go there at once), so the core always sees a node's
answers in the order it sent the requests. (A reader task per node that awaited each
answer did the same with two more task switches per request.) A request that never
left (no connection) is settled with `sent=False` (retried, never ambiguous); one that
left and got no answer (connection lost, request timeout) with `sent=True` (retried
with the same sequence; ambiguous only when no retry is possible). `unsettled` lists every request not yet handed back to the
core, so closing can settle them all without waiting.
"""

from __future__ import annotations

import collections
import logging
import math
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

import anyio
import anyio.abc
import anyio.lowlevel
import attrs

from trio_kafka.client._producer_id import init_idempotent_producer_id
from trio_kafka.core import (
    ClusterView,
    ExponentialBackoff,
    ProducerBatch,
    ProducerCore,
    Settled,
)
from trio_kafka.errors import (
    BrokerConnectionError,
    ErrorCode,
    FatalError,
    KafkaError,
    ProducerFencedError,
)
from trio_kafka.net import (
    TOPIC_PROPAGATION,
    UNKNOWN_TOPIC_ANSWERS,
    BrokerConnection,
    BrokerMetadata,
    Clock,
    ClusterMetadata,
    Event,
    KafkaSelector,
    PendingResponse,
    TaskGroup,
    TopicMetadata,
    primitives,
)
from trio_kafka.protocol import ProduceAnswer, ProduceFrame, read_produce_answer

logger = logging.getLogger("trio_kafka.producer")


class Sender:
    """The sender task and everything it shares with its node senders."""

    def __init__(
        self,
        core: ProducerCore,
        selector: KafkaSelector,
        clock: Clock,
        nursery: TaskGroup,
        on_progress: Callable[[], None],
        on_fatal: Callable[[], None] = lambda: None,
        buggify: Callable[[str], bool] | None = None,
    ) -> None:
        self.core = core
        # The simulator's BUGGIFY hook (site name -> fire?); None outside simulations.
        self.buggify = buggify
        self.selector = selector
        self.clock = clock
        self.nursery = nursery
        # Called whenever batches reach a final state (flush, close and blocked sends wait).
        self._on_progress = on_progress
        # A transactional producer's coordinator loop (`serve_coordinator`): its wake-up,
        # and whether ready batches wait for it (asked after each pass).
        self._coordinator_wake: Callable[[], None] | None = None
        self._coordinator_needed: Callable[[], bool] = lambda: False
        # Called once when the producer hits a fatal error (send() stops taking records).
        self.on_fatal = on_fatal
        config = core.config
        self.request_timeout = config.request_timeout
        self._acks = config.acks
        self._timeout_ms = int(config.request_timeout * 1000)
        self._transactional_id = config.transactional_id
        self.nodes: dict[int, NodeSender] = {}
        # The backend's event and scope classes (net's `primitives`: resolved once).
        self.primitives = primitives()
        self._new_event = self.primitives.event
        # Set by wake(); the sender replaces it each time it goes to sleep.
        self._wake = self._new_event()
        self._metadata: ClusterMetadata | None = None
        # Topic -> (its metadata entry, the leaders worked out from it) (sync_metadata).
        self._leaders: dict[str, tuple[TopicMetadata, tuple[int, ...]]] = {}
        # Topics this producer knew that the metadata now says do not exist: topic ->
        # (clock time of the first such answer, answers so far, the last answer's entry).
        self._vanished: dict[str, tuple[float, int, TopicMetadata]] = {}
        # Topics the core must not see yet: records sent before their metadata came wait
        # to be placed first, in order (client/_unknown_topics.py; `release` ends the hold).
        self.held: set[str] = set()
        self._init_running = False
        # Set by the producer as it settles everything on close: no new tasks.
        self.closing = False
        self._refreshing = False
        self._last_refresh = -math.inf
        # Refreshes asked in a row for leaderless partitions (their backoff grows).
        self._leaderless_refreshes = 0
        self._retry = ExponentialBackoff.of(config)
        # Whether the core's fatal error was acted on (logged, sends refused, queue failed).
        self._fatal_handled = False

    def __repr__(self) -> str:
        return f"<Sender nodes={list(self.nodes.values())!r} {self.core!r}>"

    # -- waking ----------------------------------------------------------------------

    def serve_coordinator(self, wake: Callable[[], None], needed: Callable[[], bool]) -> None:
        """Serve a transaction's coordinator loop: `wake()` it whenever batches reach a
        final state (EndTxn waits for every batch), and after each pass of this loop in
        which `needed()` says ready batches wait for it (a partition to add to the
        transaction, or a failing transaction's batches to fail)."""
        self._coordinator_wake = wake
        self._coordinator_needed = needed

    def on_progress(self) -> None:
        """Batches reached a final state: wake whoever waits for that."""
        self._on_progress()
        if self._coordinator_wake is not None:
            self._coordinator_wake()

    def wake(self) -> None:
        self._wake.set()

    @property
    def wake_event(self) -> Event:
        """The event `send()` sets when it opens a batch (read each time: it changes)."""
        return self._wake

    # -- the loop --------------------------------------------------------------------

    async def run(self) -> None:
        core = self.core
        clock = self.clock
        while True:
            now = clock.now()
            self.sync_metadata()
            if core.fatal_error is not None:
                if not self._fatal_handled:
                    self.fatal(core.fatal_error)
                if core.fail_all(core.fatal_error):
                    self.on_progress()
            elif core.needs_producer_id and not self._init_running:
                self._init_running = True
                self.nursery.start_soon(self._init_producer_id)
            if core.expire(now):
                self.on_progress()
            if self._vanished and self.fail_vanished(now):
                self.on_progress()
            ready_nodes, delay, unknown = core.ready(now)
            if self._coordinator_wake is not None and self._coordinator_needed():
                self._coordinator_wake()
            # Clock time by which to look again without being woken.
            wake_at = now + delay
            if unknown:
                # Leaderless partitions: ask again once the backoff allows (the one
                # backoff, growing while they stay leaderless, as Java's metadata
                # refreshes since KIP-580; a refresh in progress wakes the loop).
                wait = self._retry.backoff(self._leaderless_refreshes, self.core.rng)
                running = self._refreshing
                wake_at = min(wake_at, self.refresh_metadata(unknown, wait=wait))
                if self._refreshing and not running:  # (one started)
                    self._leaderless_refreshes += 1
            else:
                self._leaderless_refreshes = 0
            connected = []
            for node_id in sorted(ready_nodes):
                node = self.node(node_id)
                if node.throttled_until > now:
                    wake_at = min(wake_at, node.throttled_until)  # KIP-219: wait it out
                elif node.ready:
                    connected.append(node_id)
                else:
                    # Not ready is not "ready now": wait for the attempt or its backoff.
                    wake_at = min(wake_at, node.connect(now))
            if connected:
                for node_id, batches in core.drain(now, connected).items():
                    self.selector.touch([batch.topic for batch in batches])
                    if self.buggify is not None:
                        self._buggify_drained(node_id, batches)
                    else:
                        self.nodes[node_id].submit(batches)
            event = self._wake
            if event.is_set():
                self._wake = self._new_event()
                await anyio.lowlevel.checkpoint()
                continue
            if wake_at == math.inf:
                await event.wait()
            else:
                # Never a deadline at `now`: this pass would run again unchanged (the core
                # is a function of its state and `now`; whatever runs in the background
                # wakes us), so waking at the same instant would spin there.
                with self.primitives.scope(deadline=max(wake_at, math.nextafter(now, math.inf))):
                    await event.wait()
            if self._wake is event:
                self._wake = self._new_event()

    def node(self, node_id: int) -> NodeSender:
        node = self.nodes.get(node_id)
        if node is None:
            node = self.nodes[node_id] = NodeSender(self, node_id)
            node.start(self.nursery)
        return node

    @property
    def fatal_error(self) -> KafkaError | None:
        """The error the producer stopped with (the core's: it owns it)."""
        return self.core.fatal_error

    def fatal(self, error: KafkaError) -> None:
        """The producer cannot go on: fail what is queued, refuse new sends. The first
        fatal error is the one kept (the core's, when it had one already)."""
        # Through the core, so the sequencing policy (a transaction) hears of it.
        self.core.set_fatal(error)
        if self._fatal_handled:
            return
        self._fatal_handled = True
        stopped = self.core.fatal_error
        assert stopped is not None
        if isinstance(stopped, ProducerFencedError) and self._transactional_id is not None:
            # Not a failure of this producer: a newer instance with its transactional id
            # took over (a failover, a commit log's new writer), as fencing is meant to.
            # Without a transactional id there is no newer instance: the broker refused
            # our epoch, a failure like any other (the error says why).
            logger.warning(
                "producer fenced: a newer producer with transactional id %r took over; "
                "this one sends nothing more (%s)",
                self._transactional_id,
                stopped,
            )
        else:
            logger.error("producer stopped by a fatal error: %s", stopped)
        self.on_fatal()
        self.core.fail_all(stopped)
        self.on_progress()
        self.wake()

    # -- BUGGIFY (simulator only) ----------------------------------------------------

    def write_timeout(self) -> float:
        """The request timeout of a produce write; BUGGIFY may make it tiny."""
        if self.buggify is not None and self.buggify("client.tiny_request_timeout"):
            return 0.001
        return self.request_timeout

    def _buggify_drained(self, node_id: int, batches: list[ProducerBatch]) -> None:
        """Submit drained batches, one request each when BUGGIFY splits them (more
        requests in flight, answered in order), with a forced metadata refresh maybe."""
        assert self.buggify is not None
        if self.buggify("client.forced_metadata_refresh"):
            self.refresh_metadata()
        if len(batches) > 1 and self.buggify("client.forced_batch_split"):
            self.core.split_request(node_id, len(batches))
            for batch in batches:
                self.nodes[node_id].submit([batch])
        else:
            self.nodes[node_id].submit(batches)

    def _buggify_epoch_bump(self, attempt: ProduceAttempt) -> None:
        """BUGGIFY: after a request that may still land (lost with its connection, timed
        out), bump the epoch of its partitions, as when its retry finds a sequence gap:
        the simulator then often meets a late request of an older epoch (seeds 709627,
        901616, 904005 needed that and an injected error together)."""
        assert self.buggify is not None
        seq = self.core.sequencing
        if not seq.enabled or seq.is_transactional:
            return  # (a transaction's bump aborts it: not a client fault to plant)
        if not self.buggify("client.forced_epoch_bump"):
            return
        for batch in attempt.batches:
            if batch.base_sequence >= 0 and not batch.done:
                seq.request_epoch_bump((batch.topic, batch.partition))

    # -- metadata --------------------------------------------------------------------

    def sync_metadata(self) -> None:
        """Give the core the selector's newest snapshot (when it changed), without the
        topics `held`."""
        metadata = self.selector.metadata
        if metadata is self._metadata:
            return
        self._metadata = metadata
        # A topic's leaders are worked out again only when its entry changed (snapshots
        # share the entries of topics a refresh did not touch): with thousands of
        # topics, each new topic's refresh would otherwise cost them all.
        known = self._leaders
        held = self.held
        leaders: dict[str, tuple[int, ...]] = {}
        for name, topic in metadata.topics.items():
            if held and name in held:
                continue
            cached = known.get(name)
            if cached is not None and cached[0] is topic:
                leaders[name] = cached[1]
            elif topic.is_usable:
                count = max(p.partition for p in topic.partitions) + 1
                nodes = [-1] * count
                for p in topic.partitions:
                    nodes[p.partition] = p.leader
                leaders[name] = tuple(nodes)
        self._leaders = {name: (metadata.topics[name], nodes) for name, nodes in leaders.items()}
        self.core.update_metadata(ClusterView(leaders))
        self._note_vanished(metadata, known)

    def _note_vanished(
        self,
        metadata: ClusterMetadata,
        known: dict[str, tuple[TopicMetadata, tuple[int, ...]]],
    ) -> None:
        """Count the answers saying a topic this producer knew does not exist (deleted:
        its batches would otherwise wait for a leader until `delivery_timeout`)."""
        vanished = self._vanished
        for name, topic in metadata.topics.items():
            if topic.error_code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                continue
            seen = vanished.get(name)
            if seen is None:
                if name in known:
                    vanished[name] = (self.clock.now(), 1, topic)
            elif seen[2] is not topic:  # (a new answer about it)
                vanished[name] = (seen[0], seen[1] + 1, topic)
        for name in [n for n in vanished if n in self._leaders or n not in metadata.topics]:
            del vanished[name]  # back (recreated), or no longer asked about

    def fail_vanished(self, now: float) -> bool:
        """Fail the queued batches of topics the metadata has said do not exist for
        `UNKNOWN_TOPIC_ANSWERS` answers over `TOPIC_PROPAGATION` seconds (the window in
        which a missing topic is told at `send()`): they would wait for a leader until
        `delivery_timeout` (the Java client waits so). Returns whether any failed."""
        failed = False
        for name, (since, answers, _) in self._vanished.items():
            if answers < UNKNOWN_TOPIC_ANSWERS or now - since < TOPIC_PROPAGATION:
                continue
            reason = (
                f"topic {name!r} no longer exists: the brokers have answered "
                f"UNKNOWN_TOPIC_OR_PARTITION for it for {now - since:.1f} s (was it deleted?)"
            )
            if self.core.fail_topic(name, reason):
                failed = True
        return failed

    def release(self, topics: Iterable[str]) -> None:
        """End the hold on `topics`: the core sees them from the next line on (and sees
        the newest snapshot)."""
        self.held.difference_update(topics)
        self._metadata = None
        self.sync_metadata()

    def refresh_metadata(self, topics: Any = (), *, wait: float | None = None) -> float:
        """Refresh in the background, at most once per `wait` (default `retry_backoff`);
        wakes when done. Not once closing: the task nursery may be closed already (a
        cancelled body). Returns the clock time from which another refresh may start
        (infinity when one started, runs, or the sender closes: a refresh's end wakes
        the loop)."""
        if self._refreshing or self.closing:
            return math.inf
        now = self.clock.now()
        allowed = self._last_refresh + (self.core.config.retry_backoff if wait is None else wait)
        if now < allowed:
            return allowed
        self._refreshing = True
        self._last_refresh = now
        self.nursery.start_soon(self._refresh, sorted(topics))
        return math.inf

    async def _refresh(self, topics: list[str]) -> None:
        try:
            await self.selector.refresh_metadata(topics)
        except KafkaError as exc:
            logger.debug("metadata refresh failed: %s", exc)
            if isinstance(exc, FatalError):
                self.fatal(exc)
        finally:
            self._refreshing = False
            self.sync_metadata()
            self.wake()

    # -- producer id -----------------------------------------------------------------

    async def _init_producer_id(self) -> None:
        """InitProducerId (no transactional id, no producer id, no epoch) until it
        succeeds, for the first producer id or after the core dropped an exhausted one
        (retriable errors back off and retry). Never for an epoch bump: the core bumps
        its epoch itself, keeping its producer id (DESIGN.md "Producer ids and epochs"):
        Kafka answers this request with a new producer id whatever id and epoch it
        carries, and a new id would not fence the old one's late requests."""
        core = self.core
        try:
            try:
                got = await init_idempotent_producer_id(
                    self.selector,
                    timeout=self.request_timeout,
                    transaction_timeout=core.config.transaction_timeout,
                    backoff=self._retry,
                    wanted=lambda: self.fatal_error is None and core.needs_producer_id,
                )
            except KafkaError as exc:
                # A broker without InitProducerId, refused credentials or certificate (a
                # TLS or SASL listener met in plaintext), a code that is not retriable:
                # the producer stops with it, as a node's sender does.
                self.fatal(exc)
                return
            if got is not None:
                core.set_producer_id(*got, self.clock.now())
                self.on_progress()
        finally:
            self._init_running = False
            self.wake()

    # -- requests --------------------------------------------------------------------

    def produce_request(self, batches: list[ProducerBatch], node: int) -> ProduceFrame:
        """The request for `batches` to `node`, whose connection is open (what it said in
        ApiVersions decides the base offset of a batch without an expected offset)."""
        info = self.selector.api_versions(node)
        data = self.core.produce_data(batches, cas_broker=info is None or info.supports_cas)
        return ProduceFrame(self._transactional_id, self._acks, self._timeout_ms, data)

    def _take(self, attempt: ProduceAttempt) -> bool:
        """Mark `attempt` settled (False if it already was)."""
        if attempt.settled:
            return False
        attempt.settled = True
        node = self.nodes[attempt.node]
        if node.unsettled and node.unsettled[0] is attempt:
            node.unsettled.popleft()
        else:
            node.unsettled.remove(attempt)
        return True

    def settle_response(self, attempt: ProduceAttempt, response: ProduceAnswer | None) -> None:
        """A Produce answer (`read_produce_answer`'s; None for acks=0) for `attempt`."""
        if not self._take(attempt):
            return
        now = self.clock.now()
        settled = self.core.handle_response(
            attempt.node, attempt.batches, None if response is None else response.partitions, now
        )
        if response is not None:
            throttle_ms = response.throttle_time_ms
            if throttle_ms > 0:
                self.nodes[attempt.node].throttle(now + throttle_ms / 1000)
            if settled.leaders:
                endpoints = [
                    BrokerMetadata(e.node_id, e.host, e.port, e.rack)
                    for e in response.node_endpoints
                ]
                if self.selector.apply_leaders(settled.leaders, endpoints):
                    self.sync_metadata()  # the retries go to the new leaders at once
        self._after(settled)

    def settle_failure(self, attempt: ProduceAttempt, error: KafkaError) -> None:
        if not self._take(attempt):
            return
        logger.debug(
            "produce request to node %s failed (%s): %s",
            attempt.node,
            "sent" if attempt.sent else "not sent",
            error,
        )
        settled = self.core.handle_request_failure(
            attempt.node, attempt.batches, error, self.clock.now(), sent=attempt.sent
        )
        if attempt.sent and self.buggify is not None:
            self._buggify_epoch_bump(attempt)
        self._after(settled)

    def settle_unsendable(self, attempt: ProduceAttempt, error: Exception) -> None:
        """The request could not be built: the batches that cannot be encoded (a bug, or
        a value smuggled past send()'s checks) fail alone, each with its own cause; the
        others go back to their queues. The producer lives."""
        if not self._take(attempt):
            return
        errors: dict[int, KafkaError] = {}
        for batch in attempt.batches:
            try:
                self.core.encode(batch)
            except Exception as exc:  # whatever it is, it is this batch's
                errors[id(batch)] = _unencodable(batch, exc)
        if not errors:  # the request itself, not a batch: none of them can go
            errors = {id(batch): _unencodable(batch, error) for batch in attempt.batches}
        for batch in attempt.batches:
            if id(batch) in errors:
                logger.error("%s", errors[id(batch)])
        settled = self.core.handle_unencodable(
            attempt.node, attempt.batches, errors, self.clock.now()
        )
        self._after(settled)

    def _after(self, settled: Settled) -> None:
        if settled.refresh_metadata:
            self.refresh_metadata()
        if settled.completed:
            self.on_progress()
        self.wake()


@attrs.define(eq=False, slots=True)
class ProduceAttempt:
    """One ProduceRequest for one node: its batches, whether it may have left, and
    whether the core has been told how it ended."""

    node: int
    batches: list[ProducerBatch]
    #: The bytes may have reached the broker (set just before the write starts).
    sent: bool = False
    settled: bool = False
    #: The answer, once written (`NodeSender._answered` reads it).
    pending: PendingResponse | None = None


_T = TypeVar("_T")


class TaskQueue(Generic[_T]):
    """An unbounded FIFO read by one task: `put` never blocks, `get` waits for an item.

    What `trio.open_memory_channel(math.inf)` gave the node senders, on anyio's Event
    (anyio's memory streams warn when dropped unclosed, and a node sender's live as long
    as the producer). Scheduling is the channel's: `get` with an item waiting takes it,
    then yields shielded (the item is never lost to a cancellation); an empty `get` parks
    until the next `put` wakes it.
    """

    __slots__ = ("_event", "_items", "_ready")

    def __init__(self, event: Callable[[], Event] = anyio.Event) -> None:
        self._items: collections.deque[_T] = collections.deque()
        # Makes the reader's event (the backend's class: net's `primitives`).
        self._event = event
        # The waiting reader's event (None when nobody waits).
        self._ready: Event | None = None

    def put(self, item: _T) -> None:
        self._items.append(item)
        ready = self._ready
        if ready is not None:
            self._ready = None
            ready.set()

    async def get(self) -> _T:
        items = self._items
        if items:
            await anyio.lowlevel.checkpoint_if_cancelled()
            item = items.popleft()
            await anyio.lowlevel.cancel_shielded_checkpoint()
            return item
        while not items:
            ready = self._ready = self._event()
            await ready.wait()
        return items.popleft()


class NodeSender:
    """Writes one node's requests in order and reads its responses in order."""

    def __init__(self, sender: Sender, node_id: int) -> None:
        self.sender = sender
        self.node_id = node_id
        # The open connection we write to (None until connected; replaced on reconnect).
        self.connection: BrokerConnection | None = None
        self.connecting = False
        self.last_error: KafkaError | None = None
        # Clock time before which no new attempt starts: after a failed one, the
        # selector's backoff (else `reconnect_backoff`; never the instant it failed at),
        # so an attempt that fails at once cannot make the sender loop.
        self.retry_at = -math.inf
        # KIP-219: clock time before which nothing more is sent to this node (the broker
        # answered with throttle_time_ms and mutes the channel until then; so do we).
        self.throttled_until = -math.inf
        # Requests drained for this node, not yet settled with the core, oldest first.
        self.unsettled: collections.deque[ProduceAttempt] = collections.deque()
        # Attempts for the writer task.
        self._outbox: TaskQueue[ProduceAttempt] = TaskQueue(sender.primitives.event)

    def __repr__(self) -> str:
        return (
            f"<NodeSender node={self.node_id} ready={self.ready} unsettled={len(self.unsettled)}>"
        )

    @property
    def ready(self) -> bool:
        connection = self.connection
        return connection is not None and connection.is_open

    def throttle(self, until: float) -> None:
        """The broker asked for a pause (a response's throttle_time_ms, KIP-219)."""
        if until > self.throttled_until:
            logger.debug(
                "node %s throttles us for %.3f s", self.node_id, until - self.sender.clock.now()
            )
            self.throttled_until = until

    def start(self, nursery: TaskGroup) -> None:
        nursery.start_soon(self._writer, name=f"kafka-produce-writer-{self.node_id}")

    def connect(self, now: float) -> float:
        """Start opening the node's connection in the background (one attempt at a time,
        none before `retry_at`). Returns the clock time by which the sender must look
        again if nothing wakes it: inf while an attempt runs (its end wakes the sender),
        else `retry_at`."""
        if self.connecting:
            return math.inf
        if now < self.retry_at and not self.sender.selector.is_ready(self.node_id):
            return self.retry_at  # (someone else's attempt may have opened it meanwhile)
        self.connecting = True
        self.sender.nursery.start_soon(self._connect)
        return math.inf

    async def _connect(self) -> None:
        sender = self.sender
        try:
            self.connection = await sender.selector.connection(self.node_id)
            self.last_error = None
        except KafkaError as exc:
            self.last_error = exc
            now = sender.clock.now()
            retry_at = sender.selector.retry_at(self.node_id)
            if retry_at <= now:  # the selector set no backoff (closed, or none configured)
                retry_at = now + sender.core.config.reconnect_backoff
            self.retry_at = max(retry_at, math.nextafter(now, math.inf))
            logger.debug("connecting to node %s failed: %s", self.node_id, exc)
            if isinstance(exc, FatalError):
                self.sender.fatal(exc)
            else:
                # We connect only to lead partitions with batches ready, and a leader we
                # cannot reach may be dead: ask who leads now (Java's NetworkClient
                # requests a metadata update on every disconnect), or the batches wait
                # for this node until delivery_timeout, however soon the cluster elects
                # another. The sender rate-limits refreshes (one per retry_backoff), and
                # the node's reconnect backoff spaces the failures that ask.
                sender.refresh_metadata()
        finally:
            self.connecting = False
            self.sender.wake()

    def submit(self, batches: list[ProducerBatch]) -> None:
        attempt = ProduceAttempt(self.node_id, batches)
        self.unsettled.append(attempt)
        self._outbox.put(attempt)

    async def _writer(self) -> None:
        sender = self.sender
        while True:
            attempt = await self._outbox.get()
            if attempt.settled:
                continue
            try:
                connection = self.connection
                if connection is None or not connection.is_open:
                    connection = self.connection = await sender.selector.connection(self.node_id)
            except KafkaError as exc:
                # BrokerConnectionError: refused before registration, nothing written.
                attempt.sent = not isinstance(exc, BrokerConnectionError)
                sender.settle_failure(attempt, exc)
                continue
            try:
                # Built once connected: the broker's ApiVersions shape the batches.
                request = sender.produce_request(attempt.batches, self.node_id)
            except Exception as exc:  # a record the codec cannot encode: not sendable
                sender.settle_unsendable(attempt, exc)
                continue
            try:
                attempt.sent = True
                pending = await connection.send(
                    request, timeout=sender.write_timeout(), reader=read_produce_answer
                )
            except KafkaError as exc:
                # BrokerConnectionError: refused before registration, nothing written.
                attempt.sent = not isinstance(exc, BrokerConnectionError)
                sender.settle_failure(attempt, exc)
                continue
            attempt.pending = pending
            pending.on_done(self._answered)  # (at once if the answer is already in)

    def _answered(self) -> None:
        """An answer is in: settle the requests whose answers are in, oldest first,
        stopping at the first still waiting for its answer (or not yet written)."""
        sender = self.sender
        unsettled = self.unsettled
        while unsettled:
            attempt = unsettled[0]
            pending = attempt.pending
            if pending is None or not pending.done():
                return
            error = pending.error
            if error is None:
                sender.settle_response(attempt, pending.result())
            elif isinstance(error, KafkaError):
                sender.settle_failure(attempt, error)
            else:  # (the connection sets only KafkaErrors: anything else is a bug)
                raise error
            if unsettled and unsettled[0] is attempt:  # (settling takes it off)
                raise AssertionError(f"{attempt} was settled but is still unsettled")

    def settle_all(self, error: KafkaError) -> None:
        """Closing: tell the core how every unsettled request ended (without waiting)."""
        while self.unsettled:
            attempt = self.unsettled[0]
            self.sender.settle_failure(attempt, error)


def _unencodable(batch: ProducerBatch, cause: Exception) -> KafkaError:
    error = KafkaError(
        f"{batch.record_count} record(s) for {batch.topic}-{batch.partition} could not be "
        f"encoded ({cause!r}) and were not sent; the producer's other records are unaffected"
    )
    error.__cause__ = cause
    return error


__all__ = ["NodeSender", "ProduceAttempt", "Sender"]
