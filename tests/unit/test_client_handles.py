"""`await handle` and `send(ProducerRecord)` on the per-record path: how often they yield
to trio, and that waiting on a pending handle still waits and can be cancelled.

The scheduler is watched with an instrument that counts the resumptions of the test's
own task: one per yield to trio.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from trio_kafka.broker import Cluster
from trio_kafka.client import Acknowledged, ProducerRecord
from trio_kafka.client._handles import AWAIT_CHECKPOINT_EVERY
from trio_kafka.client._producer import SEND_CHECKPOINT_EVERY
from trio_kafka.testing import MemoryTransport, producer_for


class _Steps(trio.abc.Instrument):
    """Counts how often `task` is resumed: once per yield to trio."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.count = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.count += 1


async def _steps() -> _Steps:
    steps = _Steps(trio.lowlevel.current_task())
    trio.lowlevel.add_instrument(steps)
    await trio.lowlevel.checkpoint()
    return steps


async def test_awaiting_done_handles_yields_only_every_nth_await(
    autojump_clock: trio.testing.MockClock,
    cluster_and_transport: tuple[Cluster, MemoryTransport],
) -> None:
    _, transport = cluster_and_transport
    count = 3 * AWAIT_CHECKPOINT_EVERY
    async with producer_for(transport) as producer:
        handles = [await producer.send("t", b"v%d" % i, partition=0) for i in range(count)]
        await producer.flush()
        assert all(h.done() for h in handles)
        steps = await _steps()
        before = steps.count
        acks = [await h for h in handles]
        yields = steps.count - before
    assert [a.offset for a in acks] == list(range(count))
    assert all(isinstance(a, Acknowledged) for a in acks)
    # Not one yield per await (that was a full trio checkpoint, ~6 us, per record), but
    # still a yield every AWAIT_CHECKPOINT_EVERY awaits, so a loop over done handles lets
    # other tasks run and sees a cancellation.
    assert yields == count // AWAIT_CHECKPOINT_EVERY


async def test_a_loop_over_done_handles_still_sees_cancellation(
    autojump_clock: trio.testing.MockClock,
    cluster_and_transport: tuple[Cluster, MemoryTransport],
) -> None:
    _, transport = cluster_and_transport
    count = 2 * AWAIT_CHECKPOINT_EVERY
    async with producer_for(transport) as producer:
        handles = [await producer.send("t", b"x", partition=0) for _ in range(count)]
        await producer.flush()
        awaited = 0
        with trio.CancelScope() as scope:
            scope.cancel()
            for handle in handles:
                await handle
                awaited += 1
        assert scope.cancelled_caught
        assert awaited < AWAIT_CHECKPOINT_EVERY


async def test_awaiting_a_pending_handle_waits_for_its_batch(
    autojump_clock: trio.testing.MockClock,
    cluster_and_transport: tuple[Cluster, MemoryTransport],
) -> None:
    _, transport = cluster_and_transport
    async with producer_for(transport, linger=0.8) as producer:
        await producer.send_and_wait("t", b"warm up", partition=0)
        start = trio.current_time()
        handle = await producer.send("t", b"x", partition=0)
        assert not handle.done()
        ack = await handle
        assert trio.current_time() - start == pytest.approx(0.8)  # the linger, then acked
    assert ack.offset == 1


async def test_awaiting_a_pending_handle_can_be_cancelled_and_the_record_lives_on(
    autojump_clock: trio.testing.MockClock,
    cluster_and_transport: tuple[Cluster, MemoryTransport],
) -> None:
    _, transport = cluster_and_transport
    async with producer_for(transport, linger=0.8) as producer:
        handle = await producer.send("t", b"x", partition=0)
        with trio.move_on_after(0.3) as scope:
            await handle
        assert scope.cancelled_caught
        assert not handle.done()  # cancelling the wait cancels the wait, not the record
        ack = await handle
    assert ack.offset == 0


async def test_send_of_a_producer_record_yields_only_every_256_calls(
    autojump_clock: trio.testing.MockClock,
    cluster_and_transport: tuple[Cluster, MemoryTransport],
) -> None:
    _, transport = cluster_and_transport
    async with producer_for(transport, linger=0.9) as producer:
        await producer.send_and_wait("t", b"warm up")  # metadata and producer id
        record = ProducerRecord("t", b"x")
        steps = await _steps()
        before = steps.count
        for _ in range(SEND_CHECKPOINT_EVERY - 1 - producer._calls % SEND_CHECKPOINT_EVERY):
            await producer.send(record)
        assert steps.count == before  # no yield yet
        await producer.send(record)
        assert steps.count == before + 1  # the 256th call checkpointed once


async def test_send_of_a_producer_record_keeps_key_headers_partition_and_timestamp(
    autojump_clock: trio.testing.MockClock,
    cluster_and_transport: tuple[Cluster, MemoryTransport],
) -> None:
    cluster, transport = cluster_and_transport
    record = ProducerRecord("t", b"v", b"k", [("h", b"1")], partition=2, timestamp=123)
    async with producer_for(transport) as producer:
        handle = await producer.send(record)
        ack = await handle
    assert (ack.partition, ack.offset, ack.timestamp) == (2, 0, 123)
    assert handle.batch.record(handle.index) == (123, b"k", b"v", [("h", b"1")])
    stored: Any = cluster.state.partition("t", 2)
    assert stored.log.log_end_offset == 1
