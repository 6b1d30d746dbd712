"""Record batch v2: what the other packages of trio-kafka use of it.

`_builder.py` holds the batch's layout and builds batches on the producer's hot path;
`_decoder.py` reads them (and does the broker's in-place rewrites); `_codecs.py` is the
compression; `_control.py` the transaction markers. See docs/design.md for what this
layer does and may import. This module only re-exports.
"""

from __future__ import annotations

from trio_kafka.records._builder import HEADER_SIZE, BatchBuilder, TimestampType
from trio_kafka.records._codecs import Compression
from trio_kafka.records._control import ControlType, build_control_batch, parse_control_record
from trio_kafka.records._decoder import (
    Record,
    RecordBatch,
    decode_batches,
    first_batch_is_transactional,
    read_batch_header,
    record_framing_error,
    set_log_append_time,
    verify_batch_crc,
    whole_batches,
)

__all__ = [
    "HEADER_SIZE",
    "BatchBuilder",
    "Compression",
    "ControlType",
    "Record",
    "RecordBatch",
    "TimestampType",
    "build_control_batch",
    "decode_batches",
    "first_batch_is_transactional",
    "parse_control_record",
    "read_batch_header",
    "record_framing_error",
    "set_log_append_time",
    "verify_batch_crc",
    "whole_batches",
]
