"""`WaitingTopic`: a topic's queue of records sent before its metadata came, in call
order, kept by the producer until it comes (see `_pending.py`, which queues, places
and fails them); `WaitingRecord`: one of them whose `send()` waits for its placement."""

from __future__ import annotations

from typing import Any

import anyio

from trio_kafka.net import Event
from trio_kafka.producer import DeliveryHandle, ProducerBatch


class WaitingRecord:
    """A record whose `send()` waits until it is placed (a transactional producer's, a
    custom partitioner's, any before a broker has answered): its fields, and what
    became of it."""

    __slots__ = ("fields", "outcome", "scope", "size")

    def __init__(self, fields: tuple[Any, ...], size: int) -> None:
        # (value, key, headers, partition, timestamp), as send() checked them.
        self.fields = fields
        # Buffer bytes held for it.
        self.size = size
        # Set once, by whoever placed or failed it: its handle, or why it was not
        # appended (raised by its send()).
        self.outcome: DeliveryHandle | BaseException | None = None
        # Its send()'s wait for the metadata, ended early when another task places or
        # fails the record (owned by that send()).
        self.scope: anyio.CancelScope | None = None

    def settle(self, outcome: DeliveryHandle | BaseException) -> None:
        self.outcome = outcome
        if self.scope is not None:
            self.scope.cancel()


class WaitingTopic:
    """A topic's records kept until its metadata comes: the *kept* ones (their handles
    returned at once) in `batch`, and the `waiting` ones, each at its place among them.
    Call order is kept-batch order with each waiting record before the kept record
    whose index it names."""

    __slots__ = ("batch", "kept_size", "partitions", "placed", "size", "waiting")

    def __init__(self, placed: Event) -> None:
        # The kept records (values, create times, extras) and their handles' batch;
        # None until the first (and again after they failed while waiting ones stay).
        self.batch: ProducerBatch | None = None
        # Each kept record's explicit partition, or None.
        self.partitions: list[int | None] = []
        # Buffer bytes held for every record of the queue, and for the kept ones.
        self.size = 0
        self.kept_size = 0
        # (how many kept records were sent before it, the record), in call order.
        self.waiting: list[tuple[int, WaitingRecord]] = []
        # Set once the records are placed or failed.
        self.placed = placed

    def kept(self) -> int:
        return 0 if self.batch is None else len(self.batch.values)


__all__ = ["WaitingRecord", "WaitingTopic"]
