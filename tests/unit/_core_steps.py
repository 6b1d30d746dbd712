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
