"""A blocking producer for scripts, threads, Spark executors and asyncio programs.

    from trio_kafka.sync import Producer

    with Producer("host:9092", compression="zstd") as producer:
        future = producer.send("orders", b"value", key=b"k")
        producer.flush(10)                   # returns how many records are still pending
        print(future.result(timeout=10))     # Acknowledged(topic, partition, offset, ...)

Theory of operation
-------------------
One daemon thread runs a trio run with an `open_producer()` inside (`_sync_portal.py`
is the bridge: an ordered inbox and one wakeup per burst). Calling threads never touch
trio objects; what they share with the trio thread is `_lock` and the counters under it.

- `send()` checks what it can (types), counts the record as pending and hands it over;
  it returns a `DeliveryFuture` at once. It blocks only when `_MAX_UNAPPENDED` records
  are handed over and not yet in the producer's buffer (then for up to `max_block`).
- The trio side's pump takes items in order and puts each record in its topic's *lane*:
  one task per topic with records waiting, which awaits `producer.send()` for them one
  after another (order within a topic is kept). A lane waiting for its topic's metadata
  or for buffer memory holds back only its own topic: no head-of-line blocking.
- Each record's future is settled from its handle's done-callback, or at once with the
  error when `send()` refused it; `_pending` counts futures not settled, which is what
  `flush(timeout)` waits on and returns.
- Transactions and `metrics()` are calls run by the pump. A transactional call first
  waits until every lane is idle, so it sees every record sent before it.
- `close(timeout)`: sends from then on are refused; the trio side flushes until the
  deadline, closes the producer with what is left of it (records in flight end
  Ambiguous, records never sent Failed), cancels the lanes still waiting (their records
  end Failed, or Ambiguous if they may have been appended), and the run ends; `close`
  joins the thread. A transactional call running at close is cancelled at the deadline.

Interpreter exit: the thread is a daemon, and an `atexit` hook closes a producer the
program forgot to close, bounded by `close_timeout`, so exit never hangs on a broker.
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import contextlib
import enum
import functools
import inspect
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import trio

from trio_kafka._sync_portal import TrioThread
from trio_kafka.client import (
    Acknowledged,
    Ambiguous,
    Failed,
    GroupMetadata,
    MetricsSnapshot,
    OffsetAndMetadata,
    Outcome,
    ProducerConfig,
    ProducerRecord,
    RecordHandle,
    open_producer,
)
from trio_kafka.client import Producer as AsyncProducer
from trio_kafka.errors import (
    AmbiguousError,
    BufferFullError,
    ConfigError,
    KafkaError,
    ProducerClosedError,
)

logger = logging.getLogger("trio_kafka.sync")

#: Records handed to the trio thread and not yet in the producer's buffer (appended or
#: refused). Past this, `send()` waits (up to `max_block`): memory stays bounded.
_MAX_UNAPPENDED = 65536
_STARTUP_TIMEOUT = 60.0
#: How long `close()` waits for the thread beyond its deadline: the trio side's own work
#: after the deadline (settle, cancel, close sockets) takes milliseconds; this only keeps
#: a bug from hanging the caller.
_CLOSE_GRACE = 5.0
_THREAD_NAME = "trio-kafka-producer"


class DeliveryFuture(concurrent.futures.Future[Acknowledged]):
    """One record's delivery, a `concurrent.futures.Future`: `result(timeout)` returns
    `Acknowledged` or raises the error (an `AmbiguousError` when the record may have
    been written); `done()`, `exception(timeout)`, `add_done_callback(fn)`; and
    `outcome`, the typed `Acknowledged` / `Failed` / `Ambiguous` (None while pending).

    Callbacks run in the producer's thread: keep them short, and do not call the
    producer's blocking methods (`flush`, `close`, transactions) from them. A record
    cannot be taken back: `cancel()` returns False.
    """

    # The typed outcome once settled (None while pending, and for an error raised by
    # your own code, such as a serializer's, which only `exception()` carries).
    _outcome: Outcome | None = None

    @property
    def outcome(self) -> Outcome | None:
        return self._outcome

    def cancel(self) -> bool:
        return False

    def __repr__(self) -> str:
        if not self.done():
            return "<DeliveryFuture pending>"
        return f"<DeliveryFuture {self._outcome or self.exception(0)!r}>"


class _Kind(enum.Enum):
    SEND = "send"  # payload: the send() arguments; future: the record's DeliveryFuture
    FLUSH = "flush"  # payload: the deadline (time.monotonic()); no future
    CALL = "call"  # payload: (fn(producer), ordered); future: its result
    CLOSE = "close"  # payload: the deadline (time.monotonic()); no future


_Item = tuple[_Kind, Any, "concurrent.futures.Future[Any] | None"]
_SendArgs = tuple[Any, Any, Any, Any, Any, Any]  # topic, value, key, headers, partition, ts

_BYTES_LIKE = (bytes, bytearray, memoryview, type(None))


class Producer:
    """A blocking Kafka producer (see docs/sync.md). `bootstrap` and `**options` are
    `open_producer()`'s: `ProducerConfig` fields (`linger`, `compression`, `acks`,
    `transactional_id`, ...; a typo names the closest option)."""

    def __init__(self, bootstrap: str | Iterable[str] | None = None, **options: Any) -> None:
        # Validate here, in the caller's thread, so a typo raises from the constructor.
        config = ProducerConfig.from_kwargs(**_config_options(options))
        if bootstrap is None and options.get("selector") is None:
            raise ConfigError(
                "Producer needs bootstrap='host:port' (one broker's address, or several "
                "separated by commas)"
            )
        self.config = config
        self._bootstrap = bootstrap
        self._options = options
        # send() checks value and key types itself unless something else turns them
        # into bytes (serializers, interceptors).
        self._check_value = config.value_serializer is None and not config.interceptors
        self._check_key = config.key_serializer is None and not config.interceptors

        # -- shared with the trio thread, under _lock --
        self._lock = threading.Lock()
        # Notified when _pending reaches 0, when _unappended falls below the limit, and
        # at close (wakes flush() and blocked send()s).
        self._changed = threading.Condition(self._lock)
        # Set by the first close(): every later send, flush or call is refused.
        self._closed = False
        # Futures handed out by send() and not settled yet (what flush() returns).
        self._pending = 0
        # Records handed over and not yet appended to (or refused by) the producer.
        self._unappended = 0

        # -- the trio thread's own (touched only there) --
        # topic -> the records waiting for their lane task to send them, in order.
        self._lanes: dict[str, collections.deque[tuple[_SendArgs, DeliveryFuture]]] = {}
        # topic -> the cancel scope of its lane task (close cancels what still waits).
        self._lane_scopes: dict[str, trio.CancelScope] = {}
        # Replaced and set each time a lane ends (what "wait until the lanes are idle"
        # waits on).
        self._lane_ended: trio.Event | None = None
        self._lane_nursery: trio.Nursery | None = None
        # The running CALL's scope, and the close deadline (trio time) once close began:
        # close bounds a transactional call by its own deadline.
        self._call_scope: trio.CancelScope | None = None
        self._close_deadline: float | None = None

        self._portal: TrioThread[_Item] = TrioThread(
            self._main,
            name=_THREAD_NAME,
            on_abandoned=self._abandon,
            startup_timeout=_STARTUP_TIMEOUT,
        )
        atexit.register(self._close_at_exit)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (
            f"<trio_kafka.sync.Producer {state} pending={self._pending} {self._portal.thread.name}>"
        )

    # -- sending ------------------------------------------------------------------------

    def send(
        self,
        topic: str | ProducerRecord,
        value: Any = None,
        *,
        key: Any = None,
        headers: Any = None,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> DeliveryFuture:
        """Hand one record to the producer; returns its `DeliveryFuture` at once.

        Wrong types (`topic`, and `value`/`key` unless serializers are set,
        `partition`, `timestamp`) raise `TypeError` here; what the producer refuses
        later (an unknown topic after `max_block`, a record too large, ...) arrives
        through the future. Blocks only when `_MAX_UNAPPENDED` records are still
        waiting to be appended, for up to `max_block` (then `BufferFullError`).
        Raises `ProducerClosedError` after `close()`.
        """
        if topic.__class__ is not str:
            if not isinstance(topic, ProducerRecord):
                raise TypeError(
                    f"topic must be a str (or a ProducerRecord), not {type(topic).__name__}: "
                    f"{topic!r}"
                )
            if value is not None or key is not None or headers is not None:
                raise TypeError("pass either a ProducerRecord or topic, value, key=..., not both")
        else:
            if self._check_value and not isinstance(value, _BYTES_LIKE):
                raise TypeError(
                    f"value must be bytes or None, not {type(value).__name__}: pass bytes "
                    "(e.g. text.encode()), or set value_serializer"
                )
            if self._check_key and not isinstance(key, _BYTES_LIKE):
                raise TypeError(
                    f"key must be bytes or None, not {type(key).__name__}: pass bytes, or "
                    "set key_serializer"
                )
        if partition is not None and (
            not isinstance(partition, int) or isinstance(partition, bool)
        ):
            raise TypeError(
                f"partition must be an int or None, not {type(partition).__name__}: {partition!r}"
            )
        if timestamp is not None and (
            not isinstance(timestamp, int) or isinstance(timestamp, bool)
        ):
            raise TypeError(
                f"timestamp must be an int (ms since the epoch) or None, not "
                f"{type(timestamp).__name__}: {timestamp!r}"
            )
        future = DeliveryFuture()
        with self._lock:
            if self._closed:
                raise _closed_error()
            if self._unappended >= _MAX_UNAPPENDED:
                self._wait_for_room()
            self._unappended += 1
            self._pending += 1
            if not self._portal.put(
                (_Kind.SEND, (topic, value, key, headers, partition, timestamp), future)
            ):
                self._unappended -= 1
                self._pending -= 1
                raise ProducerClosedError("the producer's thread has stopped")
        return future

    def _wait_for_room(self) -> None:
        """Called with _lock held while _MAX_UNAPPENDED records wait to be appended."""
        if self._portal.in_trio_thread():
            raise BufferFullError(
                f"{self._unappended} records are waiting to be appended and send() was "
                "called from a delivery callback (the producer's own thread), which "
                "cannot wait for room: send from another thread"
            )
        max_block = self.config.max_block
        deadline = time.monotonic() + max_block
        while self._unappended >= _MAX_UNAPPENDED and not self._closed:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BufferFullError(
                    f"{self._unappended} records are waiting to be appended (for buffer "
                    f"memory, buffer_memory={self.config.buffer_memory} bytes, or for "
                    f"their topics' metadata) and none was within max_block={max_block} s; "
                    "the brokers are slower than the producer, or unreachable"
                )
            self._changed.wait(remaining)
        if self._closed:
            raise _closed_error()

    # -- flush, close -------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> int:
        """Send everything now and wait until every record has settled, for at most
        `timeout` seconds (None: no limit). Returns the number of records still
        pending (0: all settled), as confluent-kafka's `flush` does; never raises
        for a timeout."""
        timeout = _checked_timeout("flush", timeout)
        self._refuse_in_own_thread("flush")
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        with self._lock:
            if self._closed:
                raise _closed_error()
            if self._pending == 0:
                return 0
            self._portal.put((_Kind.FLUSH, deadline, None))
            while self._pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(None if remaining == math.inf else remaining)
            return self._pending

    def close(self, timeout: float | None = None) -> None:
        """Flush for up to `timeout` seconds (default `close_timeout`), then settle
        whatever is left without waiting (records in flight end `Ambiguous`, records
        never sent `Failed`, both with `ProducerClosedError` or an `AmbiguousError`)
        and stop the thread. Returns within `timeout` plus a few milliseconds, the
        thread gone. Safe to call again (later calls wait for the first)."""
        timeout = (
            self.config.close_timeout if timeout is None else _checked_timeout("close", timeout)
        )
        assert timeout is not None
        self._refuse_in_own_thread("close")
        deadline = time.monotonic() + timeout
        with self._lock:
            first = not self._closed
            if first:
                self._closed = True
                self._portal.put((_Kind.CLOSE, deadline, None))
                self._changed.notify_all()
        if first:
            atexit.unregister(self._close_at_exit)
            self._portal.run_sync_soon(self._hurry, deadline)
        if not self._portal.join(max(deadline - time.monotonic(), 0.0) + _CLOSE_GRACE):
            logger.warning("the producer's thread %s outlived close()", self._portal.thread.name)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        # On an exception, close at once (as open_producer does): nothing more is sent.
        self.close(0.0 if exc_info[0] is not None else None)

    def _close_at_exit(self) -> None:
        # Exiting anyway: never let a broker problem block or raise here.
        with contextlib.suppress(Exception):
            self.close()

    def metrics(self, timeout: float | None = 10.0) -> MetricsSnapshot:
        """The producer's counters (records sent, acknowledged, failed, ...)."""
        snapshot: MetricsSnapshot = self._call(
            lambda p: p.metrics(), ordered=False, timeout=timeout
        )
        return snapshot

    # -- transactions -------------------------------------------------------------------

    def init_transactions(self, timeout: float | None = None) -> None:
        """Find the transaction coordinator and get a producer id and epoch, fencing
        any earlier producer with the same `transactional_id` (Java's initTransactions).
        Needs `transactional_id=`; `ConfigError` otherwise."""
        self._call(lambda p: p.init_transactions(timeout))

    def begin_transaction(self) -> None:
        """Start a transaction: `send()` is allowed until commit or abort."""
        self._call(lambda p: p.begin_transaction())

    def commit_transaction(self) -> None:
        """Send everything sent so far, then commit. Raises an `AbortableError`
        (abort and go on), a `FatalError` (close the producer) or
        `TransactionOutcomeUnknownError` (may or may not be committed)."""
        self._call(lambda p: p.commit_transaction())

    def abort_transaction(self) -> None:
        """Abort: records not yet sent fail with `TransactionAbortedError`; those
        written are never shown to read_committed consumers."""
        self._call(lambda p: p.abort_transaction())

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[tuple[str, int], OffsetAndMetadata | int],
        group_metadata: GroupMetadata | str,
    ) -> None:
        """Commit a consumer group's positions with this transaction (and only with it):
        `offsets` maps (topic, partition) to the next offset to read."""
        self._call(lambda p: p.send_offsets_to_transaction(offsets, group_metadata))

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Begin a transaction; commit on normal exit; abort on an exception (bounded)
        and re-raise it. The async producer's `transaction()`, entered and exited from
        this thread."""
        manager: contextlib.AbstractAsyncContextManager[None] = self._call(_enter_transaction)
        try:
            yield
        except BaseException as exc:
            self._call(functools.partial(_exit_transaction, manager, exc))
            raise
        self._call(functools.partial(_exit_transaction, manager, None))

    # -- the calling threads' helpers ---------------------------------------------------

    def _call(
        self,
        fn: Callable[[AsyncProducer], Any],
        *,
        ordered: bool = True,
        timeout: float | None = None,
    ) -> Any:
        """Run `fn(producer)` in the trio thread (awaited if it returns an awaitable)
        and return its result. `ordered`: after every record sent before it is appended."""
        self._refuse_in_own_thread("a blocking call")
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise _closed_error()
            if not self._portal.put((_Kind.CALL, (fn, ordered), future)):
                raise ProducerClosedError("the producer's thread has stopped")
        return future.result(timeout)

    def _refuse_in_own_thread(self, what: str) -> None:
        if self._portal.in_trio_thread():
            raise RuntimeError(
                f"{what} from a delivery callback (the producer's own thread) would wait "
                "for itself: call it from another thread"
            )

    def _settle(
        self, future: DeliveryFuture, outcome: Outcome | None, error: BaseException | None
    ) -> None:
        """Any thread: give `future` its final state, and count it settled."""
        future._outcome = outcome
        if error is None:
            future.set_result(outcome)  # type: ignore[arg-type]
        else:
            future.set_exception(error)
        with self._lock:
            self._pending -= 1
            if not self._pending:
                self._changed.notify_all()

    def _appended(self) -> None:
        with self._lock:
            self._unappended -= 1
            if self._unappended == _MAX_UNAPPENDED - 1:
                self._changed.notify_all()

    def _abandon(self, item: _Item) -> None:
        """The trio run ended with `item` still queued."""
        kind, payload, future = item
        error = ProducerClosedError("the producer closed before this was handed to it")
        if kind is _Kind.SEND:
            assert isinstance(future, DeliveryFuture)
            self._refused(future, payload, error)
            self._appended()
        elif future is not None and not future.done():
            future.set_exception(error)

    def _refused(self, future: DeliveryFuture, args: _SendArgs, error: BaseException) -> None:
        topic, partition = args[0], args[4]
        if isinstance(topic, ProducerRecord):
            topic, partition = topic.topic, topic.partition
        partition = -1 if partition is None else partition
        outcome: Outcome | None = None
        if isinstance(error, AmbiguousError):
            outcome = Ambiguous(topic, partition, error)
        elif isinstance(error, KafkaError):
            outcome = Failed(topic, partition, error)
        self._settle(future, outcome, error)

    # -- the trio thread ----------------------------------------------------------------

    async def _main(self, portal: TrioThread[_Item]) -> None:
        async with (
            open_producer(self._bootstrap, **self._options) as producer,
            trio.open_nursery() as lanes,
        ):
            self._lane_nursery = lanes
            self._lane_ended = trio.Event()
            portal.started()
            deadline = await self._pump(portal, producer)
            await self._close(producer, deadline)

    async def _pump(self, portal: TrioThread[_Item], producer: AsyncProducer) -> float:
        """Take items in order until CLOSE; returns its deadline (time.monotonic())."""
        lanes = self._lanes
        while True:
            items = await portal.take()
            for position, (kind, payload, future) in enumerate(items):
                match kind:
                    case _Kind.SEND:
                        topic = payload[0]
                        if topic.__class__ is not str:
                            topic = topic.topic
                        lane = lanes.get(topic)
                        if lane is None:
                            lane = lanes[topic] = collections.deque()
                            self._start_lane(producer, topic, lane)
                        lane.append((payload, future))  # type: ignore[arg-type]
                    case _Kind.FLUSH:
                        assert self._lane_nursery is not None
                        self._lane_nursery.start_soon(self._flush, producer, payload)
                    case _Kind.CALL:
                        assert future is not None
                        await self._run_call(producer, payload, future)
                    case _Kind.CLOSE:
                        for rest in items[position + 1 :]:  # nothing follows CLOSE; if
                            self._abandon(rest)  # something did, it is answered
                        return float(payload)

    def _start_lane(
        self,
        producer: AsyncProducer,
        topic: str,
        lane: collections.deque[tuple[_SendArgs, DeliveryFuture]],
    ) -> None:
        scope = trio.CancelScope()
        self._lane_scopes[topic] = scope
        assert self._lane_nursery is not None
        self._lane_nursery.start_soon(self._lane, producer, topic, lane, scope)

    async def _lane(
        self,
        producer: AsyncProducer,
        topic: str,
        lane: collections.deque[tuple[_SendArgs, DeliveryFuture]],
        scope: trio.CancelScope,
    ) -> None:
        """Send one topic's records in order until none is left."""
        try:
            with scope:
                while lane:
                    args, future = lane.popleft()
                    try:
                        handle = await producer.send(
                            args[0],
                            args[1],
                            key=args[2],
                            headers=args[3],
                            partition=args[4],
                            timestamp=args[5],
                        )
                    except Exception as exc:  # KafkaError, TypeError, a serializer's error
                        self._refused(future, args, exc)
                    except BaseException:  # cancelled at close, inside producer.send()
                        self._refused(future, args, self._cancelled_error(producer, topic))
                        raise
                    else:
                        handle.add_done_callback(self._resolver(future))
                    finally:
                        self._appended()
        finally:
            # Cancelled at close: the records still queued were never handed over.
            error = ProducerClosedError(
                "the producer closed before this record was appended (it was waiting "
                f"for topic {topic!r} to be sendable); it was not written"
            )
            while lane:
                args, future = lane.popleft()
                self._refused(future, args, error)
                self._appended()
            del self._lanes[topic]
            del self._lane_scopes[topic]
            ended, self._lane_ended = self._lane_ended, trio.Event()
            assert ended is not None
            ended.set()

    def _cancelled_error(self, producer: AsyncProducer, topic: str) -> KafkaError:
        """The error for a record whose producer.send() was cancelled at close. Without
        metadata for its topic it cannot have been appended (send() waits for that
        before appending); with it, the cancel may have come just after the append."""
        found = producer.selector.metadata.topic(topic)
        if found is None or not found.is_usable:
            return ProducerClosedError(
                f"the producer closed while this record waited for the metadata of topic "
                f"{topic!r}; it was not written"
            )
        return AmbiguousError(
            "the producer closed while this record was being appended; it may have been written"
        )

    def _resolver(self, future: DeliveryFuture) -> Callable[[Any], None]:
        def resolve(handle: RecordHandle) -> None:
            outcome = handle.outcome
            if isinstance(outcome, Acknowledged):
                self._settle(future, outcome, None)
            elif outcome is not None:
                self._settle(future, outcome, outcome.error)

        return resolve

    async def _lanes_idle(self) -> None:
        while self._lanes:
            assert self._lane_ended is not None
            await self._lane_ended.wait()

    async def _flush_everything(self, producer: AsyncProducer) -> None:
        """Until every record handed over is appended and settled."""
        while True:
            await self._lanes_idle()
            await producer.flush()
            if not self._lanes:
                return

    async def _flush(self, producer: AsyncProducer, deadline: float) -> None:
        with trio.move_on_at(_trio_deadline(deadline)):
            await self._flush_everything(producer)

    async def _run_call(
        self,
        producer: AsyncProducer,
        payload: tuple[Callable[[AsyncProducer], Any], bool],
        future: concurrent.futures.Future[Any],
    ) -> None:
        fn, ordered = payload
        with trio.CancelScope() as scope:
            self._call_scope = scope
            if self._close_deadline is not None:
                scope.deadline = self._close_deadline
            try:
                if ordered:
                    await self._lanes_idle()
                result = fn(producer)
                if inspect.isawaitable(result):
                    result = await result
            except Exception as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)
            finally:
                self._call_scope = None
        if scope.cancelled_caught:
            future.set_exception(
                ProducerClosedError(
                    "the producer was closed (its deadline passed) during this call"
                )
            )

    def _hurry(self, deadline: float) -> None:
        """close() began: bound a running call by close's deadline."""
        self._close_deadline = _trio_deadline(deadline)
        if self._call_scope is not None:
            self._call_scope.deadline = min(self._call_scope.deadline, self._close_deadline)

    async def _close(self, producer: AsyncProducer, deadline: float) -> None:
        trio_deadline = _trio_deadline(deadline)
        with trio.move_on_at(trio_deadline):
            await self._flush_everything(producer)
        # Every lane still busy is inside producer.send(): aclose() refuses those
        # waiting for buffer memory; those waiting for metadata are cancelled after it.
        await producer.aclose(max(trio_deadline - trio.current_time(), 0.0))
        for scope in self._lane_scopes.values():
            scope.cancel()
        assert self._lane_nursery is not None
        self._lane_nursery.cancel_scope.cancel()


async def _enter_transaction(producer: AsyncProducer) -> Any:
    manager = producer.transaction()
    await manager.__aenter__()
    return manager


async def _exit_transaction(
    manager: contextlib.AbstractAsyncContextManager[None],
    exc: BaseException | None,
    _producer: AsyncProducer,
) -> None:
    """Commit (exc None) or abort and re-raise, as the async `transaction()` does."""
    if exc is None:
        await manager.__aexit__(None, None, None)
    else:
        await manager.__aexit__(type(exc), exc, exc.__traceback__)


def _trio_deadline(deadline: float) -> float:
    """A time.monotonic() deadline on the running trio clock."""
    if deadline == math.inf:
        return math.inf
    return trio.current_time() + (deadline - time.monotonic())


def _checked_timeout(what: str, timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise ValueError(f"{what}(timeout={timeout!r}): the timeout must be seconds >= 0, or None")
    return float(timeout)


def _closed_error() -> ProducerClosedError:
    return ProducerClosedError("the producer is closed; nothing more can be sent with it")


def _config_options(options: dict[str, Any]) -> dict[str, Any]:
    """The options that are `ProducerConfig` fields (the rest are open_producer seams)."""
    seams = {
        "selector",
        "transport",
        "clock",
        "rng",
        "wall_clock",
        "sasl",
        "metrics_interval",
        "buggify",
    }
    return {k: v for k, v in options.items() if k not in seams}


__all__ = ["DeliveryFuture", "Producer"]
