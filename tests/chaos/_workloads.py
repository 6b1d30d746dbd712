"""Chaos workloads written for real time (the simulator's own run through ChaosContext).

`idempotent_keyed`: writers share one idempotent producer and send keyed records (8 keys
each) over a 6-partition topic at seeded moments of the fault phase; a second producer
with tight timeouts (0.5 s request, 1.5 s delivery) writes too, so records expire with
their request in flight and must come back Ambiguous; and a second instance of the
application (its own producer, another producer id) writes the same partitions.
"""

from __future__ import annotations

import trio

from tests.chaos._harness import ChaosContext
from trio_kafka.client import Producer

IDEMPOTENT_TOPIC = "chaos-idem"
IDEMPOTENT_PARTITIONS = 6
_KEYS = 8
_TIGHT = {"request_timeout": 0.5, "delivery_timeout": 1.5}


def idempotent_keyed(records: int, writers: int = 4, *, tight: bool = True):  # type: ignore[no-untyped-def]
    """The workload; `tight=False` leaves out the producer with tight timeouts."""

    async def run(ctx: ChaosContext) -> None:
        async with trio.open_nursery() as nursery:
            if tight:
                nursery.start_soon(_own_producer, ctx, "t0", records // 2, _TIGHT)
            if ctx.competing_instances:
                nursery.start_soon(_own_producer, ctx, "c0", records // 2, {})
            async with ctx.open_producer("p0") as producer:
                async with trio.open_nursery() as inner:
                    for w in range(writers):
                        inner.start_soon(_writer, ctx, producer, f"w{w}", records)
                await producer.flush()

    return run


async def _writer(ctx: ChaosContext, producer: Producer, writer: str, records: int) -> None:
    gap = ctx.fault_phase_end / max(records, 1)
    for n in range(records):
        await trio.sleep(2 * gap * ctx.draws.uniform("chaos.gap", writer, n))
        key = f"{writer}-k{n % _KEYS}".encode()
        await ctx.track_send(producer, writer, IDEMPOTENT_TOPIC, ctx.value(writer, n), key=key)


async def _own_producer(ctx: ChaosContext, writer: str, records: int, options: dict) -> None:  # type: ignore[type-arg]
    async with ctx.open_producer(f"p-{writer}", **options) as producer:
        await _writer(ctx, producer, writer, records)
        await producer.flush()
