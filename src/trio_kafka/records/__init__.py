"""Record batch v2: building, decoding, compression, control records.

See docs/design.md for what this layer does and may import. This module only re-exports.
"""

from __future__ import annotations

from trio_kafka.records._builder import BatchBuilder
from trio_kafka.records._codecs import Compression
from trio_kafka.records._control import (
    ControlRecord,
    ControlType,
    build_control_batch,
    parse_control_record,
)
from trio_kafka.records._decoder import (
    BatchHeader,
    Record,
    RecordBatch,
    decode_batches,
    read_batch_header,
    set_base_offset,
    set_log_append_time,
    verify_batch_crc,
)
from trio_kafka.records._layout import HEADER_SIZE, TimestampType

__all__ = [
    "HEADER_SIZE",
    "BatchBuilder",
    "BatchHeader",
    "Compression",
    "ControlRecord",
    "ControlType",
    "Record",
    "RecordBatch",
    "TimestampType",
    "build_control_batch",
    "decode_batches",
    "parse_control_record",
    "read_batch_header",
    "set_base_offset",
    "set_log_append_time",
    "verify_batch_crc",
]
