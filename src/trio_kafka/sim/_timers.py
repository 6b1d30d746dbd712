"""Virtual time for a simulated run: the clock, and timers fired by trio's run loop itself.

Theory of operation
-------------------
A simulated run spends its time on scheduler rounds, and the simulator's own timed events
(a chunk reaching the head of its pipe, a handshake's round trip, a fault tick) were each
a task sleeping in trio: a cancel scope with a deadline, a `Cancelled` raised through the
task's stack when it expired, an idle round for `MockClock`'s autojump (trio jumps a
`MockClock` *after* it has processed the round's deadlines, so every timed wake-up costs
one empty round), then the task's step. Measured here, a scheduler round costs about
9 µs, a cancel scope about 15 µs and a timed `trio.sleep` about 57 µs.

`VirtualClock` is a `trio.abc.Clock` whose time moves only when it is told to (`jump`);
it never lets the run loop sleep in real time. `VirtualTimers` is what moves it. It
stands in front of trio's I/O manager (`_SimulatedIO`, installed by the instrument hook
`before_run`): once per scheduler round, where trio would poll for I/O
(`get_events`), it:

- fires the callbacks of its timers due at the current virtual time (those armed before
  this round started; a callback arming a timer for now leaves it to the next round, as
  trio leaves a task made runnable during a round to the next one);
- when no task is runnable, jumps the clock to the earliest of its own timers and trio's
  next deadline (a cancel scope's), and fires what is due there. trio then expires its
  deadlines at that time in the same round: a timed wake-up costs no idle round, and a
  timer costs no task, no cancel scope and no exception;
- polls the real I/O manager (an `epoll` system call) only when trio's entry queue holds
  work (a signal such as Ctrl-C, a callback from another thread, an async generator to
  finalize): those are the only events a simulated run can have, and they reach trio
  through that queue (its wake-up socket is what the poll would report). A simulated run
  does no other real I/O (see the deadlock check below); the poll it skips was about 5%
  of a seed's time.

Callbacks are plain functions: they change the simulated world and wake tasks
(`ParkingLot.unpark_all`, `trio.lowlevel.reschedule`). `sleep_until` is the timed wait of
a task of the simulator (cancellable like any trio wait). A callback that raises must not
vanish into trio's instrument logger: the exception is thrown into the run's guard task
(`guard`, started by `determinism.run_seeded`), which fails the run with it.

Determinism: timers fire in (time, arming order); a jump is a function of the run's
state. A round in which timers fire but no task becomes runnable runs an empty batch,
which draws nothing from trio's seeded shuffle, so timers alone never perturb how the
tasks are scheduled.

While a task waits in `trio.testing.wait_all_tasks_blocked`, the clock stands still and
trio wakes the waiter once every other task is blocked, as on a `MockClock`. A run in
which every task waits and nothing can wake one (a deadlock, on which trio with a
`MockClock` would spin forever) fails, saying so. The runner internals read here are
checked by `determinism.check_trio_hooks`.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Any

import attrs
import outcome
import trio
import trio.lowlevel
from trio._core import _instrumentation

#: Timer callbacks fired at one virtual instant beyond which the run is stuck in a loop of
#: callbacks re-arming each other (no task runs, so the runner's step watchdog cannot see
#: it).
MAX_FIRINGS_PER_INSTANT = 100_000
#: A sleep time longer than any `wait_all_tasks_blocked` cushion.
_FAR = 86400.0


class TimerLivelockError(RuntimeError):
    """Timer callbacks kept re-arming at one virtual instant."""


class VirtualClock(trio.abc.Clock):
    """trio's clock in a simulated run: virtual seconds from 0, moved only by `jump`
    (`VirtualTimers` jumps it whenever every task is blocked)."""

    def __init__(self) -> None:
        self._now = 0.0
        #: The next deadline trio asked about (`deadline_to_sleep_time`), which
        #: `VirtualTimers.poll` reads in the same round instead of asking again.
        self.deadline = math.inf
        #: Set by `VirtualTimers` when it is created for this clock.
        self.timers: VirtualTimers | None = None

    def __repr__(self) -> str:
        return f"<VirtualClock at {self._now!r}>"

    def start_clock(self) -> None:
        pass

    def current_time(self) -> float:
        return self._now

    def deadline_to_sleep_time(self, deadline: float) -> float:
        # Never sleep in real time: the timers jump the clock before the I/O poll. But
        # while a task waits in `wait_all_tasks_blocked` and nothing is due, say "far",
        # as `MockClock` does, so that trio wakes it (it waits its cushion instead).
        # trio asks once per scheduler round that starts with no task to run, right
        # before its I/O poll (`VirtualTimers.poll`). (`idle_waiters` inlined.)
        self.deadline = deadline
        if deadline > self._now and self.timers is not None:
            runner = self.timers._runner
            if runner is not None and runner.waiting_for_idle:
                return _FAR
        return 0.0

    def jump(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"time can't go backwards: jump({seconds!r})")
        self._now += seconds


@attrs.define(eq=False, slots=True)
class Timer:
    """A callback armed for a virtual time; `cancel()` before it fires drops it."""

    when: float
    callback: Callable[..., object]
    args: tuple[Any, ...]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


class VirtualTimers(trio.abc.Instrument):
    """Timers on a `VirtualClock`, fired from the run loop (see the module doc). Pass it
    to `trio.run(instruments=...)` (its `before_run` puts it in front of trio's I/O
    manager) and start `guard` in the run (`run_seeded` does)."""

    def __init__(self, clock: VirtualClock) -> None:
        self._clock = clock
        clock.timers = self
        #: trio's runner, read at the first round (it does not exist before the run).
        self._runner: Any = None
        #: (when, serial, timer): a heap; cancelled timers stay until they reach the top.
        self._heap: list[tuple[float, int, Timer]] = []
        self._serial = 0
        #: The guard task (parked for the whole run) that a failing callback's exception
        #: is thrown into; None when not started or once used.
        self._guard: trio.lowlevel.Task | None = None
        #: Timers fired at the current instant (`_instant`), for the livelock check.
        self._instant = -math.inf
        self._firings = 0
        #: trio's I/O manager and entry queue (`before_run`): `poll` polls the manager
        #: only when the queue has work.
        self._io: Any = None
        self._entry_queue: Any = None
        #: Scheduler rounds so far, and the alarm `on_rounds` set.
        self.rounds = 0
        self._round_limit = -1
        self._round_alarm: Callable[[], object] | None = None

    def __repr__(self) -> str:
        live = sum(1 for _, _, t in self._heap if not t.cancelled)
        return f"<VirtualTimers {live} armed at {self._clock.current_time()!r}>"

    @property
    def clock(self) -> VirtualClock:
        return self._clock

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
        timer = self.call_at(when, trio.lowlevel.reschedule, trio.lowlevel.current_task())

        def abort(_: Any) -> trio.lowlevel.Abort:
            timer.cancel()
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    async def sleep(self, seconds: float) -> None:
        await self.sleep_until(self._clock.current_time() + seconds)

    def on_rounds(self, limit: int, alarm: Callable[[], object]) -> None:
        """Call `alarm()` (from the run loop: it must not block) when the run's scheduler
        rounds reach `limit` (the runner's livelock watchdog: cheaper than an instrument
        hook per task step)."""
        self._round_limit, self._round_alarm = limit, alarm
        if self.rounds >= limit:
            alarm()

    # -- the run loop's hook ----------------------------------------------------------------

    def before_run(self) -> None:
        from trio._core import _run

        runner: Any = _run.GLOBAL_RUN_CONTEXT.runner
        self._runner = runner
        self._io = runner.io_manager
        self._entry_queue = runner.entry_queue
        runner.io_manager = _SimulatedIO(runner.io_manager, self)
        runner.instruments = _Instruments(runner.instruments)

    def poll(self, timeout: float) -> Any:
        """One scheduler round, where trio polls for I/O (`get_events`: see the module
        doc); returns the round's I/O events. `timeout` is never waited in real time: the
        clock is virtual, and a task in `wait_all_tasks_blocked` is woken by trio when a
        round reports no event."""
        queue = self._entry_queue
        # Trio's entry queue has work (which this round's real poll reports): every task
        # waiting is no deadlock.
        entry_pending = bool(queue.queue or queue.idempotent_queue)
        self.rounds += 1
        if self.rounds == self._round_limit and self._round_alarm is not None:
            self._round_alarm()
        heap = self._heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)
        runner = self._runner
        clock = self._clock
        now = clock._now
        if not runner.runq and not runner.waiting_for_idle:
            # (With a task in `wait_all_tasks_blocked`, time stands still: trio wakes it.)
            # No task was runnable when this round began, so trio asked the clock about
            # its next deadline (`VirtualClock.deadline_to_sleep_time`), and nothing has
            # run since.
            target = clock.deadline
            if heap and heap[0][0] < target:
                target = heap[0][0]
            if target == math.inf:
                if entry_pending:
                    return self._io.get_events(0)
                # Nothing can ever wake a task (a simulated run does no real I/O): say so
                # rather than spin in the run loop forever.
                self._fail(
                    RuntimeError(
                        f"deadlock at virtual time {now!r}: every task waits and no "
                        "deadline or timer can wake one"
                    )
                )
                return _NO_EVENTS
            if now < target:
                clock.jump(target - now)
                now = clock._now
        if heap and heap[0][0] <= now:
            self._fire(now)
        return self._io.get_events(0) if entry_pending else _NO_EVENTS

    def idle_waiters(self) -> bool:
        """A task waits in `trio.testing.wait_all_tasks_blocked`."""
        return self._runner is not None and bool(self._runner.waiting_for_idle)

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
        if guard is None:
            raise RuntimeError("a simulator timer failed and no guard task runs") from exc
        trio.lowlevel.reschedule(guard, outcome.Error(exc))

    async def guard(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Park for the whole run; raise what a failing timer callback raised."""
        self._guard = trio.lowlevel.current_task()
        task_status.started()

        def abort(_: Any) -> trio.lowlevel.Abort:
            self._guard = None
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)


class _Instruments(dict[str, dict[Any, None]]):
    """trio's `Instruments` (hook name -> instruments) as a plain dict. trio's is a
    `UserDict`, whose `in` is a Python call, and the run loop asks `"hook" in
    instruments` several times per scheduler round and per task step; a dict answers in
    C. The methods are trio's own (they only use `data`)."""

    __slots__ = ()

    def __init__(self, instruments: Any) -> None:
        super().__init__(instruments.data)

    @property
    def data(self) -> dict[str, dict[Any, None]]:
        return self

    add_instrument = _instrumentation.Instruments.add_instrument
    remove_instrument = _instrumentation.Instruments.remove_instrument
    call = _instrumentation.Instruments.call


#: What `_SimulatedIO.get_events` returns when it does not poll: no event.
_NO_EVENTS: list[Any] = []


class _SimulatedIO:
    """trio's I/O manager in a simulated run: `get_events` is the timers' round
    (`VirtualTimers.poll`, itself, not a call more per round), which polls the real
    manager (without waiting) only when trio's entry queue has work; all else is the
    real manager's (registering the wake-up socket, closing)."""

    __slots__ = ("_io", "get_events")

    def __init__(self, io: Any, timers: VirtualTimers) -> None:
        self._io = io
        self.get_events = timers.poll

    def __getattr__(self, name: str) -> Any:
        return getattr(self._io, name)

    def process_events(self, events: Any) -> None:
        if events:
            self._io.process_events(events)


def current_timers() -> VirtualTimers:
    """The running simulation's timers (the run must be `determinism.run_seeded`'s)."""
    clock = trio.lowlevel.current_clock()
    if not isinstance(clock, VirtualClock) or clock.timers is None:
        raise RuntimeError(
            f"the simulator needs its virtual clock, not {type(clock).__name__}: run it "
            "under trio_kafka.sim.determinism.run_seeded"
        )
    return clock.timers
