"""The transactional calls of the trio producer, over memory streams in virtual time.

No sockets: the mock broker's handlers serve memory stream pairs, and
`MockClock(autojump_threshold=0)` makes request and abort timeouts instant.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing

from trio_kafka.broker import BLACKHOLE, Cluster, HookCall
from trio_kafka.core import Failed, TxnState
from trio_kafka.errors import (
    AbortableError,
    ConfigError,
    IllegalTransactionStateError,
    KafkaError,
    TransactionAbortableError,
    TransactionAbortedError,
)
from trio_kafka.protocol.messages.end_txn import EndTxnRequest
from trio_kafka.protocol.messages.produce import ProduceRequest
from trio_kafka.testing import MemoryTransport, make_cluster, producer_for


def producer_of(cluster: Cluster, nursery: trio.Nursery, **options: Any) -> Any:
    """A producer on a fresh `MemoryTransport` to `cluster`, retrying after 10 ms."""
    return producer_for(MemoryTransport(cluster, nursery), retry_backoff=0.01, **options)


async def test_transactional_calls_need_a_transactional_id(nursery: trio.Nursery) -> None:
    cluster = make_cluster(topics={"t": 1})
    async with producer_of(cluster, nursery) as producer:
        with pytest.raises(ConfigError, match="transactional_id"):
            await producer.init_transactions()
        with pytest.raises(ConfigError, match="transactional_id"):
            producer.begin_transaction()


async def test_the_body_exception_aborts_and_propagates_unwrapped(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = make_cluster(topics={"t": 1})
    async with producer_of(cluster, nursery, transactional_id="tx") as producer:
        await producer.init_transactions()
        with pytest.raises(KeyError, match="boom"):
            async with producer.transaction():
                handle = await producer.send("t", b"x")
                raise KeyError("boom")
        assert producer._txn.manager.state is TxnState.READY
        outcome = handle.outcome
        assert isinstance(outcome, Failed)
        assert isinstance(outcome.error, TransactionAbortedError)
        with pytest.raises(IllegalTransactionStateError, match="begin_transaction"):
            await producer.send("t", b"outside")


async def test_the_body_exception_leaves_open_producer_unwrapped_under_a_cancelled_scope(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    # A scope around the producer cancelled as the body fails: the producer's tasks end
    # Cancelled beside the body's error, which still comes out as itself.
    cluster = make_cluster(topics={"t": 1})
    with trio.CancelScope() as scope, pytest.raises(KeyError, match="boom"):
        async with producer_of(cluster, nursery, transactional_id="tx") as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            await producer.send("t", b"x")
            scope.cancel()
            raise KeyError("boom")


async def test_abort_after_cancellation_is_bounded_when_the_coordinator_is_silent(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = make_cluster(topics={"t": 1})
    async with producer_of(
        cluster, nursery, transactional_id="tx", request_timeout=5.0, close_timeout=0.0
    ) as producer:
        await producer.init_transactions()
        producer._txn.abort_timeout = 2.0
        cluster.add_hook(EndTxnRequest, lambda call: BLACKHOLE)
        start = trio.current_time()
        with trio.move_on_after(1.0):
            async with producer.transaction():
                await producer.send("t", b"x")
                await producer.flush()
                await trio.sleep_forever()
        # Cancelled at 1 s; the shielded abort gave up 2 s later, not at the request
        # timeout or never.
        assert trio.current_time() - start == pytest.approx(3.0, abs=0.01)
        assert producer._txn.manager.state is TxnState.ABORTING


async def test_a_failed_batch_makes_commit_raise_an_abortable_error(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = make_cluster(topics={"t": 1})
    async with producer_of(cluster, nursery, transactional_id="tx") as producer:
        await producer.init_transactions()

        def corrupt(call: HookCall) -> Any:
            from trio_kafka.errors import ErrorCode
            from trio_kafka.protocol.messages.produce import (
                PartitionProduceResponse,
                ProduceResponse,
                TopicProduceResponse,
            )

            return ProduceResponse(
                responses=[
                    TopicProduceResponse(
                        name=t.name,
                        partition_responses=[
                            PartitionProduceResponse(
                                index=p.index, error_code=ErrorCode.INVALID_RECORD
                            )
                            for p in t.partition_data
                        ],
                    )
                    for t in call.request.topic_data
                ]
            )

        hook = cluster.add_hook(ProduceRequest, corrupt, times=1)
        with pytest.raises(AbortableError) as caught:
            async with producer.transaction():
                await producer.send("t", b"x")
        assert isinstance(caught.value, TransactionAbortableError)
        assert "INVALID_RECORD" in str(caught.value)
        cluster.remove_hook(hook)
        # The context manager aborted: the next transaction goes through.
        assert producer._txn.manager.state is TxnState.READY
        async with producer.transaction():
            await producer.send("t", b"y")
        kinds = [b.is_control for b in cluster.decoded("t", 0)]
        assert kinds[-1] is True


async def test_a_send_that_raised_makes_commit_raise_an_abortable_error(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    # The record is not in the transaction: committing the others would tear it.
    cluster = make_cluster(topics={"t": 1})
    cluster.state.options = attrs.evolve(cluster.state.options, auto_create_topics=False)
    async with producer_of(cluster, nursery, transactional_id="tx", max_block=0.5) as producer:
        await producer.init_transactions()
        for bad in ({"topic": "missing"}, {"topic": "t", "partition": 7}):
            producer.begin_transaction()
            kept = await producer.send("t", b"kept")
            with pytest.raises(KafkaError):
                await producer.send(bad["topic"], b"never appended", partition=bad.get("partition"))
            with pytest.raises(AbortableError):
                await producer.commit_transaction()
            await producer.abort_transaction()
            assert producer._txn.manager.state is TxnState.READY
            assert isinstance(kept.outcome, Failed) or kept.outcome is not None


@attrs.define(eq=False)
class FlakyConnectTransport:
    """`MemoryTransport`, but the first `refused` connects are refused and every later
    one takes `slow` seconds to open."""

    inner: MemoryTransport
    refused: int
    slow: float
    connects: int = 0

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        self.connects += 1
        if self.connects <= self.refused:
            raise ConnectionRefusedError(f"connection to {host}:{port} refused (test)")
        await trio.sleep(self.slow)
        return await self.inner.connect(host, port)


async def test_init_retries_find_coordinator_after_a_slow_connect(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    # FindCoordinator fails (refused) and is retried after retry_backoff; meanwhile the
    # loop spends longer than that backoff connecting to learn the versions. The loop
    # used to ask with the `now` from before that connect, saw the retry as not due,
    # then took "due now" for "blocked on batches" and waited forever for a wake-up
    # (simulator transactional seed 1100).
    cluster = make_cluster(topics={"t": 1})
    # Refused: the loop's first look for versions (at open), its second (after init
    # woke it) and the FindCoordinator; then the versions take 0.5 s to come.
    transport = FlakyConnectTransport(MemoryTransport(cluster, nursery), refused=3, slow=0.5)
    async with producer_for(transport, retry_backoff=0.01, transactional_id="tx") as producer:
        await trio.sleep(1.0)  # the loop is idle, no wake-up pending
        with trio.fail_after(30):
            await producer.init_transactions()
        assert producer._txn is not None
        assert producer._txn.manager.state is TxnState.READY
        assert transport.connects >= 4  # every refusal was retried


@pytest.mark.parametrize(
    ("offsets", "group", "kind", "message"),
    [
        ({"t": 10}, "g", TypeError, r"keys are \(topic, partition\) tuples, not 't'"),
        ([(("t", 0), 10)], "g", TypeError, "offsets must be a dict"),
        ({("t", 0): "10"}, "g", TypeError, r"offset of \('t', 0\) must be an int"),
        ({("t", 0): -3}, "g", ValueError, r"is -3: it must be >= 0"),
        ({("t", 0): 10}, 5, TypeError, "group_metadata must be"),
        ({("t", 0): 10}, "", TypeError, "non-empty group id"),
    ],
)
async def test_bad_offsets_for_the_transaction_are_refused_naming_them_and_it_goes_on(
    autojump_clock: trio.testing.MockClock,
    nursery: trio.Nursery,
    offsets: Any,
    group: Any,
    kind: type[Exception],
    message: str,
) -> None:
    # A str key raised "too many values to unpack", an int group an AttributeError, and
    # a negative offset was committed to the group.
    cluster = make_cluster(topics={"t": 1})
    async with producer_of(cluster, nursery, transactional_id="tx") as producer:
        await producer.init_transactions()
        async with producer.transaction():
            handle = await producer.send("t", b"x")
            with pytest.raises(kind, match=message):
                await producer.send_offsets_to_transaction(offsets, group)
        assert (await handle).offset == 0
        assert producer._txn.manager.state is TxnState.READY


async def test_a_call_the_state_refuses_says_what_to_do_instead(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    # "cannot commit in state READY" said what, not what to do.
    cluster = make_cluster(topics={"t": 1})
    async with producer_of(cluster, nursery, transactional_id="tx") as producer:
        with pytest.raises(IllegalTransactionStateError, match="call init_transactions"):
            producer.begin_transaction()
        await producer.init_transactions()
        with pytest.raises(IllegalTransactionStateError, match="initialised already"):
            await producer.init_transactions()
        with pytest.raises(IllegalTransactionStateError, match="call begin_transaction"):
            await producer.commit_transaction()
        with pytest.raises(IllegalTransactionStateError, match="nothing to abort"):
            await producer.abort_transaction()
        producer.begin_transaction()
        with pytest.raises(IllegalTransactionStateError, match="commit or abort it first"):
            producer.begin_transaction()
        await producer.abort_transaction()
