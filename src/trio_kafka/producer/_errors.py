"""Errors of the producer core that the shared exception tree does not have yet."""

from __future__ import annotations

from trio_kafka.errors import KafkaError, RetriableError


class RecordTooLargeError(KafkaError):
    """A record bigger than `max_request_size` or `buffer_memory`: never sendable."""


class UnknownTopicError(RetriableError):
    """No metadata for the topic yet: the driver fetches it and appends again."""

    def __init__(self, topic: str) -> None:
        super().__init__(f"no metadata for topic {topic!r} yet")
        self.topic = topic


class InvalidPartitionError(KafkaError):
    """An explicit partition the topic does not have."""
