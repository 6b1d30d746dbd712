"""The simulator's virtual clock and the timers its run loop fires (sim/_timers.py)."""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing

from trio_kafka.sim._timers import TimerLivelockError, VirtualClock, current_timers
from trio_kafka.sim.determinism import run_seeded
from trio_kafka.sim.runner import LIVELOCK, MAX_ROUNDS, run_seed
from trio_kafka.sim.workloads import SimContext, Workload


def _leaves(group: BaseException) -> list[BaseException]:
    if isinstance(group, BaseExceptionGroup):
        return [leaf for sub in group.exceptions for leaf in _leaves(sub)]
    return [group]


def test_timers_fire_in_time_order_then_arming_order_at_their_virtual_time() -> None:
    async def main(clock: VirtualClock) -> list[tuple[float, str]]:
        fired: list[tuple[float, str]] = []
        timers = current_timers()
        for when, name in [(3.0, "c"), (1.0, "a"), (3.0, "d"), (2.0, "b")]:
            timers.call_at(when, lambda n=name: fired.append((trio.current_time(), n)))
        await trio.sleep(5)
        return fired

    assert run_seeded(main, seed=1) == [(1.0, "a"), (2.0, "b"), (3.0, "c"), (3.0, "d")]


def test_a_timer_between_trio_deadlines_is_not_jumped_over() -> None:
    # A round in which a timer fires but wakes no task must not let the clock leap to the
    # next trio deadline past the next timer (found while writing the timers: a clog
    # episode's steps ran a second late).
    async def main(clock: VirtualClock) -> list[float]:
        fired: list[float] = []
        timers = current_timers()
        for when in (1.0, 1.5, 2.0):
            timers.call_at(when, lambda: fired.append(trio.current_time()))
        await trio.sleep(10)  # one trio deadline, far after the timers
        return fired

    assert run_seeded(main, seed=1) == [1.0, 1.5, 2.0]


def test_a_cancelled_timer_does_not_fire() -> None:
    async def main(clock: VirtualClock) -> list[str]:
        fired: list[str] = []
        timers = current_timers()
        timers.call_at(1.0, fired.append, "kept")
        timers.call_at(1.0, fired.append, "dropped").cancel()
        await trio.sleep(2)
        return fired

    assert run_seeded(main, seed=1) == ["kept"]


def test_sleep_until_wakes_at_its_time_and_is_cancellable() -> None:
    async def main(clock: VirtualClock) -> tuple[float, float, bool]:
        timers = current_timers()
        await timers.sleep_until(4.25)
        woke = trio.current_time()
        with trio.move_on_after(1.0) as scope:
            await timers.sleep(100.0)
        return woke, trio.current_time(), scope.cancelled_caught

    assert run_seeded(main, seed=1) == (4.25, 5.25, True)


def test_a_failing_callback_fails_the_run_with_its_exception() -> None:
    async def main(clock: VirtualClock) -> None:
        def boom() -> None:
            raise ValueError("broken timer callback")

        current_timers().call_at(1.0, boom)
        await trio.sleep(2)

    with pytest.raises(BaseException) as caught:
        run_seeded(main, seed=1)
    assert any(
        isinstance(e, ValueError) and "broken timer callback" in str(e)
        for e in _leaves(caught.value)
    )


def test_callbacks_re_arming_at_one_instant_fail_as_a_livelock() -> None:
    async def main(clock: VirtualClock) -> None:
        timers = current_timers()

        def again() -> None:
            timers.call_at(trio.current_time(), again)

        timers.call_at(1.0, again)
        await trio.sleep(2)

    with pytest.raises(BaseException) as caught:
        run_seeded(main, seed=1)
    assert any(isinstance(e, TimerLivelockError) for e in _leaves(caught.value))


def test_every_task_waiting_with_nothing_to_wake_one_fails_as_a_deadlock() -> None:
    async def main(clock: VirtualClock) -> None:
        await trio.Event().wait()

    with pytest.raises(BaseException) as caught:
        run_seeded(main, seed=1)
    assert any("deadlock" in str(e) for e in _leaves(caught.value))


def test_wait_all_tasks_blocked_works_and_time_stands_still_meanwhile() -> None:
    async def main(clock: VirtualClock) -> tuple[list[str], float]:
        order: list[str] = []

        async def sleeper() -> None:
            await trio.sleep(3)
            order.append("slept")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sleeper)
            await trio.testing.wait_all_tasks_blocked()
            order.append("all blocked")
            blocked_at = trio.current_time()
        return order, blocked_at

    assert run_seeded(main, seed=1) == (["all blocked", "slept"], 0.0)


def test_a_callback_queued_with_run_sync_soon_runs_although_no_io_is_polled() -> None:
    # The timers poll trio's I/O only when its entry queue has work (signals, threads,
    # TrioToken callbacks): a callback queued while every task waits must still run,
    # not end in a deadlock.
    async def main(clock: VirtualClock) -> list[str]:
        ran: list[str] = []
        done = trio.Event()

        def callback() -> None:
            ran.append("callback")
            done.set()

        trio.lowlevel.current_trio_token().run_sync_soon(callback)
        await done.wait()
        return ran

    assert run_seeded(main, seed=1) == ["callback"]


def test_an_instrument_added_in_a_seeded_run_is_called_until_removed() -> None:
    class Steps(trio.abc.Instrument):
        def __init__(self) -> None:
            self.steps = 0

        def before_task_step(self, task: trio.lowlevel.Task) -> None:
            self.steps += 1

    steps = Steps()

    async def main(clock: VirtualClock) -> tuple[int, int]:
        trio.lowlevel.add_instrument(steps)
        await trio.sleep(1)
        await trio.sleep(1)
        trio.lowlevel.remove_instrument(steps)
        seen = steps.steps
        await trio.sleep(1)
        return seen, steps.steps

    seen, after = run_seeded(main, seed=1)
    assert seen >= 2
    assert after == seen


def test_the_virtual_clock_only_moves_forward() -> None:
    clock = VirtualClock()
    clock.jump(1.5)
    assert clock.current_time() == 1.5
    assert clock.deadline_to_sleep_time(math.inf) == 0.0
    with pytest.raises(ValueError, match="backwards"):
        clock.jump(-1)


def test_timers_need_the_simulators_clock() -> None:
    async def main() -> None:
        current_timers()

    with pytest.raises(RuntimeError, match="run_seeded"):
        trio.run(main)


def test_tasks_spinning_at_one_instant_are_reported_as_a_livelock() -> None:
    async def spin(ctx: SimContext) -> None:
        while True:
            await trio.lowlevel.checkpoint()

    result = run_seed(Workload("spin", spin, {"t": 1}), 1).result
    assert result.failure_class == LIVELOCK
    assert any(f"more than {MAX_ROUNDS} scheduler rounds" in v for v in result.violations)
