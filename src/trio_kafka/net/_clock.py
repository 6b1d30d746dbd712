"""The clock and randomness seams of the I/O layer.

Nothing in `net/` reads the time or draws a random number except through these: a `Clock`
for timestamps and a `random.Random` instance passed in by whoever builds the selector (the
simulator passes one seeded from the run's seed; production code gets a fresh
`random.Random()`). The global `random` functions, `time.time()` and `time.monotonic()` are
never used, so a simulated run replays exactly.

A `Clock` must tell time on trio's timescale: the I/O layer turns `now() + delay` into trio
deadlines (`trio.move_on_at`, `trio.sleep_until`). The default reads `trio.current_time()`,
which under `trio.testing.MockClock` is virtual time.
"""

from __future__ import annotations

import random
from typing import Protocol

import attrs
import trio


class Clock(Protocol):
    """Where the I/O layer reads the current time (seconds, on trio's timescale)."""

    def now(self) -> float: ...


@attrs.frozen(slots=True)
class TrioClock:
    """The default clock: `trio.current_time()` (virtual under `MockClock`)."""

    def now(self) -> float:
        return trio.current_time()


def default_rng(rng: random.Random | None) -> random.Random:
    """The generator to use: the one given, else a fresh unseeded one (not the global)."""
    return rng if rng is not None else random.Random()
