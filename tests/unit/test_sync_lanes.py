"""The blocking producer's lanes (`_sync_runner.Runner`): which lane a record goes to,
and the shared lane handing a topic whose metadata is gone to a lane of its own.

The whole producer is tried in tests/integration/test_producer_sync.py; here the lane
decisions alone, on a stand-in producer that has only metadata.
"""

from __future__ import annotations

import collections
from types import SimpleNamespace
from typing import Any

from trio_kafka._sync_ledger import DeliveryFuture, Ledger
from trio_kafka._sync_runner import Runner
from trio_kafka.net import ClusterMetadata, PartitionMetadata, TopicMetadata


def known(*names: str) -> Any:
    """A stand-in producer whose metadata knows `names` (one partition each)."""
    topics = {name: TopicMetadata(name, (PartitionMetadata(name, 0, leader=1),)) for name in names}
    return SimpleNamespace(selector=SimpleNamespace(metadata=ClusterMetadata(topics=topics)))


def runner_recording_lanes() -> tuple[Runner, list[tuple[str | None, list[Any]]]]:
    runner = Runner(Ledger(), "127.0.0.1:9", {})
    started: list[tuple[str | None, list[Any]]] = []

    def start_lane(producer: Any, key: str | None, lane: Any) -> None:
        started.append((key, list(lane)))

    runner._start_lane = start_lane  # type: ignore[method-assign]
    return runner, started


def entry(topic: str) -> tuple[Any, DeliveryFuture, float]:
    return ((topic, b"v", None, None, None, None), DeliveryFuture(), 0.0)


def test_a_known_topic_goes_to_the_shared_lane_an_unknown_one_to_its_own() -> None:
    runner, _ = runner_recording_lanes()
    producer = known("a")
    assert runner._route(producer, "a") is None
    assert runner._route(producer, "b") == "b"
    assert runner._shared == {"a": 1}
    # A topic with records in the shared lane stays there, known or not (order).
    assert runner._route(known(), "a") is None
    assert runner._shared == {"a": 2}


def test_the_shared_lane_hands_a_topic_whose_metadata_is_gone_to_a_lane_of_its_own() -> None:
    runner, started = runner_recording_lanes()
    b1, a1, b2, a2 = entry("b"), entry("a"), entry("b"), entry("a")
    lane = collections.deque([b1, a1, b2, a2])
    runner._lanes[None] = lane
    runner._shared = {"a": 2, "b": 2}
    producer = known("a")  # "b" was deleted, say: its send would wait for its metadata
    assert runner._hand_over(producer, lane)
    # b's records, in order, in a lane of their own; a's stay, in order.
    assert started == [("b", [b1, b2])]
    assert list(runner._lanes["b"]) == [b1, b2]
    assert list(lane) == [a1, a2]
    assert runner._shared == {"a": 2}
    assert not runner._hand_over(producer, lane)  # "a" is known: sent from here
    assert list(lane) == [a1, a2]
