"""The idempotent-producer workload: writers sending through one producer during the
fault phase, and sometimes a second producer instance writing the same partitions.

Each writer sends its records one by one at seeded moments spread over the fault phase,
half of them to a partition it names and half through the partitioner (by key), then
flushes. One more writer ("t0") has a producer of its own with tight timeouts (a 0.5 s
request timeout, a 1.2 s delivery timeout), so records also expire while their requests
are in flight and must come back Ambiguous, never Failed. With fault COMPETING_INSTANCE a second producer (another process of the same
application) starts at a seeded time and writes the same partitions concurrently: the
brokers must keep the two producer ids' sequences apart. The checker then holds every
idempotent invariant (I1-I5) against the brokers' logs.
"""

from __future__ import annotations

import trio

from trio_kafka.client import Producer
from trio_kafka.sim.workloads._api import SimContext, register

TOPIC = "sim"
PARTITIONS = 3

#: Records per writer and writers, by profile (lite keeps a seed to a few hundred ms).
_SIZES = {"lite": (8, 2), "standard": (80, 3)}
#: The tight writer's producer: timeouts short enough to expire during faults.
_TIGHT = {"request_timeout": 0.5, "delivery_timeout": 1.2}


@register(
    "idempotent",
    topics={TOPIC: PARTITIONS},
    description="writers through one idempotent producer, plus a competing instance",
)
async def idempotent(ctx: SimContext) -> None:
    records, writers = _SIZES.get(ctx.profile.name, _SIZES["standard"])
    async with trio.open_nursery() as nursery:
        if ctx.competing_instances:
            nursery.start_soon(_competitor, ctx, records // 2)
        nursery.start_soon(_tight, ctx, records // 2)
        async with ctx.open_producer("p0") as producer:
            async with trio.open_nursery() as writers_nursery:
                for w in range(writers):
                    writers_nursery.start_soon(_writer, ctx, producer, f"w{w}", records)
            await producer.flush()


async def _writer(ctx: SimContext, producer: Producer, writer: str, records: int) -> None:
    gap = ctx.fault_phase_end / max(records, 1)
    for n in range(records):
        await ctx.sleep(2 * gap * ctx.draws.uniform("idempotent.gap", writer, n))
        value = ctx.value(writer, n)
        if n % 2:
            partition = int(ctx.draws.uniform("idempotent.partition", writer, n) * PARTITIONS)
            await ctx.track_send(producer, writer, TOPIC, value, partition=partition)
        else:
            await ctx.track_send(producer, writer, TOPIC, value, key=value)


async def _tight(ctx: SimContext, records: int) -> None:
    async with ctx.open_producer("p-tight", **_TIGHT) as producer:
        await _writer(ctx, producer, "t0", records)
        await producer.flush()


async def _competitor(ctx: SimContext, records: int) -> None:
    start = ctx.fault_phase_end * ctx.draws.uniform("idempotent.competitor.start")
    await ctx.sleep(start)
    if not ctx.fires_competitor("idempotent.start", 0):
        return
    async with ctx.open_producer("p1") as producer:
        await _writer(ctx, producer, "c0", records)
        await producer.flush()
