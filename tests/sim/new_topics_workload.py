"""A workload for the records a producer keeps until their topic's metadata comes
(client/_unknown_topics.py): registered through the public `register`, as a user's own
workload is, so the six built-in workloads (their ledger rows, their regression seeds,
the planted-bug table) stay as they were; the "test-" prefix keeps it out of the tier
that runs every built-in workload (tests/sim/test_runner_tier.py).

Two writers share one idempotent producer and move, at seeded moments, through four
topics that producer has not sent to yet: each move's first records are kept (the
producer has metadata, just not for that topic), under whatever the network does while
its Metadata request is out; half go by key, half to a partition the writer names (one
of them, at a seeded moment, a partition the topic does not have: it must fail alone).
A third writer, on a producer of its own with a 0.3 s `max_block` and tight timeouts,
walks the topics the other way, so its kept records also fail when the metadata is slow
(none of them may be in the log). The checker holds every idempotent invariant.

    trio-kafka simulate --import tests.sim.new_topics_workload -w test-new-topics --seeds 1000
"""

from __future__ import annotations

import trio

from trio_kafka.client import Producer
from trio_kafka.sim.workloads import SimContext, register

TOPICS = [f"nt-{i}" for i in range(4)]
PARTITIONS = 2
_SIZES = {"lite": (12, 2), "standard": (80, 3)}
_TIGHT = {"request_timeout": 0.5, "delivery_timeout": 1.2, "max_block": 0.3}

#: Sends whose record was kept (its topic's metadata had not come): tests read it.
KEPT = {"records": 0}


@register(
    "test-new-topics",
    topics=dict.fromkeys(TOPICS, PARTITIONS),
    description="writers moving through topics their producer learns as it goes",
)
async def new_topics(ctx: SimContext) -> None:
    records, writers = _SIZES.get(ctx.profile.name, _SIZES["standard"])
    async with ctx.open_producer("p0") as producer:
        async with trio.open_nursery() as tasks:
            tasks.start_soon(_tight, ctx, records)
            for w in range(writers):
                tasks.start_soon(_writer, ctx, producer, f"w{w}", records, TOPICS)
        await producer.flush()


async def _writer(
    ctx: SimContext, producer: Producer, writer: str, records: int, topics: list[str]
) -> None:
    gap = ctx.fault_phase_end / max(records, 1)
    # Where the writer moves to the next topic: seeded record numbers, in order.
    moves = sorted(int(ctx.draws.uniform("new-topics.move", writer, i) * records) for i in range(3))
    bad = int(ctx.draws.uniform("new-topics.bad", writer) * records)
    for n in range(records):
        topic = topics[sum(n >= m for m in moves)]
        value = ctx.value(writer, n)
        if n == bad:  # a partition the topic does not have: this record fails alone
            handle = await ctx.track_send(producer, writer, topic, value, partition=PARTITIONS)
        elif n % 2:
            partition = int(ctx.draws.uniform("new-topics.partition", writer, n) * PARTITIONS)
            handle = await ctx.track_send(producer, writer, topic, value, partition=partition)
        else:
            handle = await ctx.track_send(producer, writer, topic, value, key=value)
        if handle is not None and handle.batch.partition < 0:
            KEPT["records"] += 1
        if n + 1 not in moves:  # a move's first records go together, back to back
            await ctx.sleep(2 * gap * ctx.draws.uniform("new-topics.gap", writer, n))


async def _tight(ctx: SimContext, records: int) -> None:
    async with ctx.open_producer("p-tight", **_TIGHT) as producer:
        await _writer(ctx, producer, "t0", records // 2, TOPICS[::-1])
        await producer.flush()
