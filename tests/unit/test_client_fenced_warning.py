"""What the producer logs when it stops on PRODUCER_FENCED: a transactional producer
was taken over by a newer instance (a warning naming its transactional id); an
idempotent one without a transactional id was not taken over by anyone, the broker
refused its epoch (before the fix it logged "transactional id None took over")."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from trio_kafka.broker import HookCall
from trio_kafka.errors import ErrorCode, ProducerFencedError
from trio_kafka.protocol.messages.produce import (
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceResponse,
)
from trio_kafka.testing import MemoryTransport, make_cluster, producer_for


def fenced(call: HookCall) -> ProduceResponse:
    return ProduceResponse(
        responses=[
            TopicProduceResponse(
                name=t.name,
                partition_responses=[
                    PartitionProduceResponse(
                        index=p.index, error_code=ErrorCode.PRODUCER_FENCED, base_offset=-1
                    )
                    for p in t.partition_data
                ],
            )
            for t in call.request.topic_data
        ]
    )


async def test_an_idempotent_producer_refused_its_epoch_does_not_say_it_was_taken_over(
    autojump_clock: trio.testing.MockClock,
    nursery: trio.Nursery,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="trio_kafka")
    cluster = make_cluster(topics={"t": 1})
    cluster.add_hook(ProduceRequest, fenced)
    transport = MemoryTransport(cluster, nursery)
    with pytest.raises(ProducerFencedError):
        async with producer_for(transport, linger=0.0) as producer:
            await producer.send_and_wait("t", b"x", partition=0)
    said = [r for r in caplog.records if "fenced" in r.getMessage() or "refused" in r.getMessage()]
    assert said, caplog.text
    assert not [r for r in said if "took over" in r.getMessage()], caplog.text
    assert "None" not in said[0].getMessage()
    assert "refused producer id" in said[0].getMessage()
