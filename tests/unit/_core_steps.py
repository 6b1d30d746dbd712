"""Stepping a `ProducerCore` the way the driver does, one node (node 1): shared by the
core's sequencing, epoch-bump and batch-split tests."""

from __future__ import annotations

from typing import Any

from trio_kafka.core import ProducerBatch, ProducerCore
from trio_kafka.core._core import PartitionResponse


def drain_one(core: ProducerCore, now: float) -> list[ProducerBatch]:
    """One pass of the driver: expire (which applies a due bump), ready, drain: the
    batches of one Produce request to node 1, or []."""
    core.expire(now)
    if 1 not in core.ready(now).ready_nodes:
        return []
    return core.drain(now, [1]).get(1, [])


def answer(core: ProducerCore, batches: list[ProducerBatch], now: float, **response: Any) -> None:
    """Node 1 answers every batch of the request with the same partition response."""
    answers = {(b.topic, b.partition): PartitionResponse(**response) for b in batches}
    core.handle_response(1, batches, answers, now)


def acknowledge_a_first_batch(
    core: ProducerCore, value: bytes, now: float = 0.0, *, topic: str = "t", partition: int = 0
) -> None:
    """Send one record to `topic`-`partition` and acknowledge it (offset 0): a
    partition's first batch under an epoch goes alone, so a test that pipelines batches
    starts with one acknowledged (its sequence 0 is taken)."""
    handle = core.append(topic, value, partition=partition, now=now)
    assert handle is not None
    batches = drain_one(core, now)
    assert [b.base_sequence for b in batches] == [0], batches
    answer(core, batches, now, base_offset=0)
    assert handle.done()
