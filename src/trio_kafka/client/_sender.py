"""The sender: Java's `Sender.runOnce` as one task, plus one writer and one reader task
per broker (`NodeSender`, in `_node_sender.py`).

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
hands the pending response to its reader task, which awaits responses in the same
order and feeds them to the core (and a NOT_LEADER_OR_FOLLOWER answer's current leader
and its endpoint, KIP-951, to the selector's metadata: the retries go there at once), so the core always sees a node's answers in the order
it sent the requests. A request that never left (no connection) is settled with
`sent=False` (retried, never ambiguous); one that left and got no answer (connection
lost, request timeout) with `sent=True` (retried with the same sequence; ambiguous only
when no retry is possible). `unsettled` lists every request not yet handed back to the
core, so closing can settle them all without waiting.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from trio_kafka.client._node_sender import NodeSender, ProduceAttempt
from trio_kafka.client._producer_id import init_idempotent_producer_id
from trio_kafka.errors import (
    FatalError,
    KafkaError,
    ProducerFencedError,
)
from trio_kafka.net import (
    BrokerMetadata,
    Clock,
    ClusterMetadata,
    Event,
    ExponentialBackoff,
    KafkaSelector,
    TaskGroup,
    TopicMetadata,
    primitives,
)
from trio_kafka.producer import ClusterView, ProducerBatch, ProducerCore, Settled
from trio_kafka.protocol import ProduceAnswer, ProduceFrame

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
        self.on_progress = on_progress
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
        # Topics the core must not see yet: records sent before their metadata came wait
        # to be placed first, in order (client/_pending.py; `release` ends the hold).
        self.held: set[str] = set()
        self._init_running = False
        # Set by the producer as it settles everything on close: no new tasks.
        self.closing = False
        self._refreshing = False
        self._last_refresh = -math.inf
        self._retry = ExponentialBackoff.of(config)
        # Whether the core's fatal error was acted on (logged, sends refused, queue failed).
        self._fatal_handled = False

    def __repr__(self) -> str:
        return f"<Sender nodes={list(self.nodes.values())!r} {self.core!r}>"

    # -- waking ----------------------------------------------------------------------

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
            ready_nodes, delay, unknown = core.ready(now)
            if unknown:
                self.refresh_metadata(unknown)
            # Clock time by which to look again without being woken.
            wake_at = now + delay
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

    def release(self, topics: Iterable[str]) -> None:
        """End the hold on `topics`: the core sees them from the next line on (and sees
        the newest snapshot)."""
        self.held.difference_update(topics)
        self._metadata = None
        self.sync_metadata()

    def refresh_metadata(self, topics: Any = ()) -> None:
        """Refresh in the background, at most once per `retry_backoff`; wakes when done.
        Not once closing: the task nursery may be closed already (a cancelled body)."""
        if self._refreshing or self.closing:
            return
        now = self.clock.now()
        if now - self._last_refresh < self.core.config.retry_backoff:
            return
        self._refreshing = True
        self._last_refresh = now
        self.nursery.start_soon(self._refresh, sorted(topics))

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


def _unencodable(batch: ProducerBatch, cause: Exception) -> KafkaError:
    error = KafkaError(
        f"{batch.record_count} record(s) for {batch.topic}-{batch.partition} could not be "
        f"encoded ({cause!r}) and were not sent; the producer's other records are unaffected"
    )
    error.__cause__ = cause
    return error
