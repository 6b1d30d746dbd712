"""trio-kafka: a Kafka producer for trio whose writes are never lost, duplicated or ambiguous."""

from __future__ import annotations

from trio_kafka.errors import (
    AbortableError,
    AmbiguousError,
    FatalError,
    KafkaError,
    RetriableError,
)

__version__ = "0.1.0"

__all__ = [
    "AbortableError",
    "AmbiguousError",
    "FatalError",
    "KafkaError",
    "RetriableError",
    "__version__",
]
