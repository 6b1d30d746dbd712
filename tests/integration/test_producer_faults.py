"""The trio producer against the mock broker over TCP, with faults injected by hooks.

Each test checks the broker's ground truth (its log) against what the handles said:
no duplicates, every acknowledged record at its reported offset, and a record whose
fate is unknown reported as Ambiguous, never as Failed.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.integration._backends import mock_cluster
from tests.integration._helpers import FAST
from trio_kafka.broker import BLACKHOLE, DROP, Cluster, HookCall
from trio_kafka.client import Acknowledged, Ambiguous, RecordHandle, open_producer
from trio_kafka.errors import AmbiguousError, ErrorCode
from trio_kafka.protocol.messages.produce import (
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceResponse,
)

#: Each test runs on trio, then on asyncio (issue 16; tests/conftest.py).
pytestmark = pytest.mark.anyio


def log_values(cluster: Cluster, topic: str, partition: int) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for b in cluster.decoded(topic, partition) for r in b.records]


def check_exactly_once(
    cluster: Cluster, topic: str, partitions: int, handles: list[RecordHandle]
) -> None:
    """Every handle acknowledged, each value once in the log, at the offset reported."""
    where: dict[bytes | None, tuple[int, int]] = {}
    for partition in range(partitions):
        for offset, value in log_values(cluster, topic, partition):
            assert value not in where, f"{value!r} is in the log twice"
            where[value] = (partition, offset)
    assert len(where) == len(handles)
    for handle in handles:
        outcome = handle.outcome
        assert isinstance(outcome, Acknowledged), outcome
        value = handle.batch.records[handle.index][2]
        assert where[value] == (outcome.partition, outcome.offset)


def answer_with(code: int, *, log_start_offset: int = -1) -> Callable[[HookCall], ProduceResponse]:
    """A hook answering every partition of a Produce request with `code` (not applied)."""

    def hook(call: HookCall) -> ProduceResponse:
        request: ProduceRequest = call.request
        return ProduceResponse(
            responses=[
                TopicProduceResponse(
                    name=t.name,
                    partition_responses=[
                        PartitionProduceResponse(
                            index=p.index,
                            error_code=code,
                            base_offset=-1,
                            log_start_offset=log_start_offset,
                        )
                        for p in t.partition_data
                    ],
                )
                for t in request.topic_data
            ]
        )

    return hook


async def test_connection_dropped_after_append_is_deduplicated() -> None:
    async with mock_cluster(topics={"t": 2}) as cluster:
        cluster.add_hook(ProduceRequest, lambda call: DROP, after=True, times=1)
        async with open_producer(bootstrap=cluster.bootstrap, **FAST) as producer:
            handles = [await producer.send("t", b"v%d" % i) for i in range(300)]
            await producer.flush()
            assert producer.metrics().record_retries > 0
        check_exactly_once(cluster, "t", 2, handles)


async def test_not_leader_then_the_leader_moves() -> None:
    async with mock_cluster(brokers=2, topics={"t": 1}) as cluster:
        leader = cluster.state.partition("t", 0).leader  # type: ignore[union-attr]
        async with open_producer(bootstrap=cluster.bootstrap, **FAST) as producer:
            first = [await producer.send("t", b"a%d" % i) for i in range(50)]
            await producer.flush()
            retries_before = producer.metrics().record_retries
            cluster.move_leader("t", 0, 1 - leader)
            second = [await producer.send("t", b"b%d" % i) for i in range(50)]
            await producer.flush()
            # The first request went to the old leader (stale metadata), was refused with
            # NOT_LEADER_OR_FOLLOWER and retried at the new one.
            assert producer.metrics().record_retries > retries_before
        check_exactly_once(cluster, "t", 1, first + second)


@pytest.mark.parametrize(
    ("code", "log_start_offset"),
    [(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1), (ErrorCode.UNKNOWN_PRODUCER_ID, 0)],
)
async def test_sequence_errors_are_recovered_by_an_epoch_bump(
    code: ErrorCode, log_start_offset: int
) -> None:
    async with mock_cluster(topics={"t": 1}) as cluster:
        async with open_producer(bootstrap=cluster.bootstrap, linger=0.001, **FAST) as producer:
            before = [await producer.send("t", b"a%d" % i) for i in range(20)]
            await producer.flush()
            cluster.add_hook(
                ProduceRequest, answer_with(code, log_start_offset=log_start_offset), times=1
            )
            after = [await producer.send("t", b"b%d" % i) for i in range(20)]
            await producer.flush()
            assert producer.metrics().epoch_bumps == 1
        check_exactly_once(cluster, "t", 1, before + after)
        # The bump is local: the same producer id at the next epoch (a new id would not
        # fence the old one's late requests).
        owners = {(b.producer_id, b.producer_epoch) for b in cluster.decoded("t", 0)}
        assert len(owners) == 2
        assert len({producer_id for producer_id, _ in owners}) == 1


async def test_a_request_timeout_is_retried_and_deduplicated() -> None:
    async with mock_cluster(topics={"t": 1}) as cluster:
        cluster.add_hook(ProduceRequest, lambda call: BLACKHOLE, after=True, times=1)
        async with open_producer(
            bootstrap=cluster.bootstrap, request_timeout=0.3, **FAST
        ) as producer:
            handles = [await producer.send("t", b"v%d" % i) for i in range(10)]
            await producer.flush()
            assert producer.metrics().record_retries > 0
        check_exactly_once(cluster, "t", 1, handles)


async def test_a_request_timeout_without_retry_is_ambiguous_not_failed() -> None:
    async with mock_cluster(topics={"t": 1}) as cluster:
        cluster.add_hook(ProduceRequest, lambda call: BLACKHOLE, after=True)
        async with open_producer(
            bootstrap=cluster.bootstrap,
            request_timeout=0.2,
            delivery_timeout=0.3,
            linger=0.0,
            **FAST,
        ) as producer:
            handle = await producer.send("t", b"maybe")
            with pytest.raises(AmbiguousError):
                await handle
        assert isinstance(handle.outcome, Ambiguous)
        assert log_values(cluster, "t", 0) == [(0, b"maybe")]  # it was in fact written


async def test_acks_1_without_idempotence_and_no_retries_is_ambiguous_on_timeout() -> None:
    async with mock_cluster(topics={"t": 1}) as cluster:
        cluster.add_hook(ProduceRequest, lambda call: BLACKHOLE)
        async with open_producer(
            bootstrap=cluster.bootstrap,
            enable_idempotence=False,
            acks=1,
            retries=0,
            request_timeout=0.2,
            **FAST,
        ) as producer:
            handle = await producer.send("t", b"x")
            with pytest.raises(AmbiguousError):
                await handle
