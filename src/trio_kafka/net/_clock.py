"""The clock and randomness seams of the I/O layer, and the event loop's fast paths.

Nothing in `net/` reads the time or draws a random number except through these: a `Clock`
for timestamps and a `random.Random` instance passed in by whoever builds the selector (the
simulator passes one seeded from the run's seed; production code gets a fresh
`random.Random()`). The global `random` functions, `time.time()` and `time.monotonic()` are
never used, so a simulated run replays exactly.

A `Clock` must tell time on the event loop's timescale: the I/O layer turns
`now() + delay` into anyio deadlines (`anyio.CancelScope(deadline=...)`,
`sleep_until` below). The default, `LoopClock`, reads `anyio.current_time()`: trio's
`current_time()` under trio (virtual under `trio.testing.MockClock`), the loop's
`time()` under asyncio.

`loop_time()`, `checkpoint_function()` and `primitives()` resolve the running backend
once and hand back its own functions and classes, for the paths that run per record,
per batch or per request. anyio's own `Event()`, `CancelScope()` and `current_time()`
look the backend up on every call (an `anyio.Event()` cost ~7x a `trio.Event()` and an
`anyio.CancelScope(deadline=...)` ~4x a trio one, measured on this machine): per batch
and per request that showed in the producer's CPU time on trio. So, on trio, those paths
use trio's own objects (the very ones anyio would wrap, which also keeps the simulator's
scheduling exactly trio's), and on asyncio asyncio's Event (what anyio's wraps) and
anyio's cancel scope.

`open_task_group()` is the same choice for task groups: trio's own nursery on trio,
anyio's task group on asyncio. anyio's task group on trio wraps trio's nursery, and its
`start_soon` (since anyio 4.14) builds a `TaskHandle` with an event and a cancel scope
for every task, which cost the simulator about 11% of its Python calls per seed. What
the shell relies on behaves the same through both: `start_soon(fn, *args, name=)`,
`await start(fn)` with `task_status.started(value)` handed back, `cancel_scope.cancel()`,
and what leaves the `async with`: exceptions in an exception group (strict, as trio's
default), except that a group holding only cancellations leaves as one bare
cancellation, as anyio's task group does on both backends.
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, Protocol

import anyio
import attrs
import sniffio
import trio


class Clock(Protocol):
    """Where the I/O layer reads the current time (seconds, on the event loop's
    timescale)."""

    def now(self) -> float: ...


@attrs.frozen(slots=True)
class LoopClock:
    """The default clock: `anyio.current_time()`, the running event loop's clock (trio's,
    virtual under `MockClock`; asyncio's `loop.time()`)."""

    def now(self) -> float:
        # What anyio.current_time() returns, without its backend lookup (three calls
        # and sniffio's) on every reading: the client reads the clock per request.
        if trio.lowlevel.in_trio_run():
            return trio.current_time()
        return asyncio.get_running_loop().time()


#: The name this clock had while the client ran on trio only (still exported).
TrioClock = LoopClock


def backend_name() -> str:
    """ "trio" or "asyncio": the async library running the calling task."""
    return sniffio.current_async_library()


def loop_time() -> Callable[[], float]:
    """The running loop's own clock function (what `anyio.current_time()` returns, with
    no dispatch per call): trio's clock method, or asyncio's `loop.time`."""
    if backend_name() == "trio":
        return trio.lowlevel.current_clock().current_time
    loop = asyncio.get_running_loop()
    if type(loop).time is asyncio.BaseEventLoop.time:
        # asyncio's own loops: their time() is time.monotonic(), one call fewer per send.
        return time.monotonic
    return loop.time  # uvloop and others keep their own clock


def loop_time_parts() -> tuple[Callable[[], float], float]:
    """`loop_time()` as a function and an offset to add to what it returns, for the
    per-record path: trio's own `SystemClock` reads `offset + time.perf_counter()` in a
    Python method, so there the pair is `(time.perf_counter, offset)`, one C call a
    reading instead of a Python frame around it; every other clock (`MockClock`, a
    simulated one, asyncio's loops) is `(loop_time(), 0.0)`."""
    if backend_name() == "trio":
        clock = trio.lowlevel.current_clock()
        kind = type(clock)
        offset = getattr(clock, "offset", None)
        if (
            kind.__name__ == "SystemClock"
            and kind.__module__.startswith("trio.")
            and offset.__class__ is float
        ):
            return time.perf_counter, offset
        return clock.current_time, 0.0
    return loop_time(), 0.0


def checkpoint_function() -> Callable[[], Awaitable[None]]:
    """The running backend's checkpoint (yield, and raise if cancelled), resolved once."""
    if backend_name() == "trio":
        return trio.lowlevel.checkpoint
    # anyio's asyncio checkpoint is exactly this (its cancel scopes cancel the task).
    return functools.partial(asyncio.sleep, 0)


class Event(Protocol):
    """What `trio.Event`, `anyio.Event` and `asyncio.Event` share."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...

    async def wait(self) -> object: ...


class Scope(Protocol):
    """What `trio.CancelScope` and `anyio.CancelScope` share."""

    @property
    def deadline(self) -> float: ...

    @deadline.setter
    def deadline(self, value: float) -> None: ...

    @property
    def cancelled_caught(self) -> bool: ...

    def cancel(self) -> None: ...

    def __enter__(self) -> Any: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool: ...


class TaskGroup(Protocol):
    """What trio's `Nursery` and anyio's `TaskGroup` share, as the shell uses them."""

    @property
    def cancel_scope(self) -> Scope: ...

    def start_soon(
        self, func: Callable[..., Coroutine[Any, Any, Any]], /, *args: Any, name: object = None
    ) -> object: ...

    async def start(
        self, func: Callable[..., Coroutine[Any, Any, Any]], /, *args: Any, name: object = None
    ) -> Any: ...


class _TrioTaskGroup:
    """`async with` trio's own nursery, leaving as anyio's task group does on trio: a
    group of nothing but cancellations becomes one bare `trio.Cancelled` (what an
    `except Cancelled` around `open_producer` saw before; the enclosing cancel scope
    catches either)."""

    __slots__ = ("_manager",)

    def __init__(self) -> None:
        self._manager = trio.open_nursery(strict_exception_groups=True)

    async def __aenter__(self) -> trio.Nursery:
        return await self._manager.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        try:
            return bool(await self._manager.__aexit__(exc_type, exc_value, traceback))
        except BaseExceptionGroup as group:
            if not group.split(trio.Cancelled)[1]:
                # A fresh Cancelled, as anyio raises (re-raising a leaf would make a
                # reference cycle through the group).
                raise trio.Cancelled._create() from group
            raise
        finally:
            del exc_value, traceback


@attrs.frozen(slots=True)
class Primitives:
    """The running backend's event and cancel scope classes (see the module doc)."""

    #: `event()` makes an unset event.
    event: Callable[[], Event]
    #: `scope(deadline=..., shield=...)` makes a cancel scope.
    scope: Callable[..., Scope]
    #: `async with task_group() as tasks:` opens a task group (see `open_task_group`).
    task_group: Callable[[], AbstractAsyncContextManager[TaskGroup]]


_TRIO_PRIMITIVES = Primitives(event=trio.Event, scope=trio.CancelScope, task_group=_TrioTaskGroup)
# asyncio's Event is what anyio's wraps (anyio's wait also yields when already set; our
# waits check is_set() first or do not need the yield).
_ASYNCIO_PRIMITIVES = Primitives(
    event=asyncio.Event, scope=anyio.CancelScope, task_group=anyio.create_task_group
)


def primitives() -> Primitives:
    """The event and scope classes for the running backend, resolved once by whoever
    keeps them (a connection, a producer's sender)."""
    return _TRIO_PRIMITIVES if backend_name() == "trio" else _ASYNCIO_PRIMITIVES


def open_task_group() -> AbstractAsyncContextManager[TaskGroup]:
    """`async with open_task_group() as tasks:` on the running backend: trio's nursery
    on trio, anyio's task group on asyncio (see the module doc)."""
    return primitives().task_group()


async def sleep_until(deadline: float) -> None:
    """Sleep until `deadline` on the loop's clock, exactly as trio's `sleep_until` does (a
    cancel scope at that deadline): on trio, trio's own (anyio's scope and its
    `sleep_forever` add a second scope and a backend lookup to every timed wait). anyio's
    `sleep_until` sleeps `deadline - now`, which can land an ulp away from `deadline` and
    reorder two wakeups due at the same instant (seen in the simulator's traces)."""
    if backend_name() == "trio":
        await trio.sleep_until(deadline)
        return
    with anyio.CancelScope(deadline=deadline):
        await anyio.sleep_forever()


def default_rng(rng: random.Random | None) -> random.Random:
    """The generator to use: the one given, else a fresh unseeded one (not the global)."""
    return rng if rng is not None else random.Random()
