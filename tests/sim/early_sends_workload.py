"""A workload for sends that wait for their topic's metadata (client/_unknown_topics.py's
waiting records): registered through the public `register`, as a user's own workload
is (the "test-" prefix keeps it out of the tier that runs every built-in workload).

The user trial it models: a writer whose records come from several tasks, each calling
`send()` once, a few milliseconds apart, before the producer has any metadata (at the
start of the run, while the network does what the seed says). One writer names the
partition, one sends by key; a third, on a producer with a custom partitioner (whose
sends always wait for a new topic's metadata), does the same at a seeded moment on a
topic its producer has not sent to yet. I3 (per writer and partition, log order is
send order, the order of the `send()` calls) is what it is there for: before the sends
were queued in call order, the tasks appended in the order they woke.

    trio-kafka simulate --import tests.sim.early_sends_workload -w test-early-sends --seeds 500
"""

from __future__ import annotations

from typing import Any

import trio

from trio_kafka.client import Producer
from trio_kafka.sim.workloads import SimContext, register

PARTITIONS = 2
TASKS = {"lite": 8, "standard": 24}


def _second(record: Any, view: Any) -> int:
    return 1


@register(
    "test-early-sends",
    topics={"early": PARTITIONS, "later": PARTITIONS},
    description="writers sending from several tasks before their producer has metadata",
)
async def early_sends(ctx: SimContext) -> None:
    tasks = TASKS.get(ctx.profile.name, TASKS["standard"])
    async with (
        ctx.open_producer("p0") as producer,
        ctx.open_producer("p-custom", partitioner=_second) as custom,
    ):
        async with trio.open_nursery() as writers:
            writers.start_soon(_burst, ctx, producer, "w-part", "early", tasks, {"partition": 0})
            writers.start_soon(_burst, ctx, producer, "w-key", "early", tasks, {"key": b"k"})
            writers.start_soon(_later, ctx, custom, tasks)
        await producer.flush()
        await custom.flush()


async def _later(ctx: SimContext, producer: Producer, tasks: int) -> None:
    await ctx.sleep(ctx.fault_phase_end * ctx.draws.uniform("early-sends.later"))
    await _burst(ctx, producer, "w-custom", "later", tasks, {})


async def _burst(
    ctx: SimContext,
    producer: Producer,
    writer: str,
    topic: str,
    tasks: int,
    fields: dict[str, Any],
) -> None:
    """`tasks` tasks, the n-th calling send() once, a seeded few ms after the (n-1)-th."""

    async def one(n: int) -> None:
        await ctx.track_send(producer, writer, topic, ctx.value(writer, n), **fields)

    async with trio.open_nursery() as senders:
        for n in range(tasks):
            senders.start_soon(one, n)
            await ctx.sleep(0.005 * ctx.draws.uniform("early-sends.gap", writer, n))
