"""KIP-951, stepped with `now`: a Produce answer NOT_LEADER_OR_FOLLOWER that names the
current leader (Produce v10+ `CurrentLeader`) is handed to the driver, and a batch whose
partition's leader changed since its last attempt is retried at once, without the retry
backoff (Java's `RecordAccumulator.shouldBackoff` with a leader change)."""

from __future__ import annotations

import random
from typing import Any

import attrs

from trio_kafka.core import (
    ClusterView,
    ProducerBatch,
    ProducerConfig,
    ProducerCore,
)
from trio_kafka.errors import ErrorCode
from trio_kafka.net import BrokerMetadata, ClusterMetadata
from trio_kafka.net._metadata import PartitionMetadata, TopicMetadata
from trio_kafka.protocol.messages.produce import LeaderIdAndEpoch, PartitionProduceResponse

TP = ("t", 0)


def make_core(**options: Any) -> ProducerCore:
    options.setdefault("linger", 0.0)
    options.setdefault("retry_backoff", 1.0)
    options.setdefault("retry_backoff_max", 1.0)
    config = ProducerConfig.from_kwargs(**options)
    core = ProducerCore(config, random.Random(3), cluster=ClusterView.from_leaders({"t": [1]}))
    core.set_producer_id(1000, 0, 0.0)
    return core


def drain(core: ProducerCore, now: float, node: int) -> list[ProducerBatch]:
    core.expire(now)
    if node not in core.ready(now).ready_nodes:
        return []
    return core.drain(now, [node]).get(node, [])


def not_leader(leader: int = -1, epoch: int = -1) -> PartitionProduceResponse:
    return PartitionProduceResponse(
        index=0,
        error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
        base_offset=-1,
        current_leader=LeaderIdAndEpoch(leader, epoch),
    )


def test_the_current_leader_of_a_not_leader_answer_is_handed_to_the_driver() -> None:
    core = make_core()
    core.append("t", b"x", partition=0, now=0.0)
    batches = drain(core, 0.0, 1)
    settled = core.handle_response(1, batches, {TP: not_leader(2, 5)}, 0.01)
    assert settled.retried == 1 and settled.refresh_metadata
    assert settled.leaders == (("t", 0, 2, 5),)


def test_a_retry_to_a_new_leader_skips_the_backoff() -> None:
    core = make_core()
    handle = core.append("t", b"x", partition=0, now=0.0)
    assert handle is not None
    batches = drain(core, 0.0, 1)
    core.handle_response(1, batches, {TP: not_leader(2, 5)}, 0.01)
    assert drain(core, 0.02, 1) == []  # the old leader: the backoff holds
    core.update_metadata(ClusterView.from_leaders({"t": [2]}))  # the driver applied it
    ready = core.ready(0.02)
    assert ready.ready_nodes == {2}  # at once, not after retry_backoff=1.0
    (retry,) = core.drain(0.02, [2])[2]
    assert retry is batches[0] and retry.attempts == 2
    answer = attrs.evolve(not_leader(), error_code=0, base_offset=7)
    core.handle_response(2, [retry], {TP: answer}, 0.03)
    assert handle.result().offset == 7


def test_without_a_leader_change_the_retry_waits_for_its_backoff() -> None:
    core = make_core()
    core.append("t", b"x", partition=0, now=0.0)
    batches = drain(core, 0.0, 1)
    settled = core.handle_response(1, batches, {TP: not_leader()}, 0.01)
    assert settled.leaders == ()
    ready = core.ready(0.02)
    assert ready.ready_nodes == set() and ready.next_check_delay > 0.5
    assert drain(core, 0.02 + ready.next_check_delay, 1) == batches


def test_metadata_takes_a_leader_hint_only_when_newer_and_reachable() -> None:
    cached = ClusterMetadata(
        brokers={1: BrokerMetadata(1, "h1", 1), 2: BrokerMetadata(2, "h2", 2)},
        topics={"t": TopicMetadata("t", (PartitionMetadata("t", 0, leader=1, leader_epoch=4),))},
        updated_at=10.0,
    )
    assert cached.with_leaders([("t", 0, 2, 4)]) is cached  # not newer
    assert cached.with_leaders([("t", 0, 3, 5)]) is cached  # no address for node 3
    assert cached.with_leaders([("u", 0, 2, 5), ("t", 7, 2, 5)]) is cached  # unknown
    moved = cached.with_leaders([("t", 0, 2, 5)])
    assert moved.leader_for("t", 0) == BrokerMetadata(2, "h2", 2)
    assert moved.updated_at == 10.0  # a hint is no refresh
    far = cached.with_leaders([("t", 0, 3, 6)], [BrokerMetadata(3, "h3", 3)])
    assert far.leader_for("t", 0) == BrokerMetadata(3, "h3", 3)
