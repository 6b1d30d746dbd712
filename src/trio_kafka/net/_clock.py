"""The clock and randomness seams of the I/O layer, and the event loop's fast paths.

Nothing in `net/` reads the time or draws a random number except through these: a `Clock`
for timestamps and a `random.Random` instance passed in by whoever builds the selector (the
simulator passes one seeded from the run's seed; production code gets a fresh
`random.Random()`). The global `random` functions, `time.time()` and `time.monotonic()` are
never used, so a simulated run replays exactly.

A `Clock` must tell time on the event loop's timescale: the I/O layer turns
`now() + delay` into anyio deadlines (`anyio.CancelScope(deadline=...)`,
`anyio.sleep_until`). The default, `LoopClock`, reads `anyio.current_time()`: trio's
`current_time()` under trio (virtual under `trio.testing.MockClock`), the loop's
`time()` under asyncio.

`loop_time()` and the checkpoints below resolve the running backend once and hand back
its own function, for the per-record paths, where anyio's per-call dispatch (a backend
lookup each time) would cost more than the rest of the work.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Awaitable, Callable
from typing import Protocol

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
        return anyio.current_time()


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
    return asyncio.get_running_loop().time


def checkpoint_function() -> Callable[[], Awaitable[None]]:
    """The running backend's checkpoint (yield, and raise if cancelled), resolved once."""
    if backend_name() == "trio":
        return trio.lowlevel.checkpoint
    # anyio's asyncio checkpoint is exactly this (its cancel scopes cancel the task).
    return functools.partial(asyncio.sleep, 0)


def default_rng(rng: random.Random | None) -> random.Random:
    """The generator to use: the one given, else a fresh unseeded one (not the global)."""
    return rng if rng is not None else random.Random()
