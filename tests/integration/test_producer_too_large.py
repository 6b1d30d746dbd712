"""MESSAGE_TOO_LARGE against the mock broker over TCP: a topic whose `max.message.bytes`
is smaller than the producer's batches. Batches are split and resent; the one record
the broker will never take fails alone with `RecordTooLargeError`; every other record
lands once, in send order, at the offset its handle reports.
"""

from __future__ import annotations

import pytest

from tests.integration._backends import mock_cluster
from trio_kafka.client import Acknowledged, Failed, open_producer
from trio_kafka.errors import RecordTooLargeError

from .test_producer_faults import FAST, log_values

#: Each test runs on trio, then on asyncio (issue 16; tests/conftest.py).
pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "plain"])
async def test_batches_over_max_message_bytes_are_split_and_one_huge_record_fails_alone(
    idempotent: bool,
) -> None:
    options = {} if idempotent else {"enable_idempotence": False, "acks": 1}
    async with mock_cluster() as cluster:
        cluster.create_topic("small", 1, {"max.message.bytes": "2000"})
        async with open_producer(
            bootstrap=cluster.bootstrap, batch_size=100_000, linger=0.05, **FAST, **options
        ) as producer:
            values = [b"%04d" % i + b"." * 96 for i in range(60)]  # 6,000 bytes in all
            values[37] = b"HUGE" * 1000  # 4,000 bytes: larger than the topic takes
            handles = [await producer.send("small", v, partition=0) for v in values]
            await producer.flush()
            splits = producer.metrics().batch_splits
        huge = handles[37].outcome
        assert isinstance(huge, Failed) and isinstance(huge.error, RecordTooLargeError)
        others = [h for i, h in enumerate(handles) if i != 37]
        assert all(isinstance(h.outcome, Acknowledged) for h in others)
        assert not handles[37].succeeded() and all(h.succeeded() for h in others)
        assert splits >= 1
        landed = log_values(cluster, "small", 0)
        assert [value for _, value in landed] == values[:37] + values[38:]  # once, in order
        assert [offset for offset, _ in landed] == [h.result().offset for h in others]
        if idempotent:
            batches = cluster.decoded("small", 0)
            assert len({b.producer_id for b in batches}) == 1


async def test_a_record_larger_than_the_topic_takes_is_record_too_large_error() -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("small", 1, {"max.message.bytes": "500"})
        async with open_producer(
            bootstrap=cluster.bootstrap, enable_idempotence=False, acks=1, **FAST
        ) as producer:
            with pytest.raises(RecordTooLargeError, match="MESSAGE_TOO_LARGE"):
                await producer.send_and_wait("small", b"x" * 1000)
            # The producer goes on: a record that fits is acknowledged.
            ack = await producer.send_and_wait("small", b"fits")
        assert ack.offset == 0
