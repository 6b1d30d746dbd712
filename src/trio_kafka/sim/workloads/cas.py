"""The conditional-writer race: several writers append to one CAS-checked partition.

Each writer is its own process in spirit (its own producer, its own connections): it
reads the partition to its end, then appends with the expected offset it believes is
next (`ConditionalWriter.append`). When another writer took the offset it gets
`ConcurrentWriteError`, reads what is new and goes on. Each writer appends from
several tasks at once (`_APPENDERS`), pipelined on the one writer. Every append is a `CasAppend` in
the history with the offset it expected and the log end its writer had seen; the checker
holds C1-C5: at most one attempt of an append lands, success means exactly the expected
offset, a failure is never in the log, every append settles after the heal, and an
append lands only after records its writer had seen or appended before it.

"cas-txn" is the same race on a topic without CAS, where `guarantee="auto"` makes each
writer a transactional one (client/_conditional.py): opening a session fences the
previous writer, and the newest writer wins. Appends are then `Produce` ops (they land
at the committed end, not at an expected offset): the checker holds I1-I4 on them, so an
append acknowledged is in the committed log once at its offset, and one reported as a
`ConcurrentWriteError` is not committed.
"""

from __future__ import annotations

import functools

import attrs
import trio

from trio_kafka.broker import CAS_CONFIG
from trio_kafka.client import ConditionalWriter, open_conditional_writer
from trio_kafka.errors import ConcurrentWriteError, KafkaError
from trio_kafka.net import group_leaves
from trio_kafka.sim.history import CasAppend, Fail, Info, Ok, Produce
from trio_kafka.sim.workloads._api import SimContext, register

TOPIC = "cas"
TXN_TOPIC = "cas-txn"

#: Appends per writer and writers, by profile.
_SIZES = {"lite": (6, 3), "standard": (40, 4)}
#: Appends one writer makes at once (tasks on one ConditionalWriter), by profile.
_APPENDERS = {"lite": 3, "standard": 4}
#: How late an append of a round may come (seconds: a uniform draw times `_STAGGER`,
#: less `_PROMPT`, so about 40% come at once and the rest within a few round trips).
_STAGGER = 0.01
_PROMPT = 0.004
#: Sessions a writer may start (each after a failure), and the pause before the next.
_MAX_SESSIONS = 50
_SESSION_BACKOFF = 0.5


@register(
    "cas",
    topics={TOPIC: 1},
    topic_configs={TOPIC: {CAS_CONFIG: "true"}},
    description="conditional writers racing for the offsets of one CAS-checked partition",
)
async def cas(ctx: SimContext) -> None:
    await _race(ctx, TOPIC)


@register(
    "cas-txn",
    topics={TXN_TOPIC: 1},
    description="transactional conditional writers (a topic without CAS) taking over one "
    "partition from each other",
)
async def cas_txn(ctx: SimContext) -> None:
    await _race(ctx, TXN_TOPIC)


async def _race(ctx: SimContext, topic: str) -> None:
    appends, writers = _SIZES.get(ctx.profile.name, _SIZES["standard"])
    async with trio.open_nursery() as nursery:
        for w in range(writers):
            nursery.start_soon(_writer, ctx, topic, f"w{w}", appends)
        if ctx.competing_instances:
            nursery.start_soon(_competitor, ctx, topic, appends)


async def _competitor(ctx: SimContext, topic: str, appends: int) -> None:
    """Another instance of the application joins the race at a seeded moment."""
    await ctx.sleep(ctx.fault_phase_end * ctx.draws.uniform("cas.competitor.start"))
    if ctx.fires_competitor("cas.start", 0):
        await _writer(ctx, topic, "c0", appends)


async def _writer(ctx: SimContext, topic: str, writer: str, appends: int) -> None:
    """Appends until done; a writer whose session fails (a read or a connection gave
    up) starts a new one, as a restarted process would: a new producer and a new writer
    id, so an abandoned append of the old session can never pass for a new one."""
    done = 0
    for session in range(_MAX_SESSIONS):
        try:
            done = await _session(ctx, topic, writer, session, done, appends)
            return
        except KafkaError:
            pass
        except BaseExceptionGroup as group:
            if not all(isinstance(leaf, KafkaError) for leaf in group_leaves(group)):
                raise
        done = sum(1 for o in ctx.history if o.op.writer == writer)
        await ctx.sleep(_SESSION_BACKOFF)


async def _session(
    ctx: SimContext, topic: str, writer: str, session: int, done: int, appends: int
) -> int:
    """One process of the writer: one producer (so one set of connections), and on it a
    conditional writer. A transactional writer fenced by a newer one (its append a
    `ConcurrentWriteError`) opens a new conditional writer on the same producer, as the
    error tells an application to: a new transactional session (InitProducerId fences
    the newer writer in turn) and a new writer id, over the connections it has.

    On the CAS topic the producer is the writer's (idempotent, as `open_conditional_
    writer` would open it). On the transactional topic the conditional writer opens its
    own transactional producer over this one's selector and never sends through this
    one: it is opened without idempotence, so it asks for no producer id of its own.
    A new writer of the process reads on from where the previous one's read ended (the
    process has seen the log up to there), not from the log start."""
    cas = topic == TOPIC
    options = {} if cas else {"enable_idempotence": False}
    read_end = 0
    async with ctx.open_producer(f"p-{writer}", linger=0.0, **options) as producer:
        for incarnation in range(appends + 1):
            async with open_conditional_writer(
                topic,
                0,
                producer=producer,
                writer_ids=functools.partial(str, f"sim-{writer}-{session}.{incarnation}"),
                guarantee="exactly_once_cas" if cas else "auto",
            ) as conditional:
                done = await _appends(ctx, conditional, topic, writer, done, appends, read_end)
                read_end = conditional.last_read_end
            if done >= appends:
                break
    return appends


async def _appends(
    ctx: SimContext,
    conditional: ConditionalWriter,
    topic: str,
    writer: str,
    done: int,
    appends: int,
    read_end: int,
) -> int:
    """Appends from the writer's `done`-th on, in rounds of `_APPENDERS` concurrent
    appends on the one writer (issue 35: pipelined on CAS, a group commit on
    transactions); returns how many are done when all are, or when a transactional
    writer was fenced (the fenced appends included, as failed). The process has read
    the log up to `read_end`; it reads again between rounds when an append failed."""
    gap = ctx.fault_phase_end / max(appends, 1)
    concurrency = _APPENDERS.get(ctx.profile.name, _APPENDERS["standard"])
    state = _Round(done)
    while state.next < appends:
        await ctx.sleep(2 * gap * ctx.draws.uniform("cas.gap", writer, state.next))
        if conditional.next_offset is None:
            await _read(conditional, conditional.last_read_end or read_end or None)
        assert conditional.next_offset is not None
        last = min(appends, state.next + concurrency)
        async with trio.open_nursery() as nursery:
            for i in range(state.next, last):
                # Some appends of a round come later: on CAS they then ride a batch
                # behind the one in flight instead of sharing it (a failure of the
                # first must fail them too), on transactions they join the next group.
                late = max(0.0, _STAGGER * ctx.draws.uniform("cas.stagger", writer, i) - _PROMPT)
                nursery.start_soon(_append, ctx, conditional, topic, writer, last, state, late)
        if state.error is not None:
            raise state.error
        if state.fenced:
            return state.next  # fenced: a new writer takes the log back
    return appends


@attrs.define
class _Round:
    """The appends of a writer's round: the next index, and what ended them."""

    next: int
    error: KafkaError | None = None
    fenced: bool = False


async def _append(
    ctx: SimContext,
    conditional: ConditionalWriter,
    topic: str,
    writer: str,
    last: int,
    state: _Round,
    late: float,
) -> None:
    """One of a round's concurrent appends, `late` seconds after the round began: the
    writer's next index, recorded with the offset it expects (claimed by the call, with
    no checkpoint in between). None when an append of the round already failed (the
    writer must read first)."""
    if late > 0:
        await ctx.sleep(late)
    cas = conditional.guarantee == "exactly_once_cas"
    expected = conditional.next_offset
    if expected is None or state.next >= last or state.error is not None:
        return
    n = state.next
    state.next += 1
    value = ctx.value(writer, n)
    seen = conditional.last_read_end  # read, or its own appends acknowledged (C5)
    op: CasAppend | Produce = (
        CasAppend(writer, topic, 0, value, n, expected, seen_end=seen)
        if cas
        else Produce(writer, topic, 0, value)
    )
    op_id = ctx.history.invoke(op, time=trio.current_time())
    try:
        ack = await conditional.append(value)
    except ConcurrentWriteError as exc:
        ctx.history.complete(op_id, Fail(type(exc).__name__), time=trio.current_time())
        state.fenced = state.fenced or not cas
    except KafkaError as exc:
        ctx.history.complete(op_id, Info(type(exc).__name__), time=trio.current_time())
        state.error = state.error or exc
    else:
        ctx.history.complete(op_id, Ok(0, ack.offset), time=trio.current_time())


async def _read(conditional: ConditionalWriter, start: int | None) -> None:
    async for _ in conditional.read_to_end(start=start):
        pass
