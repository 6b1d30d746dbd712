"""What users call: `open_producer()` and the delivery handles.

See docs/design.md for what this layer does and may import.
"""

from __future__ import annotations

from trio_kafka.client._bulk import (
    GUARANTEES,
    LOAD_HEADER,
    ROW_HEADER,
    BulkLoader,
    LoadResult,
    PartitionLoad,
    PartitionLoadResult,
    RowChunk,
    load_partition,
    one_batch_request,
    open_bulk_loader,
    partition_of,
    row_of,
)
from trio_kafka.client._cas import (
    CAS_TOPIC_CONFIG,
    CasGate,
    create_topic,
    describe_topic_config,
)
from trio_kafka.client._conditional import (
    ConditionalWriter,
    open_conditional_writer,
    writer_of,
)
from trio_kafka.client._handles import BulkDelivery, RecordHandle
from trio_kafka.client._open import open_producer
from trio_kafka.client._producer import Producer
from trio_kafka.client._reader import FetchResult, IsolationLevel, PartitionRead, PartitionReader
from trio_kafka.client._security import PROTOCOLS, Security, pop_security
from trio_kafka.client._transactions import GroupMetadata, OffsetAndMetadata
from trio_kafka.client._txn_calls import HandedOffTransaction
from trio_kafka.net import KafkaSelector, group_leaves, open_selector
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
    "CAS_TOPIC_CONFIG",
    "GUARANTEES",
    "LOAD_HEADER",
    "PROTOCOLS",
    "ROW_HEADER",
    "Acknowledged",
    "Ambiguous",
    "BulkDelivery",
    "BulkLoader",
    "CasGate",
    "ConditionalWriter",
    "Failed",
    "FetchResult",
    "GroupMetadata",
    "HandedOffTransaction",
    "IsolationLevel",
    "KafkaSelector",
    "LoadResult",
    "MetricsSnapshot",
    "OffsetAndMetadata",
    "Outcome",
    "PartitionLoad",
    "PartitionLoadResult",
    "PartitionRead",
    "PartitionReader",
    "Producer",
    "ProducerConfig",
    "ProducerRecord",
    "RecordHandle",
    "RowChunk",
    "Security",
    "create_topic",
    "describe_topic_config",
    "group_leaves",
    "load_partition",
    "one_batch_request",
    "open_bulk_loader",
    "open_conditional_writer",
    "open_producer",
    "open_selector",
    "partition_of",
    "pop_security",
    "row_of",
    "writer_of",
]
