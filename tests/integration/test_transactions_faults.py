"""The transactional producer against the mock broker with faults injected by hooks.

Each test checks the broker's ground truth (markers in the log, what the coordinator
answered) against what the producer reported. The broker is served over memory streams
(`trio_kafka.testing`) in virtual time, so timeouts are exact and cost nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from tests.integration._helpers import FAST
from trio_kafka.broker import HookCall
from trio_kafka.client import open_producer
from trio_kafka.core import Acknowledged, Failed
from trio_kafka.errors import (
    ErrorCode,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionOutcomeUnknownError,
    TransactionTimedOutError,
)
from trio_kafka.protocol.messages.end_txn import EndTxnRequest
from trio_kafka.protocol.messages.find_coordinator import FindCoordinatorRequest
from trio_kafka.protocol.messages.init_producer_id import InitProducerIdRequest
from trio_kafka.testing import (
    MemoryTransport,
    log_values,
    make_cluster,
    producer_for,
    transaction_markers,
    virtual_clock_ms,
)

COMMIT, ABORT = 1, 0


async def test_lost_end_txn_is_ambiguous_and_the_stale_request_decides_nothing(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = make_cluster(topics={"t": 1})
    release = trio.Event()
    stale_answered = trio.Event()
    stale_codes: list[int] = []

    held: list[Any] = []

    async def hold(call: HookCall) -> None:
        held.append(call.request)
        await release.wait()  # the zombie: applied long after the client gave up

    def answered(call: HookCall) -> None:
        if held and call.request is held[0]:
            stale_codes.append(call.response.error_code)
            stale_answered.set()

    cluster.add_hook(EndTxnRequest, hold, times=1)
    cluster.add_hook(EndTxnRequest, answered, after=True)
    async with producer_for(
        MemoryTransport(cluster, nursery),
        transactional_id="tx-lost-end",
        request_timeout=0.3,
        **FAST,
    ) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        first = await producer.send("t", b"first", partition=0)
        with trio.fail_after(10):
            try:
                await producer.commit_transaction()
            except TransactionOutcomeUnknownError as exc:
                assert "may or may not be committed" in str(exc)
            else:
                raise AssertionError("the commit without an answer was not ambiguous")
            await producer.init_transactions()  # the re-initialisation (epoch bump)
        epoch = producer._core.sequencing.producer_epoch
        assert epoch >= 1
        producer.begin_transaction()
        await producer.send("t", b"second", partition=0)
        await producer.flush()
        release.set()  # the stale EndTxn(commit, epoch 0) reaches the coordinator now
        with trio.fail_after(10):
            await stale_answered.wait()
            await producer.commit_transaction()
    assert isinstance(first.outcome, Acknowledged)
    assert stale_codes[0] in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH)
    # The re-initialisation resent EndTxn(commit) at epoch 0 (which committed the
    # first transaction), then bumped; the stale copy decided nothing.
    assert [kind for _, kind in transaction_markers(cluster, "t", 0)] == [COMMIT, COMMIT]
    assert transaction_markers(cluster, "t", 0)[1][0] == epoch
    assert log_values(cluster, "t", 0) == [b"first", b"second"]


async def test_coordinator_moved_mid_transaction_is_found_again(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = make_cluster(3, topics={"t": 3})
    lookups: list[HookCall] = []
    cluster.add_hook(FindCoordinatorRequest, lookups.append)
    async with producer_for(
        MemoryTransport(cluster, nursery), transactional_id="tx-moved", **FAST
    ) as producer:
        await producer.init_transactions()
        old = cluster.state.txn_coordinator
        before = len(lookups)
        async with producer.transaction():
            for i in range(30):
                await producer.send("t", b"m%d" % i, partition=i % 3)
            await producer.flush()
            cluster.move_transaction_coordinator((old + 1) % 3)
        assert len(lookups) > before  # NOT_COORDINATOR sent it looking again
    for partition in range(3):
        assert [kind for _, kind in transaction_markers(cluster, "t", partition)] == [COMMIT]


async def test_transaction_timed_out_on_the_broker_fences_the_producer_as_kafka_does(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    # Kafka's coordinator aborts a timed-out transaction with prepareFenceProducerEpoch,
    # which bumps the epoch and keeps no last epoch: the producer's KIP-360 bump is then
    # refused with PRODUCER_FENCED (Java's producer ends the same way). The commit says
    # the broker aborted it; the abort's bump says the producer is fenced, naming both.
    cluster = make_cluster(topics={"t": 1}, clock=virtual_clock_ms)
    nursery.start_soon(cluster.tick_forever)  # the coordinator's timer, as open_cluster's
    async with producer_for(
        MemoryTransport(cluster, nursery),
        transactional_id="tx-timeout",
        transaction_timeout=0.2,
        **FAST,
    ) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        await producer.send("t", b"too-slow", partition=0)
        await producer.flush()
        await trio.sleep(0.5)  # the coordinator aborts it and bumps the epoch
        assert transaction_markers(cluster, "t", 0) == [(1, ABORT)]
        # The partition leader refuses the old epoch: INVALID_PRODUCER_EPOCH, which
        # the producer reads as "the broker aborted the transaction" (KIP-588).
        late = await producer.send("t", b"late", partition=0)
        with trio.fail_after(10):
            with pytest.raises(TransactionTimedOutError, match="aborted the transaction"):
                await producer.commit_transaction()
            with pytest.raises(ProducerFencedError, match="transaction_timeout"):
                await producer.abort_transaction()
        assert isinstance(late.outcome, Failed)
    assert [kind for _, kind in transaction_markers(cluster, "t", 0)] == [ABORT]
    assert log_values(cluster, "t", 0) == [b"too-slow"]


async def test_cancellation_inside_transaction_aborts(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = make_cluster(topics={"t": 1})
    async with producer_for(
        MemoryTransport(cluster, nursery), transactional_id="tx-cancel", linger=0.9, **FAST
    ) as producer:
        await producer.init_transactions()
        with trio.move_on_after(0.2) as scope:
            async with producer.transaction():
                written = await producer.send("t", b"written", partition=0)
                await producer.flush()
                lingering = await producer.send("t", b"lingering", partition=0)
                await trio.sleep_forever()
        assert scope.cancelled_caught
        assert isinstance(written.outcome, Acknowledged)
        outcome = lingering.outcome
        assert isinstance(outcome, Failed)
        assert isinstance(outcome.error, TransactionAbortedError)
        async with producer.transaction():
            await producer.send("t", b"next", partition=0)
    assert [kind for _, kind in transaction_markers(cluster, "t", 0)] == [ABORT, COMMIT]
    assert log_values(cluster, "t", 0) == [b"written", b"next"]


async def test_a_producer_on_shared_connections_reuses_the_coordinator_found(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    """Transactional producers opened one after another on one selector (a conditional
    writer reopened after a newer one fenced it): only the first asks FindCoordinator.
    A coordinator that moved meanwhile costs the next one a NOT_COORDINATOR answer and
    a lookup, then it is the one known."""
    cluster = make_cluster(3, topics={"t": 1})
    lookups: list[HookCall] = []
    cluster.add_hook(FindCoordinatorRequest, lookups.append)
    inits: list[tuple[int, int]] = []

    def init_answered(call: HookCall) -> None:
        if call.request.transactional_id == "tx-shared":  # (not the base producer's)
            inits.append((call.node_id, call.response.error_code))

    cluster.add_hook(InitProducerIdRequest, init_answered, after=True)

    async def one_transaction(base: Any, value: bytes) -> None:
        async with open_producer(
            selector=base.selector, **base.seams(), transactional_id="tx-shared", **FAST
        ) as producer:
            await producer.init_transactions()
            async with producer.transaction():
                await producer.send("t", value, partition=0)

    async with producer_for(MemoryTransport(cluster, nursery), **FAST) as base:
        await one_transaction(base, b"first")
        await one_transaction(base, b"second")
        assert len(lookups) == 1, "the second producer looked the coordinator up again"
        first = cluster.state.txn_coordinator
        assert inits == [(first, 0), (first, 0)]
        cluster.move_transaction_coordinator((first + 1) % 3)
        await one_transaction(base, b"third")
        await one_transaction(base, b"fourth")
    moved = cluster.state.txn_coordinator
    assert len(lookups) == 2  # the third: NOT_COORDINATOR from the old one, then a lookup
    assert inits[2:] == [(first, ErrorCode.NOT_COORDINATOR), (moved, 0), (moved, 0)]
    assert log_values(cluster, "t", 0) == [b"first", b"second", b"third", b"fourth"]
