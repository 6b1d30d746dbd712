"""A workload for a batch the broker refuses for some of its records (KIP-467): writers
to a compacted topic, a seeded few of whose records have no key. Registered through the
public `register`, as a user's own workload is (the "test-" prefix keeps it out of the
tier that runs every built-in workload).

The producer fails each keyless record alone and sends the other records of its batch
again, in order, under a new epoch (core/_core.py, `_send_the_others`). Under the
simulator's faults the checker holds it to the idempotent invariants: a failed record is
never in the log, an acknowledged one is there once, and per writer and partition the
log keeps send order.

    trio-kafka simulate --import tests.sim.compacted_workload -w test-compacted --seeds 500
"""

from __future__ import annotations

import trio

from trio_kafka.client import Producer
from trio_kafka.sim.workloads import SimContext, register

TOPIC = "compacted"
WRITERS = ("w0", "w1")
KEYLESS = 0.08  # the share of records sent without a key


@register(
    "test-compacted",
    topics={TOPIC: 2},
    topic_configs={TOPIC: {"cleanup.policy": "compact"}},
    description="writers to a compacted topic, a few of whose records have no key",
)
async def compacted(ctx: SimContext) -> None:
    async with ctx.open_producer("p0") as producer:
        async with trio.open_nursery() as writers:
            for writer in WRITERS:
                writers.start_soon(_write, ctx, producer, writer)
        await producer.flush()


async def _write(ctx: SimContext, producer: Producer, writer: str) -> None:
    n = 0
    while trio.current_time() < ctx.fault_phase_end:
        value = ctx.value(writer, n)
        keyless = ctx.draws.chance(KEYLESS, "compacted.keyless", writer, n)
        # A few keys per writer, each on one partition: neighbours share batches.
        key = None if keyless else b"%s-%d" % (writer.encode(), n % 3)
        await ctx.track_send(producer, writer, TOPIC, value, key=key)
        n += 1
        if ctx.draws.chance(0.2, "compacted.pause", writer, n):
            await ctx.sleep(0.05 * ctx.draws.uniform("compacted.gap", writer, n))
