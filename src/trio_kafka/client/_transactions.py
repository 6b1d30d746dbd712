"""The transactional producer: the async driver of `TransactionManager`.

Theory of operation
-------------------
A producer opened with `transactional_id=` makes the sans-IO `TransactionManager`
(core/_transaction.py, `transaction_manager`) first: its core's sequencing policy is the
`Sequencer` with the manager as its hooks, so the core only drains a batch whose
partition the manager allows (added with AddPartitionsToTxn, or under transactions v2
simply "a transaction is open"), and none while the transaction is failing. Once the
producer's sender exists, a `TransactionDriver` is made with the manager and the parts of
the producer it works with, passed by name (the selector, the core, the sender, the
clock, the producer's task group, and `state_changed`, the producer's fast-path
recheck), and `start()`ed. The manager owns InitProducerId; the driver installs the ids
it hands out with `core.set_producer_id`.

One task, the coordinator loop (`run`), does every coordinator request, one at a time:

1. `_sync`: the manager's fatal error stops the producer (`Sender.fatal`, so `send()`
   refuses); while the transaction is failing or aborting, every batch not yet sent
   fails with its error (`core.fail_all`, Java's abortUndrainedBatches);
2. the negotiated versions and the cluster's finalized `transaction.version` (KIP-890)
   of the coordinator (or, before it is known, of any connected node) go to the manager;
3. `next_request(now, batches_unfinished=...)`: send it to its coordinator (FindCoordinator
   to the least loaded node) and hand back the answer, or the failure with `sent=False`
   when the request never left (nothing can have been applied);
4. sleep until the manager's backoff ends or something wakes it: a user call, a batch
   reaching a final state (EndTxn waits for every batch), or a pass of the sender after
   which ready batches wait for the coordinator loop (`manager.needs_coordinator`: a
   partition to add, or batches to fail). The sender does both for the loop it is
   handed (`Sender.serve_coordinator`, in `start`).

The user's calls (`init_transactions`, `begin_transaction`, `commit_transaction`,
`abort_transaction`, `send_offsets_to_transaction`, `transaction()`) change the manager's
state and wait for its `TxnResult`. `send()` takes its fast path only inside a
transaction (`Producer.refresh_fast_path`), and its slow path asks
`check_send()`, so a record outside a transaction is refused with the reason.

Producers opened on one selector (a transactional conditional writer opens its own
beside the producer it was given, and again each time a newer writer fences it) share
the transaction coordinators they found, by transactional id: the next one starts with
its InitProducerId instead of a FindCoordinator round trip, as librdkafka's coordinator
cache saves it within a client (docs/transactions.md). A stale entry costs one answer:
NOT_COORDINATOR, or a failed request, makes the manager look the coordinator up again,
and the driver forgets it here. Weak by selector: a cache lives as long as its
connections.

`transaction()` commits on normal exit and aborts on an exception or a cancellation;
the abort runs shielded and bounded by `abort_timeout` (default `request_timeout`), so a
cancelled caller is never kept waiting on a dead coordinator and the exception it
raised is the one that propagates. After a commit whose outcome is unknown
(`TransactionOutcomeUnknownError`) the manager re-initialises at once with an epoch bump;
`transaction()` waits for that before it begins the next one, `begin_transaction()`
refuses until `init_transactions()` has returned it.
"""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel

from trio_kafka.core import (
    Coordinator,
    CoordinatorType,
    GroupMetadata,
    OffsetAndMetadata,
    ProducerBatch,
    ProducerConfig,
    ProducerCore,
    Rules,
    TransactionManager,
    TxnRequest,
    TxnRequestKind,
    TxnResult,
    TxnState,
)
from trio_kafka.errors import (
    BrokerConnectionError,
    InvalidPartitionError,
    KafkaError,
    ProducerClosedError,
    ProducerFencedError,
)
from trio_kafka.net import (
    TRANSACTION_VERSION_FEATURE,
    ApiVersionsInfo,
    Clock,
    KafkaSelector,
    TaskGroup,
)

if TYPE_CHECKING:
    import anyio.abc

    from trio_kafka.client._sender import Sender

logger = logging.getLogger("trio_kafka.producer.transactions")

TopicPartition = tuple[str, int]


# The transaction coordinators found through each selector, by transactional id (module
# doc): read when a driver attaches, written after each coordinator answer.
_FOUND: weakref.WeakKeyDictionary[KafkaSelector, dict[str, Coordinator]] = (
    weakref.WeakKeyDictionary()
)


def _remember_coordinator(
    selector: KafkaSelector, transactional_id: str, found: Coordinator | None
) -> None:
    """What a producer on `selector` now knows (None: it has to look it up again)."""
    if found is not None:
        _FOUND.setdefault(selector, {})[transactional_id] = found
    else:
        _FOUND.get(selector, {}).pop(transactional_id, None)


class TransactionDriver:
    """The coordinator loop and the transactional calls of one producer (module doc)."""

    def __init__(
        self,
        manager: TransactionManager,
        config: ProducerConfig,
        *,
        selector: KafkaSelector,
        core: ProducerCore,
        sender: Sender,
        clock: Clock,
        tasks: TaskGroup,
        state_changed: Callable[[], None],
    ) -> None:
        self.manager = manager
        self.config = config
        #: How long the abort of `transaction()` may take after an exception.
        self.abort_timeout = config.request_timeout
        # The producer's parts the driver works with (module doc): its selector, its
        # core (whose sequencing the manager hooks), its sender, its clock, the task
        # group its tasks run in, and what to call when the transaction's state changed
        # (the producer rechecks send()'s fast path).
        self._selector = selector
        self._core = core
        self._sender = sender
        self._clock = clock
        self._tasks = tasks
        self._state_changed = state_changed
        self._wake_event = anyio.Event()
        # Set once the coordinator loop has ended (the producer closed, or a scope around
        # it was cancelled): nothing waited for in `_wait` can finish any more.
        self._loop_ended = False
        # The events of the `_wait`s in progress: set when the loop ends, to wake them.
        self._waiting: set[anyio.Event] = set()
        # Versions last given to the manager (only re-sent when they change).
        self._info: ApiVersionsInfo | None = None
        #: This transaction's EndTxn(commit) was sent (or was about to be): until then a
        #: failed transaction is certainly not committed (only our EndTxn commits it).
        self.commit_sent = False

    def __repr__(self) -> str:
        return f"<TransactionDriver {self.manager!r}>"

    def start(self) -> None:
        """Start the coordinator loop, served by the producer's sender: it wakes the
        loop when batches settle (EndTxn waits for every batch) and after a pass that
        left ready batches waiting for it (`manager.needs_coordinator`)."""
        manager = self.manager
        known = _FOUND.get(self._selector, {}).get(manager.transactional_id)
        if known is not None and manager.coordinator is None:
            manager.requests.coordinator_found(
                CoordinatorType.TRANSACTION, manager.transactional_id, known
            )
        self._sender.serve_coordinator(self.wake, lambda: manager.needs_coordinator)
        self.update_detour()
        self._tasks.start_soon(self.run, name="kafka-txn-coordinator")

    def wake(self) -> None:
        self._wake_event.set()

    @property
    def in_transaction(self) -> bool:
        """A transaction is open (send()'s fast path is allowed)."""
        return self.manager.state is TxnState.IN_TRANSACTION

    def update_detour(self) -> None:
        """The transaction's state changed: the producer rechecks its fast path."""
        self._state_changed()

    # -- the coordinator loop ----------------------------------------------------------

    async def run(self) -> None:
        try:
            await self._loop()
        finally:
            self._loop_ended = True
            for done in self._waiting:
                done.set()

    async def _loop(self) -> None:
        clock = self._clock
        manager = self.manager
        while True:
            self._sync()
            await self._set_versions()
            # Read the clock after the await: `_set_versions` may have spent seconds
            # connecting, and asking with an older `now` than `poll_delay` gets made a
            # due retry look blocked, so the loop waited for an event that never came
            # (simulations/regressions/transactional-lite-1100.toml).
            now = clock.now()
            unfinished = self._core.has_unfinished
            request = manager.next_request(now, batches_unfinished=unfinished)
            if request is not None:
                await self._exchange(request)
                self._sync()
                self._sender.wake()
                continue
            event = self._wake_event
            if event.is_set():
                self._wake_event = anyio.Event()
                await anyio.lowlevel.checkpoint()
                continue
            delay = manager.poll_delay(now, batches_unfinished=unfinished)
            if delay is None:
                # Nothing to send, or EndTxn waits for the batches: a batch settling,
                # a response or a user call wakes us.
                delay = math.inf
            with anyio.move_on_after(delay):
                await event.wait()
            if self._wake_event is event:
                self._wake_event = anyio.Event()

    def _sync(self) -> None:
        manager, sender, core = self.manager, self._sender, self._core
        if manager.state is TxnState.FATAL_ERROR and sender.fatal_error is None:
            assert manager.last_error is not None
            sender.fatal(manager.last_error)
        error = manager.undrained_error()
        if error is not None and core.fail_all(error):
            sender.on_progress()
        self.update_detour()

    async def _set_versions(self) -> None:
        """The coordinator's versions and `transaction.version` to the manager."""
        selector = self._selector
        info: ApiVersionsInfo | None = None
        coordinator = self.manager.coordinator
        if coordinator is not None and coordinator.node_id in selector.node_ids:
            info = selector.api_versions(coordinator.node_id)
        if info is None and self._info is None:
            # Nothing negotiated yet: connect to some node to learn the versions.
            try:
                info = await selector.negotiated_versions()
            except KafkaError as exc:
                logger.debug("no node for ApiVersions yet: %s", exc)
        if info is not None and info is not self._info:
            self._info = info
            self.manager.set_api_versions(
                info.negotiated,
                transaction_version=info.finalized_level(TRANSACTION_VERSION_FEATURE),
            )

    async def _node_for(self, request: TxnRequest) -> int:
        selector = self._selector
        coordinator = request.coordinator
        if coordinator is None:
            return selector.least_loaded_node()
        if coordinator.node_id not in selector.node_ids:
            # FindCoordinator named a broker the metadata has not shown us yet.
            await selector.refresh_metadata()
            if coordinator.node_id not in selector.node_ids:
                raise BrokerConnectionError(
                    f"coordinator node {coordinator.node_id} at {coordinator.host}:"
                    f"{coordinator.port} is not in the cluster metadata"
                )
        return coordinator.node_id

    async def _exchange(self, request: TxnRequest) -> None:
        selector, clock, manager = self._selector, self._clock, self.manager
        sent = False
        if request.kind is TxnRequestKind.END_TXN and request.work.committed:
            self.commit_sent = True
        try:
            node_id = await self._node_for(request)
            connection = await selector.connection(node_id)
            sent = True
            pending = await connection.send(
                request.message, version=request.version, timeout=self.config.request_timeout
            )
            response = await pending.wait()
        except BrokerConnectionError as exc:
            # Refused before the request was registered: it never left.
            update = manager.handle_failure(request, exc, clock.now(), sent=False)
        except KafkaError as exc:
            logger.debug("%s failed (%s): %s", request.kind.value, "sent" if sent else "", exc)
            update = manager.handle_failure(request, exc, clock.now(), sent=sent)
        else:
            update = manager.handle_response(request, response, clock.now())
        _remember_coordinator(selector, manager.transactional_id, manager.coordinator)
        if update.new_producer_id is not None:
            producer_id, epoch = update.new_producer_id
            self._core.set_producer_id(producer_id, epoch, clock.now())
            logger.debug("transactional producer id %s epoch %s", producer_id, epoch)

    def batch_opened(self, batch: ProducerBatch) -> None:
        """A send opened a batch: add its partition now, so AddPartitionsToTxn runs
        during the linger instead of after it (Java adds on send; once per batch here)."""
        manager = self.manager
        if manager.state is TxnState.IN_TRANSACTION:
            manager.maybe_add_partition((batch.topic, batch.partition))
            if manager.new_partitions:
                self.wake()

    def send_failed(self, topic: str, partition: int | None, error: KafkaError) -> None:
        """`send()` raised inside the transaction (no metadata within `max_block`, no
        buffer space...): the record is not in it, so the transaction becomes abortable
        and `commit` raises (Java does the same in `send`)."""
        if not self.manager.rules.send_failure_taints_transaction(error):
            return
        if self.manager.state is TxnState.IN_TRANSACTION:
            self.manager.partition_failed(
                (topic, -1 if partition is None else partition), error, sequenced=False
            )
            self.update_detour()
            self.wake()

    # -- the caller's calls ------------------------------------------------------------

    def check_send(self) -> None:
        """Raise why `send()` may not append now (called on send's slow path)."""
        self.manager.check_send()

    async def _wait(self, result: TxnResult, timeout: float | None = None) -> None:
        self.update_detour()
        self.wake()
        self._sender.wake()
        if not result.done():
            done = anyio.Event()
            result.add_done_callback(lambda _: done.set())
            self._waiting.add(done)
            try:
                if not self._loop_ended:
                    with anyio.fail_after(timeout):
                        await done.wait()
            finally:
                self._waiting.discard(done)
            if not result.done():
                raise ProducerClosedError(
                    f"transactional id {self.manager.transactional_id!r}: the producer's "
                    "tasks have stopped (it was closed, or a scope around it was cancelled), "
                    "so the transaction cannot go on from here; an open transaction is "
                    "aborted by the coordinator after transaction_timeout"
                )
        else:
            await anyio.lowlevel.checkpoint()
        self.update_detour()
        result.result()

    async def init(self, timeout: float | None = None) -> None:
        await self._wait(self.manager.init(), timeout)

    def begin(self) -> None:
        self.manager.begin()
        self.commit_sent = False
        self.update_detour()

    async def commit(self) -> None:
        core = self._core
        core.begin_flush()  # nothing lingers: EndTxn waits for every batch
        try:
            await self._wait(self.manager.commit())
        finally:
            core.end_flush()

    async def abort(self) -> None:
        await self._wait(self.manager.abort())

    async def send_offsets(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_metadata: GroupMetadata | str,
    ) -> None:
        _check_offsets(offsets, group_metadata)
        await self._check_partitions_exist(offsets)
        await self._wait(self.manager.send_offsets(offsets, group_metadata))

    async def _check_partitions_exist(self, offsets: Mapping[TopicPartition, object]) -> None:
        """Refuse offsets of a topic or partition that does not exist, naming it, before
        anything is sent: the coordinator would answer UNKNOWN_TOPIC_OR_PARTITION, which
        is retriable, until the transaction timed out. Fails fast as `send()` does
        (`KafkaSelector.wait_for_topic`); the transaction is left as it was."""
        now = self._clock.now
        deadline = now() + self.config.max_block
        for topic in sorted({topic for topic, _ in offsets}):
            found = await self._selector.wait_for_topic(topic, timeout=max(deadline - now(), 0.0))
            missing = sorted(
                p for t, p in offsets if t == topic and not 0 <= p < found.partition_count
            )
            if missing:
                raise InvalidPartitionError(
                    f"send_offsets_to_transaction: partition {missing[0]} of topic {topic!r} "
                    f"does not exist: it has {found.partition_count}"
                )

    async def abort_bounded(self) -> None:
        """The abort after an exception or cancellation: shielded, at most
        `abort_timeout`; a failure is logged (the caller's exception goes on)."""
        state = self.manager.state
        if not (state is TxnState.IN_TRANSACTION or state.is_abortable_error or state.is_aborting):
            return
        with anyio.CancelScope(shield=True) as scope:
            scope.deadline = anyio.current_time() + self.abort_timeout
            try:
                await self.abort()
            except ProducerFencedError as exc:
                # The takeover was said once, at WARNING, when the producer stopped.
                logger.debug("aborting the transaction failed (fenced): %s", exc)
            except KafkaError as exc:
                logger.warning("aborting the transaction failed: %s", exc)
        if scope.cancelled_caught:
            logger.warning(
                "the abort of transactional id %r did not finish within %s s; it goes on "
                "in the background",
                self.manager.transactional_id,
                self.abort_timeout,
            )


def _check_offsets(offsets: object, group_metadata: object) -> None:
    """`send_offsets_to_transaction`'s arguments, refused naming what is wrong before
    anything is sent (a str key raised "too many values to unpack", an int group an
    AttributeError, and a negative offset was committed: Java's OffsetAndMetadata
    refuses one)."""
    where = "send_offsets_to_transaction"
    if not isinstance(offsets, Mapping):
        raise TypeError(
            f"{where}: offsets must be a dict of (topic, partition) -> offset, not "
            f"{type(offsets).__name__}"
        )
    for tp, position in offsets.items():
        if (
            not isinstance(tp, tuple)
            or len(tp) != 2
            or not isinstance(tp[0], str)
            or isinstance(tp[1], bool)
            or not isinstance(tp[1], int)
        ):
            raise TypeError(f"{where}: the offsets' keys are (topic, partition) tuples, not {tp!r}")
        offset = position.offset if isinstance(position, OffsetAndMetadata) else position
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise TypeError(
                f"{where}: the offset of {tp!r} must be an int or an OffsetAndMetadata, not "
                f"{type(position).__name__} ({position!r})"
            )
        if offset < 0:
            raise ValueError(
                f"{where}: the offset of {tp!r} is {offset}: it must be >= 0 (the next "
                "offset to read)"
            )
    if not isinstance(group_metadata, GroupMetadata | str) or not (
        group_metadata.group_id if isinstance(group_metadata, GroupMetadata) else group_metadata
    ):
        raise TypeError(
            f"{where}: group_metadata must be the consumer's GroupMetadata or a non-empty "
            f"group id, not {group_metadata!r}"
        )


def transaction_manager(config: ProducerConfig, rules: Rules) -> TransactionManager | None:
    """The manager for a transactional config, with the producer's rules; None otherwise
    (module doc: made before the producer's core, handed to its `TransactionDriver` once
    the sender exists)."""
    if config.transactional_id is None:
        return None
    return TransactionManager.from_config(config, rules)


__all__ = [
    "GroupMetadata",
    "OffsetAndMetadata",
    "TransactionDriver",
    "transaction_manager",
]
