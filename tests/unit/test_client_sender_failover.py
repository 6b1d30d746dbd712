"""A leader the sender cannot connect to makes it ask for metadata, so its batches move
to the new leader as soon as the cluster elects one (as Java's NetworkClient requests a
metadata update on every disconnect). Before, a failed connect asked nothing: on a
3-node Kafka cluster whose leader was SIGKILLed, the producer retried the dead node
until delivery_timeout."""

from __future__ import annotations

import math
import random
from typing import Any

import attrs
import trio
import trio.testing

from trio_kafka.client._sender import Sender
from trio_kafka.core import ClusterView, ProducerConfig, ProducerCore
from trio_kafka.errors import BrokerConnectionError
from trio_kafka.net import ClusterMetadata, TrioClock
from trio_kafka.net._metadata import BrokerMetadata, PartitionMetadata, TopicMetadata

DELIVERY_TIMEOUT = 120.0


def led_by(leader: int) -> ClusterMetadata:
    return ClusterMetadata(
        brokers={n: BrokerMetadata(n, f"broker{n}", 9092) for n in (0, 1)},
        topics={"t": TopicMetadata("t", (PartitionMetadata("t", 0, leader=leader),))},
        updated_at=0.0,
    )


@attrs.define(eq=False)
class DeadLeaderSelector:
    """The selector surface the sender uses: node 0 (the leader) refuses every connect;
    from the `elected_after`-th refresh on, the metadata names node 1 as the leader.
    Node 1's connect hangs: reaching it is what the test looks for."""

    elected_after: int = 3
    metadata: ClusterMetadata = attrs.field(factory=lambda: led_by(0))
    rng: random.Random = attrs.field(factory=lambda: random.Random(7))
    refreshes: list[float] = attrs.field(factory=list)
    attempts: dict[int, list[float]] = attrs.field(factory=lambda: {0: [], 1: []})

    async def connection(self, node_id: int) -> Any:
        self.attempts[node_id].append(trio.current_time())
        if node_id == 0:
            raise BrokerConnectionError("node 0: connection refused")
        await trio.sleep_forever()

    def is_ready(self, node_id: int) -> bool:
        return False

    def retry_at(self, node_id: int) -> float:
        return -math.inf

    def touch(self, topics: list[str]) -> None:
        pass

    async def refresh_metadata(self, topics: Any = ()) -> ClusterMetadata:
        self.refreshes.append(trio.current_time())
        if len(self.refreshes) >= self.elected_after:
            self.metadata = led_by(1)
        return self.metadata


async def run_against(selector: DeadLeaderSelector, until: float) -> None:
    config = ProducerConfig.from_kwargs(
        enable_idempotence=False, delivery_timeout=DELIVERY_TIMEOUT, request_timeout=30.0
    )
    core = ProducerCore(config, random.Random(7), cluster=ClusterView.from_leaders({"t": [0]}))
    async with trio.open_nursery() as nursery:
        sender = Sender(core, selector, TrioClock(), nursery, lambda: None)  # type: ignore[arg-type]
        nursery.start_soon(sender.run)
        assert core.append("t", b"v", partition=0, now=trio.current_time()) is not None
        sender.wake()
        await trio.sleep(until)
        nursery.cancel_scope.cancel()


async def test_a_failed_connect_to_the_leader_requests_a_metadata_refresh(
    autojump_clock: trio.testing.MockClock,
) -> None:
    selector = DeadLeaderSelector(elected_after=1_000_000)  # never elects
    await run_against(selector, until=5.0)
    assert selector.attempts[0], "the sender never tried the leader"
    assert selector.refreshes, "failed connects to the leader asked for no metadata"
    assert selector.refreshes[0] <= selector.attempts[0][0] + 0.5


async def test_refreshes_after_failed_connects_are_rate_limited(
    autojump_clock: trio.testing.MockClock,
) -> None:
    selector = DeadLeaderSelector(elected_after=1_000_000)
    await run_against(selector, until=5.0)
    # At most one per retry_backoff (0.1 s), however often the connect fails.
    gaps = [b - a for a, b in zip(selector.refreshes, selector.refreshes[1:], strict=False)]
    assert all(gap >= 0.1 - 1e-9 for gap in gaps), gaps
    assert len(selector.refreshes) <= 5.0 / 0.1 + 1


async def test_batches_move_to_the_new_leader_once_the_metadata_names_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    selector = DeadLeaderSelector(elected_after=3)
    await run_against(selector, until=10.0)
    # Within seconds of the election (the third refresh), not at delivery_timeout.
    assert selector.attempts[1], f"node 1 never tried; refreshes at {selector.refreshes}"
    assert selector.attempts[1][0] <= selector.refreshes[2] + 1.0
