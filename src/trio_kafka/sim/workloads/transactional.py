"""The transactional-producer workload: writers running transactions that commit or abort,
and sometimes a second instance of a writer fencing the first.

Each writer is one transactional producer (`transactional_id` "tx-<writer>") running
several transactions one after the other, each sending a few records over several
partitions and then committing or, at a seeded choice, aborting. The history gets every
boundary as the checker expects it (history.py): `TxnBegin` when a transaction begins,
`Produce` ops tagged with the transaction, and `TxnCommit` / `TxnAbort` with what the
client reported:

- a commit that returned: `Ok`; an abortable error: `Fail`, then the workload aborts
  (`TxnAbort`) and goes on with the next transaction;
- `TransactionOutcomeUnknownError` (EndTxn got no answer): `Info`, and the workload awaits
  `init_transactions()` before its next transaction, as the client's contract asks (the
  epoch bump keeps a late EndTxn from deciding a later transaction);
- fenced (`ProducerFencedError`) or any other fatal error: `Fail`, and the writer stops:
  a fenced producer must not write again.

A `send()` that raises inside a transaction is a `Fail` (nothing appended) and the
workload goes on to commit: the client must refuse that commit (the transaction lost a
record), so the commit fails as abortable and the workload aborts. BUGGIFY site
`txn.send_to_missing_partition` makes that happen as a real application does: a send
names a partition the topic does not have (`InvalidPartitionError`, raised by `send()`
itself). Faults alone rarely make `send()` raise (a liveness fix in the selector took
away the one way seed 62 had).

With fault COMPETING_INSTANCE a second instance of writer w0 (same transactional id,
another process of the same application) starts at a seeded moment: its
`init_transactions()` fences the first instance and aborts the first one's open
transaction. The checker then holds T1-T6 (atomic, no aborted reads, reported outcome
matches the markers, no hanging transaction, no append from a fenced epoch, no marker
deciding two transactions) besides the idempotent invariants.
"""

from __future__ import annotations

import trio

from trio_kafka.client import Producer
from trio_kafka.errors import (
    AbortableError,
    AmbiguousError,
    KafkaError,
)
from trio_kafka.sim.faults import BUGGIFY_SITES
from trio_kafka.sim.history import Fail, Info, Ok, TxnAbort, TxnBegin, TxnCommit
from trio_kafka.sim.workloads._api import SimContext, register

TOPIC = "txn"
PARTITIONS = 3

#: Transactions per writer, records per transaction, writers, by profile.
_SIZES = {"lite": (4, 3, 2), "standard": (20, 6, 3)}
#: The probability that a transaction is aborted rather than committed.
_ABORT = 0.3
#: The coordinator aborts a transaction left open this long (a stopped writer's).
_TRANSACTION_TIMEOUT = 10.0
#: BUGGIFY: a send names a partition past the topic's last (a user's mistake send() raises).
_MISSING_PARTITION = BUGGIFY_SITES.register(
    "txn.send_to_missing_partition", "a transactional send names a partition that does not exist"
)


class _Stop(Exception):
    """The writer cannot go on (fenced, fatal error): it stops, as a real one would."""


@register(
    "transactional",
    topics={TOPIC: PARTITIONS},
    description="transactional writers committing and aborting, plus a fencing instance",
)
async def transactional(ctx: SimContext) -> None:
    txns, records, writers = _SIZES.get(ctx.profile.name, _SIZES["standard"])
    async with trio.open_nursery() as nursery:
        for w in range(writers):
            nursery.start_soon(_writer, ctx, f"w{w}", f"tx-w{w}", txns, records)
        if ctx.competing_instances:
            nursery.start_soon(_competitor, ctx, txns, records)


async def _competitor(ctx: SimContext, txns: int, records: int) -> None:
    """A second instance of w0 (same transactional id) starts at a seeded moment."""
    await ctx.sleep(ctx.fault_phase_end * ctx.draws.uniform("txn.competitor.start"))
    if ctx.fires_competitor("txn.start", "tx-w0"):
        await _writer(ctx, "w0c", "tx-w0", max(1, txns // 2), records)


async def _writer(
    ctx: SimContext, writer: str, transactional_id: str, txns: int, records: int
) -> None:
    async with ctx.open_producer(
        f"p-{writer}",
        transactional_id=transactional_id,
        transaction_timeout=_TRANSACTION_TIMEOUT,
    ) as producer:
        try:
            await producer.init_transactions()
            for t in range(txns):
                await _transaction(ctx, producer, writer, t, records)
        except _Stop:
            pass
        except KafkaError:
            # init_transactions() refused (fenced before it could start): stop.
            pass


async def _transaction(
    ctx: SimContext, producer: Producer, writer: str, t: int, records: int
) -> None:
    history, now = ctx.history, trio.current_time
    name = f"{writer}-t{t}"
    gap = ctx.fault_phase_end / max(4 * records, 1)
    op_id = history.invoke(TxnBegin(writer, name), time=now())
    try:
        producer.begin_transaction()
    except KafkaError as exc:
        history.complete(op_id, Fail(type(exc).__name__), time=now())
        raise _Stop from exc
    history.complete(op_id, Ok(), time=now())
    for n in range(records):
        await ctx.sleep(gap * ctx.draws.uniform("txn.gap", name, n))
        partition = int(ctx.draws.uniform("txn.partition", name, n) * PARTITIONS)
        if ctx.buggify(_MISSING_PARTITION):
            partition = PARTITIONS  # send() raises InvalidPartitionError: a Fail
        value = ctx.value(name, n)
        await ctx.track_send(producer, writer, TOPIC, value, partition=partition, txn=name)
    if ctx.draws.chance(_ABORT, "txn.abort", name):
        await _abort(ctx, producer, writer, name)
        return
    op_id = history.invoke(TxnCommit(writer, name), time=now())
    try:
        await producer.commit_transaction()
    except AbortableError as exc:
        history.complete(op_id, Fail(type(exc).__name__), time=now())
        await _abort(ctx, producer, writer, name)
    except AmbiguousError as exc:
        # TransactionOutcomeUnknownError: maybe committed. The client re-initialises
        # (epoch bump) before the next transaction; wait for it as the contract asks.
        history.complete(op_id, Info(type(exc).__name__), time=now())
        try:
            await producer.init_transactions()
        except KafkaError as init_exc:
            raise _Stop from init_exc
    except KafkaError as exc:
        # Fenced or fatal: not committed, and this producer must stop.
        history.complete(op_id, Fail(type(exc).__name__), time=now())
        raise _Stop from exc
    else:
        history.complete(op_id, Ok(), time=now())


async def _abort(ctx: SimContext, producer: Producer, writer: str, name: str) -> None:
    history, now = ctx.history, trio.current_time
    op_id = history.invoke(TxnAbort(writer, name), time=now())
    try:
        await producer.abort_transaction()
    except KafkaError as exc:
        history.complete(op_id, Fail(type(exc).__name__), time=now())
        raise _Stop from exc
    history.complete(op_id, Ok(), time=now())
