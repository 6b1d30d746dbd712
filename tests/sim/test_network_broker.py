"""The mock broker and the client's connection over the simulated network: the real codec on
both ends survives fragmentation and latency, and connection faults mean what they say."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

import attrs
import pytest
import trio

from trio_kafka.broker import Cluster
from trio_kafka.errors import ConnectionLostError
from trio_kafka.net._connection import open_connection
from trio_kafka.protocol.messages.api_versions import ApiVersionsRequest
from trio_kafka.protocol.messages.create_topics import CreatableTopic, CreateTopicsRequest
from trio_kafka.protocol.messages.metadata import MetadataRequest
from trio_kafka.sim._timers import VirtualClock
from trio_kafka.sim.determinism import run_seeded
from trio_kafka.sim.faults import STANDARD, FaultKind, FaultPlan
from trio_kafka.sim.network import SimNetwork, open_sim_network
from trio_kafka.sim.rand import Draws

PROFILE = attrs.evolve(STANDARD, segment_size=512)


def with_cluster(
    plan: FaultPlan, main: Callable[[SimNetwork], Awaitable[None]], seed: int = 1
) -> Cluster:
    cluster = Cluster.create(2, clock=lambda: int(trio.current_time() * 1000))

    async def body(clock: VirtualClock) -> None:
        async with open_sim_network(Draws(seed), PROFILE, plan=plan) as net:
            for node in (0, 1):
                net.add_server(
                    f"broker-{node}", 9092, functools.partial(cluster.serve_stream, node)
                )
            await main(net)

    run_seeded(body, seed=seed)
    return cluster


def test_requests_round_trip_through_fragmentation_and_latency_spikes() -> None:
    plan = FaultPlan.fixed({FaultKind.FRAGMENTATION: 1.0, FaultKind.LATENCY: 0.3}, PROFILE)
    seen: list[int] = []

    async def main(net: SimNetwork) -> None:
        stream = await net.transport().connect("broker-1", 9092)
        async with open_connection(stream, "broker-1", 9092, node_id=1) as conn:
            versions = await conn.request(ApiVersionsRequest(), version=3)
            assert versions.error_code == 0 and len(versions.api_keys) > 10
            for i in range(5):
                created = await conn.request(
                    CreateTopicsRequest(
                        topics=[
                            CreatableTopic(name=f"t{i}", num_partitions=3, replication_factor=1)
                        ]
                    ),
                    version=5,
                )
                seen.append(created.topics[0].error_code)
            metadata = await conn.request(MetadataRequest(topics=None), version=12)
            assert sorted(t.name for t in metadata.topics) == [f"t{i}" for i in range(5)]
        fired = net.decider.log.count_by_kind()
        assert fired[FaultKind.FRAGMENTATION] >= 14 and fired[FaultKind.LATENCY] >= 1

    with_cluster(plan, main)
    assert seen == [0] * 5


def _create_topic_reset(fault: FaultKind) -> Cluster:
    """CreateTopics for "t" under `fault` every time: the client sees the connection
    lost; the cluster is returned to tell whether the broker applied it."""
    plan = FaultPlan.fixed({fault: 1.0}, PROFILE)

    async def main(net: SimNetwork) -> None:
        stream = await net.transport().connect("broker-0", 9092)
        async with open_connection(stream, "broker-0", 9092, node_id=0) as conn:
            with pytest.raises(ConnectionLostError):
                await conn.request(
                    CreateTopicsRequest(
                        topics=[CreatableTopic(name="t", num_partitions=1, replication_factor=1)]
                    ),
                    version=5,
                )

    return with_cluster(plan, main)


def test_reset_after_apply_leaves_the_request_applied_and_the_client_unsure() -> None:
    assert "t" in _create_topic_reset(FaultKind.RESET_AFTER_APPLY).state.topics


def test_reset_before_apply_leaves_the_broker_untouched() -> None:
    assert "t" not in _create_topic_reset(FaultKind.RESET_BEFORE_APPLY).state.topics
