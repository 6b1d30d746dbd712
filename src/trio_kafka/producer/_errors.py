"""Old home of the producer core's errors: they live in `trio_kafka.errors` now.

Kept so `from trio_kafka.producer._errors import ...` goes on working.
"""

from __future__ import annotations

from trio_kafka.errors import InvalidPartitionError, RecordTooLargeError, UnknownTopicError

__all__ = ["InvalidPartitionError", "RecordTooLargeError", "UnknownTopicError"]
