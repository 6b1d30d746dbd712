"""The public in-memory harness of `trio_kafka.testing`: what it connects to, what it
refuses, and what it reads back."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from trio_kafka import BrokerConnectionError
from trio_kafka.testing import (
    WALL_CLOCK,
    MemoryTransport,
    log_values,
    make_cluster,
    producer_for,
    transaction_markers,
)


async def test_a_producer_writes_through_it_at_the_fixed_wall_clock(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = make_cluster(2, topics={"t": 2})
    transport = MemoryTransport(cluster, nursery)
    async with producer_for(transport, transactional_id="tx") as producer:
        await producer.init_transactions()
        async with producer.transaction():
            await producer.send("t", b"kept", partition=1)
        producer.begin_transaction()
        await producer.send("t", b"dropped", partition=1)
        await producer.flush()  # written, then aborted
        await producer.abort_transaction()
    async with producer_for(transport) as producer:
        ack = await producer.send_and_wait("t", b"plain", partition=0)
    assert ack.timestamp == int(WALL_CLOCK * 1000)
    assert log_values(cluster, "t", 1) == [b"kept", b"dropped"]
    assert [kind for _, kind in transaction_markers(cluster, "t", 1)] == [1, 0]
    assert transport.connects >= 2  # both brokers


@pytest.mark.parametrize(
    ("host", "message"),
    [
        ("broker7", "no broker 'broker7' in this cluster (it has broker0, broker1)"),
        ("localhost", "hosts named 'brokerN', not 'localhost'"),
        ("brokerX", "hosts named 'brokerN', not 'brokerX'"),
    ],
)
async def test_a_host_outside_the_cluster_is_refused_by_name(
    nursery: trio.Nursery, host: str, message: str
) -> None:
    transport = MemoryTransport(make_cluster(2), nursery)
    with pytest.raises(OSError, match=message.replace("(", r"\(").replace(")", r"\)")):
        await transport.connect(host, 9092)


async def test_refuse_makes_the_broker_unreachable(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    transport = MemoryTransport(make_cluster(topics={"t": 1}), nursery)
    transport.refuse = True
    async with producer_for(transport, max_block=1.0) as producer:
        with pytest.raises(BrokerConnectionError, match="broker0:9092"):
            await producer.send("t", b"v")
    assert transport.connects >= 1


def test_a_cluster_needs_a_broker() -> None:
    with pytest.raises(ValueError, match="brokers=0"):
        make_cluster(0)


async def test_the_example_of_the_docs_runs(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    page = Path(__file__).resolve().parents[2] / "docs" / "fault-proxy.md"
    found = re.search(r"^## In memory.*?^```python\n(.*?)^```", page.read_text(), re.M | re.S)
    assert found, "docs/fault-proxy.md lost its in-memory example"
    namespace: dict[str, Any] = {}
    exec(compile(found.group(1), str(page), "exec"), namespace)
    await namespace["test_a_lost_answer_is_retried_once"](autojump_clock, nursery)
