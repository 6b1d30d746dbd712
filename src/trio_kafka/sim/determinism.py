"""Seeded, deterministic trio runs for the simulator.

Theory of operation: a simulated run must be a pure function of its seed. Three things in
trio are not, by default:

- time: `_timers.VirtualClock` replaces the wall clock and `_timers.VirtualTimers` (an
  instrument) jumps it to the next deadline or simulator timer whenever every task is
  blocked, so a run takes virtual seconds, not real ones (as `MockClock`'s autojump
  does, without its idle round per jump, and without an I/O poll per round; the
  runner's run queue, idle waiters, deadlines, I/O manager and entry queue it reads are
  private, checked here too);
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
from typing import Any, TypeVar

import attrs
import trio

import trio_kafka
from trio_kafka.sim._timers import VirtualClock, VirtualTimers

T = TypeVar("T")


class DeterminismUnavailableError(RuntimeError):
    """trio's private scheduler hooks are gone: simulated runs would not be reproducible."""


def check_trio_hooks() -> None:
    """Fail loudly if trio no longer has the private hooks seeded runs depend on."""
    from trio._core import _run

    missing = [
        name for name in ("_ALLOW_DETERMINISTIC_SCHEDULING", "_r") if not hasattr(_run, name)
    ]
    if not missing and not hasattr(_run._r, "seed"):
        missing.append("_r.seed")
    # What `VirtualTimers` reads of the runner (attrs fields of `Runner`).
    runner_class: Any = getattr(_run, "Runner", None)
    fields = (
        {f.name for f in attrs.fields(runner_class)}
        if isinstance(runner_class, type) and attrs.has(runner_class)
        else set()
    )
    missing += [
        f"Runner.{name}"
        for name in (
            "runq",
            "waiting_for_idle",
            "deadlines",
            "io_manager",
            "entry_queue",
            "instruments",
        )
        if name not in fields
    ]
    # What `_timers._SimulatedIO` reads of the entry queue (its pending callbacks).
    from trio._core import _entry_queue

    queue_class: Any = getattr(_entry_queue, "EntryQueue", None)
    queue_fields = (
        {f.name for f in attrs.fields(queue_class)}
        if isinstance(queue_class, type) and attrs.has(queue_class)
        else set()
    )
    missing += [
        f"EntryQueue.{name}" for name in ("queue", "idempotent_queue") if name not in queue_fields
    ]
    if not hasattr(getattr(_run, "Deadlines", None), "next_deadline"):
        missing.append("Deadlines.next_deadline")
    # What `_timers._Instruments` borrows of trio's instruments (methods that read `data`).
    from trio._core import _instrumentation

    instruments: Any = getattr(_instrumentation, "Instruments", None)
    missing += [
        f"Instruments.{name}"
        for name in ("add_instrument", "remove_instrument", "call")
        if not hasattr(instruments, name)
    ]
    if not hasattr(_run, "GLOBAL_RUN_CONTEXT"):
        missing.append("GLOBAL_RUN_CONTEXT")
    if missing:
        raise DeterminismUnavailableError(
            f"trio {trio.__version__} lacks trio._core._run.{', '.join(missing)}: the "
            "simulator cannot make trio's scheduler deterministic or drive its virtual "
            "clock with this trio version"
        )


#: `check_trio_hooks` passed in this process (trio's modules do not change while it
#: runs: asked once, not before every seed, where it cost ~0.2% of a lite seed).
_hooks_checked = False


def seed_scheduler(seed: int) -> None:
    """Make trio's scheduler deterministic and seed it (affects the next `trio.run`)."""
    global _hooks_checked
    if not _hooks_checked:
        check_trio_hooks()
        _hooks_checked = True
    from trio._core import _run

    _run._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
    _run._r.seed(seed)


def run_seeded(async_fn: Callable[[VirtualClock], Awaitable[T]], *, seed: int) -> T:
    """Run `async_fn(clock)` under a seeded scheduler and the virtual clock, whose timers
    (`_timers.current_timers()`) the simulator uses."""
    seed_scheduler(seed)
    clock = VirtualClock()
    timers = VirtualTimers(clock)

    async def main() -> T:
        async with trio.open_nursery() as nursery:
            await nursery.start(timers.guard)
            try:
                return await async_fn(clock)
            finally:
                nursery.cancel_scope.cancel()

    return trio.run(main, clock=clock, instruments=[timers])


def seed_identity(seed: int) -> str:
    """What a seed means: the seed and every version that can change its run."""
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    return (
        f"seed={seed} trio-kafka={trio_kafka.__version__} python={python} trio={trio.__version__}"
    )
