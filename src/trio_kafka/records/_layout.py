"""The fixed layout of a record batch v2 header (KIP-98), shared by builder and decoder.

offset size field                 in CRC
     0    8 baseOffset            no   (the broker assigns it)
     8    4 batchLength           no   (bytes after this field)
    12    4 partitionLeaderEpoch  no   (the broker assigns it)
    16    1 magic (2)             no
    17    4 crc (CRC-32C)         no
    21    2 attributes            yes  (from here to the end of the batch)
    23    4 lastOffsetDelta
    27    8 baseTimestamp
    35    8 maxTimestamp
    43    8 producerId
    51    2 producerEpoch
    53    4 baseSequence
    57    4 recordsCount
    61      records (compressed as one block when the codec is not NONE)
"""

from __future__ import annotations

import enum
import struct

from crc32c import crc32c

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes batchLength does not count
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
MAGIC = 2

BASE_OFFSET_OFFSET = 0
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35

# The whole header, and its two halves around the CRC boundary.
HEADER = struct.Struct(">qiibIhiqqqhii")
PREFIX = struct.Struct(">qiibI")  # baseOffset .. crc: outside the CRC
SUFFIX = struct.Struct(">hiqqqhii")  # attributes .. recordsCount: inside the CRC
INT64 = struct.Struct(">q")
INT16 = struct.Struct(">h")
CRC = struct.Struct(">I")

# Attribute bits (bits 0-2 are the codec).
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40

NO_SEQUENCE = -1
NO_PRODUCER_ID = -1
NO_TIMESTAMP = -1
INT32_MAX = (1 << 31) - 1


class TimestampType(enum.IntEnum):
    """Bit 3 of the attributes: whose clock the record timestamps come from."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


def frame_batch(
    records: bytes | bytearray,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    record_count: int,
) -> bytes:
    """A whole batch: the 61-byte header, with its length and CRC, before `records` (the
    record section as it goes on the wire, compressed or not)."""
    suffix = SUFFIX.pack(
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    )
    crc = crc32c(records, crc32c(suffix))
    prefix = PREFIX.pack(
        base_offset, HEADER_SIZE - LOG_OVERHEAD + len(records), partition_leader_epoch, MAGIC, crc
    )
    return b"".join((prefix, suffix, records))
