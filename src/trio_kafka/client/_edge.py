"""The one place where client/ reaches for the OS: default clock, randomness, wall time.

Everything else in client/ receives these as arguments, so the simulator can inject a
virtual clock, a seeded generator and a virtual wall clock and replay a run exactly.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from trio_kafka.net import Clock, TrioClock


def edge_defaults(
    clock: Clock | None,
    rng: random.Random | None,
    wall_clock: Callable[[], float] | None,
) -> tuple[Clock, random.Random, Callable[[], float]]:
    """Fill in what the caller did not inject: trio's clock, a fresh unseeded generator
    (never the global one), and `time.time` for record timestamps."""
    return (
        clock if clock is not None else TrioClock(),
        rng if rng is not None else random.Random(),
        wall_clock if wall_clock is not None else time.time,
    )


def new_writer_id() -> str:
    """A fresh conditional-writer id (`uuid4`): the default of `open_conditional_writer`'s
    `writer_ids` seam; the simulator passes a deterministic source instead."""
    import uuid

    return uuid.uuid4().hex
