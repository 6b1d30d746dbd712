"""Virtual-time timers for a simulated run, fired by trio's run loop itself.

Theory of operation
-------------------
A simulated run spends its time on scheduler rounds, and the simulator's own timed events
(a chunk reaching the head of its pipe, a handshake's round trip, a clog episode) were each
a task sleeping in trio: a cancel scope with a deadline, a `Cancelled` raised through the
task's stack when it expired, an idle round for `MockClock`'s autojump (trio jumps the
clock *after* it processed the round's deadlines, so every timed wake-up costs one empty
round), then the task's step. Measured here, a scheduler round costs about 9 µs, a cancel
scope about 15 µs and a timed `trio.sleep` about 57 µs.

`VirtualTimers` is a `trio.abc.Instrument`. Once per scheduler round, just before trio
polls for I/O (`before_io_wait`), it:

- fires the callbacks of its timers due at the current virtual time (those armed before
  this round started; a callback arming a timer for now leaves it to the next round, as
  trio leaves a task made runnable during a round to the next one);
- when no task is runnable (and none waits in `wait_all_tasks_blocked`), jumps the
  `MockClock` to the earliest of its own timers and trio's next deadline, and fires what
  is due there. trio then expires its deadlines at that time in the same round, so a
  timed wake-up costs no idle round, and a timer costs no task, no cancel scope and no
  exception.

The clock's own autojump is switched off while the timers are installed: trio calls it
at the end of a round in which nothing became runnable, and it would jump to trio's next
deadline over timers due before it (a round in which timers fired without waking a task
is such a round). The next round's `before_io_wait` jumps instead, to whichever is first.

Callbacks are plain functions: they change the simulated world and wake tasks
(`ParkingLot.unpark_all`, `trio.lowlevel.reschedule`). `sleep_until` is the timed wait
for a task of the simulator (cancellable like any trio wait). A callback that raises
must not vanish into trio's instrument logger: the exception is thrown into a guard task
of the nursery that `open_virtual_timers` runs in, so it fails the run like any task's.

Determinism: timers fire in (time, arming order); the jump is a function of the run's
state. A round in which timers fire but no task becomes runnable runs an empty batch,
which draws nothing from trio's seeded shuffle, so timers alone never perturb the
schedule of the tasks.

This depends on trio internals (the runner's run queue, idle waiters and deadlines):
`check_timer_hooks` fails loudly when they are gone (a test guards it), as
`determinism.check_trio_hooks` does for the scheduler's.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import outcome
import trio
import trio.lowlevel
import trio.testing

from trio_kafka.sim.determinism import DeterminismUnavailableError

#: Timer callbacks fired at one virtual instant beyond which the run is stuck in a loop of
#: callbacks re-arming each other (no task runs, so the runner's step watchdog cannot see
#: it).
MAX_FIRINGS_PER_INSTANT = 100_000


class TimerLivelockError(RuntimeError):
    """Timer callbacks kept re-arming at one virtual instant."""


@attrs.define(eq=False, slots=True)
class Timer:
    """A callback armed for a virtual time; `cancel()` before it fires drops it."""

    when: float
    callback: Callable[..., object]
    args: tuple[Any, ...]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


def _runner() -> Any:
    from trio._core import _run

    return _run.GLOBAL_RUN_CONTEXT.runner


def check_timer_hooks() -> None:
    """Fail loudly if trio's runner no longer has what `VirtualTimers` reads (call inside
    a run)."""
    runner = _runner()
    missing = [
        name for name in ("runq", "waiting_for_idle", "deadlines") if not hasattr(runner, name)
    ]
    if not missing and not hasattr(runner.deadlines, "next_deadline"):
        missing.append("deadlines.next_deadline")
    if not hasattr(trio.testing.MockClock, "_autojump"):
        missing.append("MockClock._autojump")
    if missing:
        raise DeterminismUnavailableError(
            f"trio {trio.__version__}'s runner lacks {', '.join(missing)}: the simulator's "
            "virtual-time timers cannot run with this trio version"
        )


class VirtualTimers(trio.abc.Instrument):
    """Timers on a `MockClock`, fired from the run loop (see the module doc). Use
    `open_virtual_timers()`."""

    def __init__(self, clock: trio.testing.MockClock) -> None:
        self._clock = clock
        self._runner = _runner()
        #: (when, serial, timer): a heap; cancelled timers stay until they reach the top.
        self._heap: list[tuple[float, int, Timer]] = []
        self._serial = 0
        #: The guard task (parked for the whole run) that a failing callback's exception
        #: is thrown into; None once it has been.
        self._guard: trio.lowlevel.Task | None = None
        #: Timers fired at the current instant (`_instant`), for the livelock check.
        self._instant = -math.inf
        self._firings = 0

    def __repr__(self) -> str:
        live = sum(1 for _, _, t in self._heap if not t.cancelled)
        return f"<VirtualTimers {live} armed at {self._clock.current_time()!r}>"

    # -- arming ---------------------------------------------------------------------------

    def call_at(self, when: float, callback: Callable[..., object], *args: Any) -> Timer:
        """Call `callback(*args)` from the run loop once the virtual time reaches `when`."""
        timer = Timer(when, callback, args)
        self._serial += 1
        heapq.heappush(self._heap, (when, self._serial, timer))
        return timer

    async def sleep_until(self, when: float) -> None:
        """Wait until the virtual time reaches `when` (a checkpoint; cancellable)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        task = trio.lowlevel.current_task()
        timer = self.call_at(when, trio.lowlevel.reschedule, task)

        def abort(_: Any) -> trio.lowlevel.Abort:
            timer.cancel()
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    async def sleep(self, seconds: float) -> None:
        await self.sleep_until(self._clock.current_time() + seconds)

    # -- the run loop's hook ----------------------------------------------------------------

    def before_io_wait(self, timeout: float) -> None:
        heap = self._heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)
        runner = self._runner
        clock = self._clock
        now = clock.current_time()
        if not runner.runq and not runner.waiting_for_idle:
            target = runner.deadlines.next_deadline()
            if heap and heap[0][0] < target:
                target = heap[0][0]
            if now < target < math.inf:
                clock.jump(target - now)
                now = clock.current_time()
        if heap and heap[0][0] <= now:
            self._fire(now)

    def _fire(self, now: float) -> None:
        if now != self._instant:
            self._instant, self._firings = now, 0
        heap = self._heap
        # Only timers armed before this round: one armed by a callback waits for the next.
        last = self._serial
        while heap and heap[0][0] <= now and heap[0][1] <= last:
            _, _, timer = heapq.heappop(heap)
            if timer.cancelled:
                continue
            self._firings += 1
            try:
                if self._firings > MAX_FIRINGS_PER_INSTANT:
                    raise TimerLivelockError(
                        f"more than {MAX_FIRINGS_PER_INSTANT} timer callbacks at virtual "
                        f"time {now!r}: callbacks re-arm each other without time passing"
                    )
                timer.callback(*timer.args)
            except BaseException as exc:  # thrown into the guard task: fails the run
                self._fail(exc)
                return

    def _fail(self, exc: BaseException) -> None:
        self._heap.clear()
        guard, self._guard = self._guard, None
        if guard is not None:
            trio.lowlevel.reschedule(guard, outcome.Error(exc))

    async def _guard_task(self, task_status: trio.TaskStatus[None]) -> None:
        self._guard = trio.lowlevel.current_task()
        task_status.started()

        def abort(_: Any) -> trio.lowlevel.Abort:
            self._guard = None
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)


@asynccontextmanager
async def open_virtual_timers() -> AsyncIterator[VirtualTimers]:
    """`VirtualTimers` on the run's `MockClock` for the duration of the block (the run must
    use a `MockClock`: `determinism.run_seeded` does)."""
    clock = trio.lowlevel.current_clock()
    if not isinstance(clock, trio.testing.MockClock):
        raise TypeError(
            f"the simulator's timers need trio.testing.MockClock as the run's clock, not "
            f"{type(clock).__name__}: run under determinism.run_seeded"
        )
    check_timer_hooks()
    timers = VirtualTimers(clock)
    trio.lowlevel.add_instrument(timers)
    # An instance attribute shadows MockClock._autojump, which the run loop calls.
    setattr(clock, "_autojump", _no_autojump)  # noqa: B010 - mypy refuses a method assignment
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(timers._guard_task)
            try:
                yield timers
            finally:
                nursery.cancel_scope.cancel()
    finally:
        delattr(clock, "_autojump")
        trio.lowlevel.remove_instrument(timers)


def _no_autojump() -> None:
    """The clock's autojump while `VirtualTimers` jump it (see the module doc)."""
