"""A blocking facade over the trio producer, for scripts and Spark executors.

    from trio_kafka.sync import Producer

    with Producer(bootstrap="host:9092", compression="zstd") as producer:
        future = producer.send("orders", b"value", key=b"k")
        producer.flush()
        print(future.result(timeout=10))   # Acknowledged(topic, partition, offset, ...)

Theory of operation
-------------------
One daemon thread runs `trio.run` with an `open_producer()` inside. Calling threads never
touch trio objects: `send()` appends a command to a deque (atomic under the GIL) and, if
the trio side is not already scheduled to look, asks it to with
`TrioToken.run_sync_soon` (the one thread-safe entry into a trio run), so a burst of
sends costs one wakeup, not one per record. The pump task in the trio thread takes
commands in order and awaits `producer.send()` for each, which gives the caller's order
and the producer's backpressure (`buffer_memory`, `max_block`). Callers are held back
when more than `_MAX_QUEUED` commands wait, so memory stays bounded.

Each record's result is a `DeliveryFuture` (a `concurrent.futures.Future`: thread-safe,
`result(timeout)`, `done()`, `add_done_callback`), completed from the trio thread by the
record's done-callback. `flush()` and `close()` are commands too, answered by futures
the caller waits on with a timeout.

Interpreter exit: the thread is a daemon, and an `atexit` hook closes a producer the
program forgot to close, bounded by `close_timeout`, so exit never hangs on a broker.
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import contextlib
import threading
from collections.abc import Iterable
from typing import Any

import trio

from trio_kafka.client import Acknowledged, RecordHandle, open_producer
from trio_kafka.client import Producer as AsyncProducer
from trio_kafka.errors import KafkaError, ProducerClosedError
from trio_kafka.producer import Ambiguous, Failed, ProducerConfig, ProducerRecord

_MAX_QUEUED = 65536
_STARTUP_TIMEOUT = 60.0


class DeliveryFuture(concurrent.futures.Future[Acknowledged]):
    """One record's outcome: `result(timeout)` returns `Acknowledged` or raises the
    error (an `AmbiguousError` when the record may have been written)."""


class Producer:
    """The blocking producer (see the module doc). `**options` are `open_producer`'s."""

    def __init__(self, bootstrap: str | Iterable[str] | None = None, **options: Any) -> None:
        # Validate here, in the caller's thread, so a typo raises from the constructor.
        ProducerConfig.from_kwargs(**_config_options(options))
        self._bootstrap = bootstrap
        self._options = options
        self._close_timeout = float(options.get("close_timeout", 30.0))
        # Commands from calling threads: ("send", args, kwargs, future) etc.
        self._commands: collections.deque[tuple[str, Any, Any, concurrent.futures.Future[Any]]] = (
            collections.deque()
        )
        self._lock = threading.Lock()
        # True while a wakeup of the pump is scheduled and not yet run (under _lock).
        self._kicked = False
        self._room = threading.Event()
        self._room.set()
        self._closed = False
        self._token: trio.lowlevel.TrioToken | None = None
        self._wake: trio.Event | None = None
        self._started: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, name="trio-kafka-producer", daemon=True)
        self._thread.start()
        self._started.result(timeout=_STARTUP_TIMEOUT)
        atexit.register(self._close_at_exit)

    # -- the calling threads' side --------------------------------------------------------

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
        """Queue one record; returns its future at once (errors arrive through it)."""
        future = DeliveryFuture()
        kwargs = {"key": key, "headers": headers, "partition": partition, "timestamp": timestamp}
        self._submit("send", (topic, value), kwargs, future)
        return future

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every record sent so far has settled."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._submit("flush", (), {}, future)
        future.result(timeout)

    def metrics(self, timeout: float | None = 10.0) -> Any:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._submit("metrics", (), {}, future)
        return future.result(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Flush for up to `timeout` (default `close_timeout`), settle the rest, stop the
        thread. Safe to call twice."""
        timeout = self._close_timeout if timeout is None else timeout
        with self._lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self._close_at_exit)
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._enqueue(("close", (timeout,), {}, future))
        # The trio side bounds the close by `timeout`; the margin covers its own work.
        self._thread.join(timeout + 5.0)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close(0.0 if exc_info[0] is not None else None)

    def _close_at_exit(self) -> None:
        # Exiting anyway: never let a broker problem block or raise here.
        with contextlib.suppress(Exception):
            self.close()

    def _submit(
        self, kind: str, args: Any, kwargs: Any, future: concurrent.futures.Future[Any]
    ) -> None:
        if self._closed:
            raise ProducerClosedError("the producer is closed; nothing more can be sent with it")
        while len(self._commands) >= _MAX_QUEUED:
            self._room.clear()
            if len(self._commands) >= _MAX_QUEUED:
                self._room.wait(1.0)
            if not self._thread.is_alive():
                raise ProducerClosedError("the producer's thread has stopped")
        self._enqueue((kind, args, kwargs, future))

    def _enqueue(self, command: tuple[str, Any, Any, concurrent.futures.Future[Any]]) -> None:
        self._commands.append(command)
        with self._lock:
            if self._kicked or self._token is None:
                return
            self._kicked = True
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(self._kick)

    # -- the trio thread's side -------------------------------------------------------

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # report a startup failure to the constructor
            if not self._started.done():
                self._started.set_exception(exc)
        finally:
            error = ProducerClosedError("the producer's thread has stopped")
            while self._commands:
                _, _, _, future = self._commands.popleft()
                if not future.done():
                    future.set_exception(error)
            self._room.set()

    def _kick(self) -> None:
        with self._lock:
            self._kicked = False
        if self._wake is not None:
            self._wake.set()

    async def _main(self) -> None:
        async with open_producer(self._bootstrap, **self._options) as producer:
            self._wake = trio.Event()
            self._token = trio.lowlevel.current_trio_token()
            self._started.set_result(None)
            close_timeout = await self._pump(producer)
            await producer.aclose(close_timeout)
            self._fail_queued()

    async def _pump(self, producer: AsyncProducer) -> float | None:
        commands = self._commands
        while True:
            assert self._wake is not None
            await self._wake.wait()
            self._wake = trio.Event()
            while commands:
                kind, args, kwargs, future = commands.popleft()
                if len(commands) < _MAX_QUEUED // 2 and not self._room.is_set():
                    self._room.set()
                match kind:
                    case "send":
                        try:
                            handle = await producer.send(*args, **kwargs)
                        except KafkaError as exc:
                            future.set_exception(exc)
                        except Exception as exc:  # TypeError for a bad value, ...
                            future.set_exception(exc)
                        else:
                            handle.add_done_callback(_resolver(future))
                    case "flush":
                        try:
                            await producer.flush()
                        except Exception as exc:
                            future.set_exception(exc)
                        else:
                            future.set_result(None)
                    case "metrics":
                        future.set_result(producer.metrics())
                    case "close":
                        future.set_result(None)
                        timeout: float | None = args[0]
                        return timeout
            self._room.set()

    def _fail_queued(self) -> None:
        error = ProducerClosedError("the producer closed before this command ran")
        while self._commands:
            _, _, _, future = self._commands.popleft()
            if not future.done():
                future.set_exception(error)


def _resolver(future: concurrent.futures.Future[Any]) -> Any:
    def resolve(handle: RecordHandle) -> None:
        outcome = handle.outcome
        if isinstance(outcome, Acknowledged):
            future.set_result(outcome)
        elif isinstance(outcome, Failed | Ambiguous):
            future.set_exception(outcome.error)

    return resolve


def _config_options(options: dict[str, Any]) -> dict[str, Any]:
    """The options that are `ProducerConfig` fields (the rest are open_producer seams)."""
    seams = {"selector", "transport", "clock", "rng", "wall_clock", "sasl", "metrics_interval"}
    return {k: v for k, v in options.items() if k not in seams}


__all__ = ["DeliveryFuture", "Producer"]
