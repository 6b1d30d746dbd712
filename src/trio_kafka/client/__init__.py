"""What users call: `open_producer()`, the transactional producer, the conditional
writer, the bulk loader and the partition reader.

This module only re-exports, and only what another package of ours imports from it:
`trio_kafka` itself (the user's API, whose signatures name some of net's and the core's
types too), the blocking facade (`sync.py`), the simulator, the test kit, the command
line (`_cli`: the security options, `writer_of`) and Spark (`GUARANTEES`, the one
partition rule `partition_of`, `load_partition` and its `RowChunk`s, `describe_topic_config`,
`group_leaves`; Spark may import nothing of net's directly). See docs/design.md for what
this layer does and may import.
"""

from __future__ import annotations

from trio_kafka.client._bulk import (
    GUARANTEES,
    BulkLoader,
    LoadResult,
    PartitionLoad,
    PartitionLoadResult,
    RowChunk,
    load_partition,
    open_bulk_loader,
    partition_of,
    row_of,
)
from trio_kafka.client._cas import create_topic, describe_topic_config
from trio_kafka.client._conditional import (
    ConditionalWriter,
    open_conditional_writer,
    writer_of,
)
from trio_kafka.client._handles import BulkDelivery, RecordHandle
from trio_kafka.client._open import open_producer
from trio_kafka.client._producer import HandedOffTransaction, Producer
from trio_kafka.client._reader import FetchResult, IsolationLevel, PartitionRead, PartitionReader
from trio_kafka.client._security import PROTOCOLS, Security, pop_security
from trio_kafka.client._transactions import GroupMetadata, OffsetAndMetadata
from trio_kafka.core import (
    Acknowledged,
    Ambiguous,
    Backend,
    Failed,
    MetricsSnapshot,
    Outcome,
    ProducerConfig,
    ProducerRecord,
)
from trio_kafka.net import KafkaSelector, group_leaves, open_selector

__all__ = [
    "GUARANTEES",
    "PROTOCOLS",
    "Acknowledged",
    "Ambiguous",
    "Backend",
    "BulkDelivery",
    "BulkLoader",
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
    "open_bulk_loader",
    "open_conditional_writer",
    "open_producer",
    "open_selector",
    "partition_of",
    "pop_security",
    "row_of",
    "writer_of",
]
