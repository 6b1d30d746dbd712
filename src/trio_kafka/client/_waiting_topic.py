"""`WaitingTopic`: a topic's records kept by the producer until its metadata comes (see
`_pending.py`, which keeps, places and fails them)."""

from __future__ import annotations

from trio_kafka.net import Event
from trio_kafka.producer import ProducerBatch


class WaitingTopic:
    """A topic's records kept until its metadata comes, in send order."""

    __slots__ = ("batch", "partitions", "placed", "size")

    def __init__(self, topic: str, now: float, wall_offset: float, placed: Event) -> None:
        # The records (values, create times, extras) and their handles' batch.
        self.batch = ProducerBatch(topic, -1, 0, now, wall_offset)
        # Each record's explicit partition, or None.
        self.partitions: list[int | None] = []
        # Buffer bytes held for the records.
        self.size = 0
        # Set once the records are placed or failed.
        self.placed = placed


__all__ = ["WaitingTopic"]
