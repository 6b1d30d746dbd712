"""`open_task_group()`: trio's own nursery on trio, anyio's task group on asyncio, with
what the shell relies on behaving the same on both (net/_clock.py)."""

from __future__ import annotations

import anyio
import anyio.abc
import pytest
import trio

from trio_kafka.net import TaskGroup, open_task_group

pytestmark = pytest.mark.anyio


async def test_on_trio_it_is_trios_own_nursery(anyio_backend: str) -> None:
    async with open_task_group() as tasks:
        expected = trio.Nursery if anyio_backend == "trio" else anyio.abc.TaskGroup
        assert isinstance(tasks, expected)


async def test_start_soon_runs_each_task_with_its_arguments() -> None:
    ran: list[tuple[str, int]] = []

    async def task(label: str, number: int) -> None:
        ran.append((label, number))

    async with open_task_group() as tasks:
        tasks.start_soon(task, "a", 1, name="first")
        tasks.start_soon(task, "b", 2)
    assert sorted(ran) == [("a", 1), ("b", 2)]


async def test_start_hands_back_the_started_value() -> None:
    async def serve(*, task_status: anyio.abc.TaskStatus[str]) -> None:
        task_status.started("ready")
        await anyio.sleep_forever()

    async with open_task_group() as tasks:
        assert await tasks.start(serve) == "ready"
        tasks.cancel_scope.cancel()


async def test_cancelling_the_group_stops_its_tasks_and_is_not_an_error() -> None:
    stopped: list[str] = []

    async def forever() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            stopped.append("task")

    async with open_task_group() as tasks:
        tasks.start_soon(forever)
        await anyio.sleep(0)
        tasks.cancel_scope.cancel()
    assert stopped == ["task"]


async def test_a_task_error_leaves_in_an_exception_group() -> None:
    async def fail() -> None:
        raise KeyError("boom")

    with pytest.raises(ExceptionGroup) as caught:
        async with open_task_group() as tasks:
            tasks.start_soon(fail)
    assert [type(e) for e in caught.value.exceptions] == [KeyError]


async def test_an_outer_cancel_leaves_as_one_bare_cancellation() -> None:
    # Several tasks and the body all cancelled: a group of nothing but cancellations
    # leaves the `async with` as one cancellation, not a group (as anyio's does).
    leaving: list[BaseException] = []
    with anyio.CancelScope() as outer:

        async def wait(group: TaskGroup) -> None:
            await anyio.sleep_forever()

        try:
            async with open_task_group() as tasks:
                tasks.start_soon(wait, tasks)
                tasks.start_soon(wait, tasks)
                await anyio.sleep(0)
                outer.cancel()
                await anyio.sleep_forever()
        except BaseException as exc:
            leaving.append(exc)
            raise
    assert outer.cancelled_caught
    assert len(leaving) == 1
    assert isinstance(leaving[0], anyio.get_cancelled_exc_class())
