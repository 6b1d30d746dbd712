"""Seeded, deterministic trio runs for the simulator.

Theory of operation: a simulated run must be a pure function of its seed. Three things in
trio are not, by default:

- time: `MockClock(autojump_threshold=0)` replaces the wall clock and jumps to the next
  deadline whenever every task is blocked, so a run takes virtual seconds, not real ones;
- the scheduler: trio shuffles each batch of runnable tasks with a private module-level
  `random.Random` (`trio._core._run._r`) unless `_ALLOW_DETERMINISTIC_SCHEDULING` is set,
  in which case it sorts the batch by task creation order and shuffles it with `_r`. We set
  the flag and seed `_r` before every run. Both names are private: `check_trio_hooks()`
  fails loudly (and a test guards it) the day trio renames them;
- everything else that touches the OS (sockets, `time.*`, `os.urandom`, global `random`)
  is kept out of the client by injection (`Transport`, clock, rng).

A seed's identity is the seed plus what can change its meaning: the trio-kafka version,
the Python minor version and the trio version (`seed_identity`).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio
import trio.testing

import trio_kafka

T = TypeVar("T")


class DeterminismUnavailableError(RuntimeError):
    """trio's private scheduler hooks are gone: simulated runs would not be reproducible."""


def check_trio_hooks() -> None:
    """Fail loudly if trio no longer has the private hooks seeded runs depend on."""
    from trio._core import _run

    missing = [
        name for name in ("_ALLOW_DETERMINISTIC_SCHEDULING", "_r") if not hasattr(_run, name)
    ]
    if missing or not hasattr(getattr(_run, "_r", None), "seed"):
        raise DeterminismUnavailableError(
            f"trio {trio.__version__} lacks trio._core._run.{', '.join(missing) or '_r.seed'}: "
            "the simulator cannot make trio's scheduler deterministic with this trio version"
        )


def seed_scheduler(seed: int) -> None:
    """Make trio's scheduler deterministic and seed it (affects the next `trio.run`)."""
    check_trio_hooks()
    from trio._core import _run

    _run._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
    _run._r.seed(seed)


def run_seeded(async_fn: Callable[[trio.testing.MockClock], Awaitable[T]], *, seed: int) -> T:
    """Run `async_fn(clock)` under a seeded scheduler and a virtual clock that autojumps."""
    seed_scheduler(seed)
    clock = trio.testing.MockClock(autojump_threshold=0)

    async def main() -> T:
        return await async_fn(clock)

    return trio.run(main, clock=clock)


def seed_identity(seed: int) -> str:
    """What a seed means: the seed and every version that can change its run."""
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    return (
        f"seed={seed} trio-kafka={trio_kafka.__version__} python={python} trio={trio.__version__}"
    )
