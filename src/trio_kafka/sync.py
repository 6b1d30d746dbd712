"""A blocking producer for scripts, threads, Spark executors and asyncio programs.

    from trio_kafka.sync import Producer

    with Producer("host:9092", compression="zstd") as producer:
        future = producer.send("orders", b"value", key=b"k")
        producer.flush(10)                   # returns how many records are still pending
        print(future.result(timeout=10))     # Acknowledged(topic, partition, offset, ...)

Theory of operation
-------------------
One daemon thread, started by anyio's blocking portal, runs an event loop (trio) with an
`open_producer()` inside (`_sync_portal.py` is the bridge: an ordered inbox and one
wakeup per burst). Calling threads never touch the loop's objects; what they share with
the loop thread is `_lock` and the counters under it. The calling threads may run
anything, asyncio included (docs/asyncio.md says when to prefer the async producer).

- `send()` checks what it can (types), counts the record as pending and hands it over;
  it returns a `DeliveryFuture` at once. It blocks only when `MAX_UNAPPENDED` records
  are handed over and not yet in the producer's buffer (then for up to `max_block`).
- The loop side's pump takes items in order and puts each record in a *lane*: a task
  that awaits `producer.send()` for its records one after another. A topic whose
  metadata is not known yet gets a lane of its own, so its wait holds back only its own
  records (no head-of-line blocking); the topics whose metadata is known share one lane
  (their sends wait for nothing but buffer memory, which all topics share), so records
  round robin over thousands of topics do not start a task each. A topic's records are
  in one lane at a time: order within a topic is kept.
- Each record's future is settled from its handle's done-callback, or at once with the
  error when `send()` refused it; the ledger's `pending` counts futures not settled, which is what
  `flush(timeout)` waits on and returns.
- Transactions and `metrics()` are calls run by the pump. A transactional call first
  waits until every lane is idle, so it sees every record sent before it.
- `close(timeout)`: sends from then on are refused; the loop side flushes until the
  deadline, closes the producer with what is left of it (records in flight end
  Ambiguous, records never sent Failed), cancels the lanes still waiting (their records
  end Failed, or Ambiguous if they may have been appended), and the run ends; `close`
  joins the thread. A transactional call running at close is cancelled at the deadline.

Interpreter exit: the thread is a daemon, and an `atexit` hook closes a producer the
program forgot to close, bounded by `close_timeout`, so exit never hangs on a broker.

Fork: the thread and its connections stay in the parent. An `os.register_at_fork` hook
marks every live producer closed in the child (with a fresh lock: a parent's thread may
have held the old one), so the child's calls raise at once, saying to make a producer of
its own, and its `close()` and exit return at once; the parent goes on unaffected.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import functools
import logging
import math
import os
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from trio_kafka._sync_ledger import MAX_UNAPPENDED, DeliveryFuture, Item, Kind, Ledger
from trio_kafka._sync_portal import LoopThread
from trio_kafka._sync_runner import Runner, enter_transaction, exit_transaction
from trio_kafka._sync_signals import install_sigterm_handler
from trio_kafka.client import (
    GroupMetadata,
    MetricsSnapshot,
    OffsetAndMetadata,
    ProducerConfig,
    ProducerRecord,
    pop_security,
)
from trio_kafka.client import Producer as AsyncProducer
from trio_kafka.errors import BufferFullError, ConfigError, ProducerClosedError

logger = logging.getLogger("trio_kafka.sync")

_STARTUP_TIMEOUT = 60.0
#: How long `close()` waits for the thread beyond its deadline: the loop side's own work
#: after the deadline (settle, cancel, close sockets) takes milliseconds; this only keeps
#: a bug from hanging the caller.
_CLOSE_GRACE = 5.0
_THREAD_NAME = "trio-kafka-producer"

_BYTES_LIKE = (bytes, bytearray, memoryview, type(None))
#: send() yields the GIL once per this many calls (a power of two: the test is a mask).
_YIELD_EVERY = 128


class Producer:
    """A blocking Kafka producer (see docs/sync.md). `bootstrap` and `**options` are
    `open_producer()`'s: `ProducerConfig` fields (`linger`, `compression`, `acks`,
    `transactional_id`, ...; a typo names the closest option), and its security options
    (`tls=`, `sasl=`, or Kafka's `security_protocol`, `sasl_mechanism`, `ssl_cafile`, ...:
    docs/security.md).

    `close_on_sigterm=True`: on SIGTERM the producer flushes and closes (within
    `close_timeout`), settling every record's future, before the signal ends the process
    (`install_sigterm_handler`, docs/shutdown.md); main thread only (`ConfigError`)."""

    def __init__(
        self,
        bootstrap: str | Iterable[str] | None = None,
        *,
        close_on_sigterm: bool = False,
        **options: Any,
    ) -> None:
        # Validate here, in the caller's thread, so a typo raises from the constructor:
        # the security options (`tls=`, `sasl=`, Kafka's `security_protocol`, `ssl_cafile`,
        # ...) as open_producer reads them (on a copy: the loop thread reads them again),
        # then the rest as ProducerConfig fields.
        producer_options = dict(options)
        pop_security(producer_options, producer_options.pop("tls", None), options.get("sasl"))
        config = ProducerConfig.from_kwargs(**_config_options(producer_options))
        if "selector" in options:
            raise ConfigError(
                "selector= cannot be shared with the blocking Producer: a KafkaSelector "
                "belongs to one event loop, and this producer runs its own in its thread; "
                "pass bootstrap='host:port'"
            )
        if bootstrap is None:
            raise ConfigError(
                "Producer needs bootstrap='host:port' (one broker's address, or several "
                "separated by commas)"
            )
        self.config = config
        # send() checks value and key types itself unless something else turns them
        # into bytes (serializers, interceptors).
        self._check_value = config.value_serializer is None and not config.interceptors
        self._check_key = config.key_serializer is None and not config.interceptors

        # Shared with the loop thread (the lock and the counts under it).
        self._ledger = ledger = Ledger()
        # send() calls so far (under the lock): every _YIELD_EVERY-th yields the GIL.
        self._sends = 0
        self._runner = runner = Runner(ledger, bootstrap, options)
        self._portal: LoopThread[Item] = LoopThread(
            runner.main,
            name=_THREAD_NAME,
            on_abandoned=ledger.abandon,
            startup_timeout=_STARTUP_TIMEOUT,
        )
        atexit.register(self._close_at_exit)
        self._pid = os.getpid()
        _LIVE.add(self)
        if close_on_sigterm:
            try:
                install_sigterm_handler(self)
            except ConfigError:
                self.close(0.0)
                raise

    def _forked(self) -> None:
        """In a forked child: the thread is the parent's; every call here is refused
        with an error that says so, and close() returns at once."""
        self._ledger.after_fork(self._pid)
        atexit.unregister(self._close_at_exit)

    def __repr__(self) -> str:
        state = "closed" if self._ledger.closed else "open"
        return f"<trio_kafka.sync.Producer {state} pending={self._ledger.pending} {self._portal.thread_name}>"

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
        through the future. Blocks only when 65,536 records are still
        waiting to be appended, for up to `max_block` (then `BufferFullError`).
        Raises `ProducerClosedError` after `close()`.
        """
        if topic.__class__ is str:
            _check_record(
                self._check_value, self._check_key, topic, value, key, partition, timestamp
            )
        elif isinstance(topic, ProducerRecord):
            if value is not None or key is not None or headers is not None:
                raise TypeError("pass either a ProducerRecord or topic, value, key=..., not both")
            _check_record(
                self._check_value,
                self._check_key,
                topic.topic,
                topic.value,
                topic.key,
                topic.partition if partition is None else partition,
                topic.timestamp if timestamp is None else timestamp,
            )
        else:
            raise TypeError(
                f"topic must be a str (or a ProducerRecord), not {type(topic).__name__}: {topic!r}"
            )
        future = DeliveryFuture()
        with self._ledger.lock:
            if self._ledger.closed:
                raise self._ledger.closed_error()
            if self._ledger.unappended >= MAX_UNAPPENDED:
                self._wait_for_room()
            self._ledger.unappended += 1
            self._ledger.pending += 1
            if not self._portal.put(
                (Kind.SEND, (topic, value, key, headers, partition, timestamp), future)
            ):
                self._ledger.unappended -= 1
                self._ledger.pending -= 1
                raise ProducerClosedError("the producer's thread has stopped")
            self._sends += 1
            yield_now = not self._sends & (_YIELD_EVERY - 1)
        if yield_now:
            # Let the producer's thread have the GIL now: a loop of sends holds it, and
            # each time that thread returns from a syscall (a socket send, epoll) it
            # would wait up to the 5 ms switch interval for it (the GIL convoy).
            time.sleep(0)
        return future

    def _wait_for_room(self) -> None:
        """Called with the ledger's lock held while MAX_UNAPPENDED records wait to be
        appended."""
        if self._portal.in_loop_thread():
            raise BufferFullError(
                f"{self._ledger.unappended} records are waiting to be appended and send() was "
                "called from a delivery callback (the producer's own thread), which "
                "cannot wait for room: send from another thread"
            )
        max_block = self.config.max_block
        deadline = time.monotonic() + max_block
        while self._ledger.unappended >= MAX_UNAPPENDED and not self._ledger.closed:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BufferFullError(
                    f"{self._ledger.unappended} records are waiting to be appended (for buffer "
                    f"memory, buffer_memory={self.config.buffer_memory} bytes, or for "
                    f"their topics' metadata) and none was within max_block={max_block} s; "
                    "the brokers are slower than the producer, or unreachable"
                )
            self._ledger.changed.wait(remaining)
        if self._ledger.closed:
            raise self._ledger.closed_error()

    # -- flush, close -------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> int:
        """Send everything now and wait until every record has settled, for at most
        `timeout` seconds (None: no limit). Returns the number of records still
        pending (0: all settled), as confluent-kafka's `flush` does; never raises
        for a timeout."""
        timeout = _checked_timeout("flush", timeout)
        self._refuse_in_own_thread("flush")
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        with self._ledger.lock:
            if self._ledger.closed:
                raise self._ledger.closed_error()
            if self._ledger.pending == 0:
                return 0
            self._portal.put((Kind.FLUSH, deadline, None))
            while self._ledger.pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._ledger.changed.wait(None if remaining == math.inf else remaining)
            return self._ledger.pending

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
        if self._ledger.forked_from is not None:
            return  # the parent's producer: nothing of it runs in this process
        self._refuse_in_own_thread("close")
        deadline = time.monotonic() + timeout
        with self._ledger.lock:
            first = not self._ledger.closed
            if first:
                self._ledger.closed = True
                self._portal.put((Kind.CLOSE, deadline, None))
                self._ledger.changed.notify_all()
        if first:
            atexit.unregister(self._close_at_exit)
            self._portal.run_soon(self._runner.hurry, deadline)
        if not self._portal.join(max(deadline - time.monotonic(), 0.0) + _CLOSE_GRACE):
            logger.warning("the producer's thread %s outlived close()", self._portal.thread_name)

    def close_on_signal(self, name: str, timeout: float | None = None) -> None:
        """`close(timeout)`, with later calls told that `name` (e.g. "SIGTERM") closed
        it (what `install_sigterm_handler` calls, from a thread of its own)."""
        with self._ledger.lock:
            if not self._ledger.closed:
                self._ledger.closed_by = f"on {name}"
        logger.info("%s: closing the producer (flush, then settle what is left)", name)
        self.close(timeout)
        logger.info("%s: producer closed, %d record(s) unsettled", name, self._ledger.pending)

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
        """The producer's counters (records sent, acknowledged, failed, ...); after
        `close()`, as they were when it closed."""
        if self._ledger.closed and not self._portal.is_alive():
            final = self._ledger.final_metrics
            if final is not None:
                return final
        snapshot: MetricsSnapshot = self._call(
            lambda p: p.metrics(), ordered=False, timeout=timeout
        )
        return snapshot

    # -- transactions -------------------------------------------------------------------

    def init_transactions(self, timeout: float | None = None) -> None:
        """Find the transaction coordinator and get a producer id and epoch, fencing
        any earlier producer with the same `transactional_id` (Java's initTransactions).
        Needs `transactional_id=`; `ConfigError` otherwise."""
        self._transactional(lambda p: p.init_transactions(timeout))

    def begin_transaction(self) -> None:
        """Start a transaction: `send()` is allowed until commit or abort."""
        self._transactional(lambda p: p.begin_transaction())

    def commit_transaction(self) -> None:
        """Send everything sent so far, then commit. Raises an `AbortableError`
        (abort and go on), a `FatalError` (close the producer) or
        `TransactionOutcomeUnknownError` (may or may not be committed)."""
        self._transactional(lambda p: p.commit_transaction())

    def abort_transaction(self) -> None:
        """Abort: records not yet sent fail with `TransactionAbortedError`; those
        written are never shown to read_committed consumers."""
        self._transactional(lambda p: p.abort_transaction())

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[tuple[str, int], OffsetAndMetadata | int],
        group_metadata: GroupMetadata | str,
    ) -> None:
        """Commit a consumer group's positions with this transaction (and only with it):
        `offsets` maps (topic, partition) to the next offset to read."""
        self._transactional(lambda p: p.send_offsets_to_transaction(offsets, group_metadata))

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Begin a transaction; commit on normal exit; abort on an exception (bounded)
        and re-raise it. The async producer's `transaction()`, entered and exited from
        this thread."""
        manager: contextlib.AbstractAsyncContextManager[None] = self._transactional(
            enter_transaction
        )
        try:
            yield
        except BaseException as exc:
            self._call(functools.partial(exit_transaction, manager, exc))
            raise
        self._call(functools.partial(exit_transaction, manager, None))

    # -- the calling threads' helpers ---------------------------------------------------

    def _transactional(self, fn: Callable[[AsyncProducer], Any]) -> Any:
        if self.config.transactional_id is None:
            raise ConfigError(
                "this producer has no transactional_id: create it with "
                "Producer(..., transactional_id='...') to use transactions"
            )
        return self._call(fn)

    def _call(
        self,
        fn: Callable[[AsyncProducer], Any],
        *,
        ordered: bool = True,
        timeout: float | None = None,
    ) -> Any:
        """Run `fn(producer)` in the loop thread (awaited if it returns an awaitable)
        and return its result. `ordered`: after every record sent before it is appended."""
        self._refuse_in_own_thread("a blocking call")
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._ledger.lock:
            if self._ledger.closed:
                raise self._ledger.closed_error()
            if not self._portal.put((Kind.CALL, (fn, ordered), future)):
                raise ProducerClosedError("the producer's thread has stopped")
        return future.result(timeout)

    def _refuse_in_own_thread(self, what: str) -> None:
        if self._portal.in_loop_thread():
            raise RuntimeError(
                f"{what} from a delivery callback (the producer's own thread) would wait "
                "for itself: call it from another thread"
            )


def _check_record(
    check_value: bool,
    check_key: bool,
    topic: Any,
    value: Any,
    key: Any,
    partition: Any,
    timestamp: Any,
) -> None:
    """send()'s type checks, in the caller's thread (TypeError naming the argument)."""
    if topic.__class__ is not str:
        raise TypeError(f"topic must be a str, not {type(topic).__name__}: {topic!r}")
    if check_value and not isinstance(value, _BYTES_LIKE):
        raise TypeError(
            f"value must be bytes or None, not {type(value).__name__}: pass bytes "
            "(e.g. text.encode()), or set value_serializer"
        )
    if check_key and not isinstance(key, _BYTES_LIKE):
        raise TypeError(
            f"key must be bytes or None, not {type(key).__name__}: pass bytes, or set "
            "key_serializer"
        )
    if partition is not None and (not isinstance(partition, int) or isinstance(partition, bool)):
        raise TypeError(
            f"partition must be an int or None, not {type(partition).__name__}: {partition!r}"
        )
    if timestamp is not None and (not isinstance(timestamp, int) or isinstance(timestamp, bool)):
        raise TypeError(
            f"timestamp must be an int (ms since the epoch) or None, not "
            f"{type(timestamp).__name__}: {timestamp!r}"
        )


def _checked_timeout(what: str, timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise ValueError(f"{what}(timeout={timeout!r}): the timeout must be seconds >= 0, or None")
    return float(timeout)


#: Every Producer not yet garbage (for the fork hook).
_LIVE: weakref.WeakSet[Producer] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for producer in list(_LIVE):
        producer._forked()


os.register_at_fork(after_in_child=_after_fork_in_child)


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
        "harness",
    }
    return {k: v for k, v in options.items() if k not in seams}


__all__ = ["DeliveryFuture", "Producer", "install_sigterm_handler"]
