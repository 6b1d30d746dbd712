"""What users call: `open_producer()` and the delivery handles.

See docs/design.md for what this layer does and may import.
"""

from __future__ import annotations

from trio_kafka.client._handles import BulkDelivery, RecordHandle
from trio_kafka.client._producer import Producer, open_producer
from trio_kafka.producer import (
    Acknowledged,
    Ambiguous,
    Failed,
    MetricsSnapshot,
    Outcome,
    ProducerConfig,
    ProducerRecord,
)

__all__ = [
    "Acknowledged",
    "Ambiguous",
    "BulkDelivery",
    "Failed",
    "MetricsSnapshot",
    "Outcome",
    "Producer",
    "ProducerConfig",
    "ProducerRecord",
    "RecordHandle",
    "open_producer",
]
