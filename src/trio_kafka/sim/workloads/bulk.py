"""The bulk load with crashes: a `BulkLoader` over a CAS-checked topic, killed at seeded
moments and restarted until the load is complete.

Two workloads: "bulk" loads a CAS-checked topic (the CAS backend); "bulk-txn" loads a
topic without CAS, where `guarantee="auto"` picks the transactional backend (each chunk
and its checkpoint in one transaction; a crashed run's open transaction is aborted when
the next run's InitProducerId fences it). The checker counts a row where read_committed
readers see it (sim/_check_index.py `Index.where`), so a chunk aborted and loaded again
is no duplicate, and a row only in aborted chunks is a lost write.

With fault COMPETING_INSTANCE a second process of the same load starts at a seeded
moment and runs alongside (an operator started the job twice). Whichever process says
the load is done first completes it: if that is the second one, the first is stopped
(so a process that wrongly believes it finished, such as one that takes a mismatch for
its own write without reading, leaves rows unloaded: a lost write).

The input is a fixed list of rows (unique values; every third one keyed, so both the
murmur2 and the round-robin routes are used). Each row is one `Produce` op of writer
"bulk" in the history, invoked before the first run with the partition the loader will
give it (`partition_of`), and completed `Ok` once a process of the load returns: at
that point every row is loaded, whichever process wrote it.

A run is one process of the application: its own selector (its own connections), a
`BulkLoader` with the load id of the whole load, and `run(rows)`. During the fault
phase a run may "crash": it is cancelled at a seeded moment, whatever it was doing
(its requests in flight may still land, as a killed process's do; runs alternate
between two batch sizes, as an operator rerunning the job with other settings would, so
such a late batch does not line up with the next run's). A run that fails
(`AmbiguousError` after its retry budget, a `ConcurrentWriteError` because a crashed
run's late batch took the offset) is restarted too. Each restart resumes from the
manifest in the log. The checker then proves exactly-once and order: each row is in the
log exactly once (I1), every row is there (I2, lost-write), rows of a partition are in
input order (I3), nothing else is in the topic.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

import attrs
import trio

from trio_kafka.broker import CAS_CONFIG
from trio_kafka.client import BulkLoader, partition_of
from trio_kafka.core import Harness, Row
from trio_kafka.errors import KafkaError
from trio_kafka.net import group_leaves
from trio_kafka.sim.faults import BUGGIFY_SITES
from trio_kafka.sim.history import Ok, Produce
from trio_kafka.sim.workloads._api import SimContext, register

TOPIC = "bulk"
TXN_TOPIC = "bulk-txn"
PARTITIONS = 2
WRITER = "bulk"
LOAD_ID = "sim-load"

#: Rows, and the batch size in bytes (a few rows per batch), by profile.
_SIZES = {"lite": (40, 160), "standard": (400, 600)}
#: Runs before the workload gives up (the rows then stay pending: a liveness failure).
_MAX_RUNS = 40
#: The probability that a run started during the fault phase crashes.
_CRASH = 0.6
_RESTART_BACKOFF = 0.3
#: About how long (virtual seconds) a lite run of the load takes without faults: crashes
#: and the competitor land within it, so they hit a load in progress, not a finished one.
_RUN_TIME = 1.0
#: BUGGIFY (a knob, as FoundationDB buggifies them): a run cuts its batches tiny.
_SMALL_BATCHES = BUGGIFY_SITES.register(
    "bulk.small_batches", "a bulk load run cuts its batches to a record or two"
)


@register(
    "bulk",
    topics={TOPIC: PARTITIONS},
    topic_configs={TOPIC: {CAS_CONFIG: "true"}},
    description="a bulk load over CAS, crashed at seeded moments and resumed until done",
)
async def bulk(ctx: SimContext) -> None:
    await load_with_restarts(ctx, TOPIC, "exactly_once_cas")


@register(
    "bulk-txn",
    topics={TXN_TOPIC: PARTITIONS},
    description="a bulk load in transactions (a topic without CAS), crashed at seeded "
    "moments and resumed until done",
)
async def bulk_txn(ctx: SimContext) -> None:
    await load_with_restarts(ctx, TXN_TOPIC, "auto")


async def load_with_restarts(
    ctx: SimContext,
    topic: str,
    guarantee: str,
    *,
    rows: int | None = None,
    batch_bytes: int | None = None,
    run_time: float = _RUN_TIME,
    on_run: Callable[[int, RunEnd], None] | None = None,
) -> None:
    """The workload on `topic` (PARTITIONS partitions): `rows` rows (default: the
    profile's) in batches of `batch_bytes`, crashes within `run_time` seconds of a run's
    start while the fault phase lasts (`ctx.fault_phase_end` seconds from now). The
    chaos suite (tests/chaos) runs it over real sockets with sizes for real time.
    `on_run(run, end)` hears how each run of the loader ended (the competitor's is -1)."""
    default_count, default_batch = _SIZES.get(ctx.profile.name, _SIZES["standard"])
    count = default_count if rows is None else rows
    batch_bytes = default_batch if batch_bytes is None else batch_bytes
    input_rows: list[Row] = []
    op_ids: list[tuple[int, int]] = []
    for row in range(count):
        value = ctx.value(WRITER, row)
        key = value if row % 3 == 0 else None
        input_rows.append((key, value))
        partition = partition_of(row, key, PARTITIONS)
        op = Produce(WRITER, topic, partition, value, key)
        op_ids.append((ctx.history.invoke(op, time=trio.current_time()), partition))
    load = _Load(
        ctx, topic, guarantee, input_rows, batch_bytes, run_time, trio.current_time(), on_run
    )
    completed = False

    def loaded() -> None:
        # A process said the load is done: every row is loaded, whichever process wrote it.
        nonlocal completed
        if not completed:
            completed = True
            for op_id, partition in op_ids:
                ctx.history.complete(op_id, Ok(partition, None), time=trio.current_time())

    async with trio.open_nursery() as nursery:
        if ctx.competing_instances:

            async def competitor() -> None:
                if await _competitor(load):
                    # Done first: the operator stops the other process (its requests in
                    # flight may still land).
                    loaded()
                    nursery.cancel_scope.cancel()

            nursery.start_soon(competitor)
        for run in range(_MAX_RUNS):
            if await _run(load, run):
                loaded()
                return
            await ctx.sleep(_RESTART_BACKOFF)


@attrs.frozen
class _Load:
    ctx: SimContext
    topic: str
    guarantee: str
    rows: list[Row]
    batch_bytes: int
    #: About how long a run of the load takes without faults (crashes land within it).
    run_time: float
    #: When the workload started (the fault phase ends `ctx.fault_phase_end` later).
    started: float
    on_run: Callable[[int, RunEnd], None] | None


class RunEnd(enum.Enum):
    """How a run of the loader (one process of the application) ended."""

    DONE = "done"
    CRASHED = "crashed"  # cancelled at its seeded moment
    FAILED = "failed"  # it raised a KafkaError
    STOPPED = "stopped"  # cancelled from outside (the other process finished first)


async def _competitor(load: _Load) -> bool:
    """A second process of the same load (an operator started it twice, with another
    batch size) at a seeded moment: CAS lets one of the two write each batch, the other
    stops or skips; with transactions the one that initialised last fences the other.
    Its batches do not line up with the first process's, so a batch that loses its
    offset meets a record of other rows there (a mismatch must be read, not assumed).
    True when it finished the load (then the load is done, as the operator sees it)."""
    ctx = load.ctx
    await ctx.sleep(load.run_time * ctx.draws.uniform("bulk.competitor.start"))
    if ctx.fires_competitor("bulk.start", 0):
        return await _run(load, -1)
    return False


async def _run(load: _Load, run: int) -> bool:
    """One process of the load: True when the load finished."""
    end = RunEnd.STOPPED
    try:
        end = await _process(load, run)
    finally:
        if load.on_run is not None:
            load.on_run(run, end)
    return end is RunEnd.DONE


async def _process(load: _Load, run: int) -> RunEnd:
    ctx, batch_bytes = load.ctx, load.batch_bytes
    if run < 0:
        batch_bytes = batch_bytes * 5 // 2  # the competitor's batches straddle ours
    elif run % 2:
        # Every other rerun with other settings: a crashed run's late batch does not
        # line up with the next run's batches, so the mismatch it causes must be read.
        batch_bytes = batch_bytes * 3 // 2
    now = trio.current_time()
    crash_at = float("inf")
    in_fault_phase = now - load.started < ctx.fault_phase_end
    if run >= 0 and in_fault_phase and ctx.draws.chance(_CRASH, "bulk.crash", run):
        crash_at = now + load.run_time * ctx.draws.uniform("bulk.crash-at", run)
    timeout = ctx.profile.fault_phase
    if ctx.buggify(_SMALL_BATCHES):
        batch_bytes = 40
    with trio.move_on_at(crash_at) as crash:
        try:
            async with ctx.open_selector(f"loader-{run}") as selector:
                loader = BulkLoader(
                    selector,
                    load.topic,
                    LOAD_ID,
                    guarantee=load.guarantee,
                    batch_bytes=batch_bytes,
                    chunk_bytes=2 * batch_bytes,
                    request_timeout=2.0,
                    retry_timeout=timeout,
                    wall_clock=ctx.wall_clock,
                    # The run's rules; no BUGGIFY in the loader's own producers (the
                    # workload's fault is `_SMALL_BATCHES`).
                    harness=Harness(ctx.rules),
                )
                await loader.run(load.rows)
                return RunEnd.DONE
        except KafkaError:
            return RunEnd.FAILED
        except BaseExceptionGroup as group:
            # The selector's nursery wraps what the run raised: a KafkaError, possibly
            # beside the Cancelled of its other tasks when the crash came at the same
            # moment (the chaos suite's real time: a fenced partition while crashing).
            leaves = group_leaves(group)
            if not all(isinstance(leaf, KafkaError | trio.Cancelled) for leaf in leaves) or (
                not any(isinstance(leaf, KafkaError) for leaf in leaves)
            ):
                raise
            return RunEnd.FAILED
    return RunEnd.CRASHED if crash.cancelled_caught else RunEnd.STOPPED
