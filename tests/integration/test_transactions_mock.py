"""The transactional producer against the mock broker over TCP; confluent-kafka reads.

The broker runs in the test's trio run (`open_cluster`); the blocking confluent-kafka
consumer runs in a worker thread (`anyio.to_thread.run_sync`).
"""

from __future__ import annotations

import logging

import anyio
import pytest

from tests.integration._backends import mock_cluster
from tests.integration._helpers import FAST, QUIET, consume_all
from trio_kafka.broker import ClusterOptions, HookCall
from trio_kafka.client import GroupMetadata, open_producer
from trio_kafka.errors import (
    ErrorCode,
    FatalError,
    IllegalTransactionStateError,
    ProducerFencedError,
    TransactionAbortableError,
)
from trio_kafka.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from trio_kafka.protocol.messages.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from trio_kafka.testing import transaction_markers

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, TopicPartition  # noqa: E402

#: Each test runs on trio, then on asyncio (issue 16; tests/conftest.py).
pytestmark = pytest.mark.anyio


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **QUIET})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 10)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in tps}


async def test_committed_and_aborted_transactions_as_confluent_reads_them() -> None:
    async with mock_cluster(topics={"t": 3}) as cluster:
        async with open_producer(
            bootstrap=cluster.bootstrap, transactional_id="tx-commit-abort", **FAST
        ) as producer:
            with anyio.fail_after(10):
                await producer.init_transactions()
                async with producer.transaction():
                    for i in range(1000):
                        await producer.send("t", b"committed-%d" % i, partition=i % 3)
                producer.begin_transaction()
                for i in range(1000):
                    await producer.send("t", b"aborted-%d" % i, partition=i % 3)
                await producer.flush()  # written, so read_uncommitted sees them
                await producer.abort_transaction()
        committed_values = {b"committed-%d" % i for i in range(1000)}
        aborted_values = {b"aborted-%d" % i for i in range(1000)}
        seen = await anyio.to_thread.run_sync(
            consume_all, cluster.bootstrap, "t", 3, "read_committed"
        )
        assert sorted(seen) == sorted(committed_values)
        seen = await anyio.to_thread.run_sync(
            consume_all, cluster.bootstrap, "t", 3, "read_uncommitted"
        )
        assert sorted(seen) == sorted(committed_values | aborted_values)
        for partition in range(3):
            assert [kind for _, kind in transaction_markers(cluster, "t", partition)] == [1, 0]


async def test_send_outside_a_transaction_is_refused() -> None:
    async with (
        mock_cluster(topics={"t": 1}) as cluster,
        open_producer(
            bootstrap=cluster.bootstrap, transactional_id="tx-refuse", **FAST
        ) as producer,
    ):
        with pytest.raises(IllegalTransactionStateError, match="init_transactions"):
            await producer.send("t", b"x")
        await producer.init_transactions()
        with pytest.raises(IllegalTransactionStateError, match="begin_transaction"):
            await producer.send("t", b"x")
        async with producer.transaction():
            await producer.send("t", b"x")
        with pytest.raises(IllegalTransactionStateError):
            await producer.send("t", b"y")


async def test_a_second_producer_fences_the_first(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="trio_kafka")
    async with mock_cluster(topics={"t": 2}) as cluster:
        async with open_producer(
            bootstrap=cluster.bootstrap, transactional_id="tx-fence", **FAST
        ) as first:
            await first.init_transactions()
            first.begin_transaction()
            await first.send("t", b"first-1", partition=0)
            await first.flush()
            async with open_producer(
                bootstrap=cluster.bootstrap, transactional_id="tx-fence", **FAST
            ) as second:
                with anyio.fail_after(10):
                    await second.init_transactions()
                await first.send("t", b"first-2", partition=1)
                with pytest.raises(FatalError) as caught:
                    with anyio.fail_after(10):
                        try:
                            await first.commit_transaction()
                        except TransactionAbortableError:
                            await first.abort_transaction()  # the KIP-588 path: fenced
                assert isinstance(caught.value, ProducerFencedError)
                # Every later call raises the same fatal error, send() included.
                with pytest.raises(ProducerFencedError):
                    await first.send("t", b"first-3", partition=0)
                with pytest.raises(ProducerFencedError):
                    first.begin_transaction()
                async with second.transaction():
                    await second.send("t", b"second", partition=0)
        values = [r.value for p in range(2) for b in cluster.decoded("t", p) for r in b.records]
        assert b"first-2" not in values and b"first-3" not in values
        assert b"second" in values
        # first-1 was written under the old epoch and aborted by the fence.
        assert [kind for _, kind in transaction_markers(cluster, "t", 0)] == [0, 1]
        # A fence is a takeover, as designed: said once, as a warning, not an error.
        said = [(r.levelno, r.getMessage()) for r in caplog.records if "fence" in r.getMessage()]
        assert [level for level, _ in said] == [logging.WARNING], said
        assert "transactional id 'tx-fence' took over" in said[0][1]
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_any_other_fatal_error_is_logged_as_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def refuse(call: HookCall) -> InitProducerIdResponse:
        return InitProducerIdResponse(
            error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, producer_epoch=-1
        )

    async with mock_cluster(topics={"t": 1}) as cluster:
        cluster.add_hook(InitProducerIdRequest, refuse)
        async with open_producer(
            bootstrap=cluster.bootstrap, transactional_id="tx-denied", **FAST
        ) as producer:
            with pytest.raises(FatalError), anyio.fail_after(10):
                await producer.init_transactions()
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, errors
    assert errors[0].startswith("producer stopped by a fatal error: "), errors
    assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in errors[0], errors


async def test_offsets_are_committed_with_the_transaction_and_only_with_it() -> None:
    async with mock_cluster(topics={"in": 2, "out": 1}) as cluster:
        group = GroupMetadata("ctp-group")
        async with open_producer(
            bootstrap=cluster.bootstrap, transactional_id="tx-ctp", **FAST
        ) as producer:
            await producer.init_transactions()
            async with producer.transaction():
                await producer.send("out", b"transformed-1")
                await producer.send_offsets_to_transaction({("in", 0): 10, ("in", 1): 20}, group)
            seen = await anyio.to_thread.run_sync(
                committed, cluster.bootstrap, "ctp-group", "in", 2
            )
            assert seen == {0: 10, 1: 20}
            producer.begin_transaction()
            await producer.send("out", b"transformed-2")
            await producer.send_offsets_to_transaction({("in", 0): 11, ("in", 1): 21}, group)
            # Pending with the transaction: a stable read is refused (librdkafka's
            # committed() would retry until it times out), the committed value is old.
            groups = cluster.state.groups
            assert (
                groups.fetch("ctp-group", "in", 0, require_stable=True)[0]
                == ErrorCode.UNSTABLE_OFFSET_COMMIT
            )
            stored = groups.fetch("ctp-group", "in", 0, require_stable=False)[1]
            assert stored is not None and stored.offset == 10
            await producer.abort_transaction()
        seen = await anyio.to_thread.run_sync(committed, cluster.bootstrap, "ctp-group", "in", 2)
        assert seen == {0: 10, 1: 20}


async def test_transactions_v2_add_partitions_with_produce_and_bump_at_commit() -> None:
    options = ClusterOptions(transaction_version=2)
    async with mock_cluster(topics={"t": 3}, options=options) as cluster:
        add_partitions: list[HookCall] = []
        cluster.add_hook(AddPartitionsToTxnRequest, add_partitions.append)
        async with open_producer(
            bootstrap=cluster.bootstrap, transactional_id="tx-v2", **FAST
        ) as producer:
            await producer.init_transactions()
            epochs = [producer._core.sequencing.producer_epoch]
            for n in range(3):
                async with producer.transaction():
                    for i in range(30):
                        await producer.send("t", b"v2-%d-%d" % (n, i), partition=i % 3)
                epochs.append(producer._core.sequencing.producer_epoch)
            producer.begin_transaction()
            await producer.send("t", b"aborted", partition=0)
            await producer.flush()
            await producer.abort_transaction()
            epochs.append(producer._core.sequencing.producer_epoch)
        assert add_partitions == []
        assert epochs == [0, 1, 2, 3, 4]
        # The markers carry the bumped epoch (KIP-890): commit, commit, commit, abort.
        assert transaction_markers(cluster, "t", 0) == [(1, 1), (2, 1), (3, 1), (4, 0)]
        seen = await anyio.to_thread.run_sync(
            consume_all, cluster.bootstrap, "t", 3, "read_committed"
        )
        assert len(seen) == 90 and b"aborted" not in seen


async def test_a_scope_cancelled_around_the_producer_does_not_wait_out_the_abort(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The abort of the open transaction needs the producer's tasks, which the same
    # cancellation stops: it used to wait out its whole abort_timeout (request_timeout,
    # 30 s by default) for nothing before the cancellation could take effect.
    async with mock_cluster() as cluster:
        cluster.create_topic("t", 1)
        with anyio.CancelScope() as scope:
            async with open_producer(
                cluster.bootstrap, transactional_id="tx", request_timeout=5.0, **FAST
            ) as producer:
                await producer.init_transactions()
                async with producer.transaction():
                    await producer.send_and_wait("t", b"x")
                    scope.cancel()
                    await anyio.sleep_forever()
        assert scope.cancelled_caught
        assert "the producer's tasks have stopped" in caplog.text
        assert "did not finish within" not in caplog.text
