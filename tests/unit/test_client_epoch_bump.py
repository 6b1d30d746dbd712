"""The idempotent producer's epoch bump through the whole client (the sender over
memory streams to the mock broker, in virtual time): the same producer id at the next
epoch, InitProducerId only once and without an id, and the old epoch's late request
refused by the broker.

Before the fix the sender ran InitProducerId (v5, the current producer id and epoch,
no transactional id) for the bump: Kafka and our mock broker answer it with a NEW
producer id (seeds 709627, 901616, 904005: a late request of the old id landed after
newer records), and Tansu answered a retry of it with PRODUCER_FENCED (the producer
died with ProducerFencedError).
"""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from trio_kafka.broker import DROP, HookCall
from trio_kafka.broker._context import RequestContext
from trio_kafka.broker.handlers import produce as produce_handler
from trio_kafka.core import Acknowledged, Ambiguous
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol.messages.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from trio_kafka.protocol.messages.produce import (
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceResponse,
)
from trio_kafka.testing import MemoryTransport, make_cluster, producer_for


def refuse(call: HookCall, code: ErrorCode) -> ProduceResponse:
    """Answer every partition of a Produce with `code`, appending nothing."""
    return ProduceResponse(
        responses=[
            TopicProduceResponse(
                name=t.name,
                partition_responses=[
                    PartitionProduceResponse(index=p.index, error_code=code, base_offset=-1)
                    for p in t.partition_data
                ],
            )
            for t in call.request.topic_data
        ]
    )


async def test_a_bump_keeps_the_producer_id_and_fences_the_old_epochs_late_request(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = make_cluster(topics={"t": 1})
    transport = MemoryTransport(cluster, nursery)
    inits: list[InitProducerIdRequest] = []

    def tansu_like(call: HookCall) -> Any:
        # Record every InitProducerId; answer one that names a producer id as Tansu
        # answered the retried bump: PRODUCER_FENCED.
        inits.append(call.request)
        if call.request.producer_id != -1:
            return InitProducerIdResponse(
                error_code=ErrorCode.PRODUCER_FENCED, producer_id=-1, producer_epoch=-1
            )
        return None

    cluster.add_hook(InitProducerIdRequest, tansu_like)
    produced: list[HookCall] = []
    cluster.add_hook(ProduceRequest, produced.append)
    async with producer_for(
        transport,
        linger=0.0,
        retries=1,
        request_timeout=1.0,
        delivery_timeout=10.0,
    ) as producer:
        first = await producer.send_and_wait("t", b"first", partition=0)

        # "second" is appended, then its connection dies (a request that may have
        # landed); its retry is refused as a gap, so the producer must bump its epoch.
        def applied_then_lost(call: HookCall) -> Any:
            cluster.add_hook(
                ProduceRequest,
                lambda call: refuse(call, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
                times=1,
            )
            return DROP

        cluster.add_hook(ProduceRequest, applied_then_lost, after=True, times=1)
        second = await producer.send("t", b"second", partition=0)
        with trio.fail_after(30):
            while not second.done():
                await trio.sleep(0.1)
        third = await producer.send_and_wait("t", b"third", partition=0)
        with trio.fail_after(30):
            await producer.flush()  # the bump's Ambiguous batch counts as progress
    # The first attempt of "second" arrives again, late (a zombie), under the old epoch.
    late = produced[1]
    cluster.state.tick()
    zombie = produce_handler.handle(RequestContext(cluster.state, 0, late.header), late.request)
    assert isinstance(first, Acknowledged) and isinstance(third, Acknowledged)
    assert isinstance(second.outcome, Ambiguous)  # it is in the log; never resent
    assert [(r.transactional_id, r.producer_id, r.producer_epoch) for r in inits] == [
        (None, -1, -1)
    ]
    batches = cluster.decoded("t", 0)
    assert [(b.producer_id, b.producer_epoch, b.base_sequence) for b in batches] == [
        (batches[0].producer_id, 0, 0),
        (batches[0].producer_id, 0, 1),  # "second", applied before its connection died
        (batches[0].producer_id, 1, 0),  # "third": same id, next epoch, sequence 0
    ]
    [[answer]] = [t.partition_responses for t in zombie.responses]
    assert answer.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert len(cluster.decoded("t", 0)) == 3
