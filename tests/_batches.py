"""Record batches that are wrong inside a right frame, for the broker's record checks
(tests/unit/test_broker_idempotence.py on the mock broker, the conformance test's
`corrupt_records` beside Apache Kafka)."""

from __future__ import annotations

import struct

from crc32c import crc32c

from trio_kafka.records import HEADER_SIZE


def reframe(whole: bytes, records: bytes, *, codec: int | None = None, count: int = 0) -> bytes:
    """`whole`'s header before other `records`, with its batch length and CRC made right:
    a batch whose framing and CRC hold and whose records may not. `codec` sets the
    compression bits; `count` the records count (and lastOffsetDelta with it)."""
    head = bytearray(whole[:HEADER_SIZE])
    if codec is not None:
        (attributes,) = struct.unpack_from(">h", head, 21)
        struct.pack_into(">h", head, 21, (attributes & ~7) | codec)
    if count:
        struct.pack_into(">i", head, 23, count - 1)  # lastOffsetDelta
        struct.pack_into(">i", head, 57, count)  # recordsCount
    struct.pack_into(">i", head, 8, HEADER_SIZE - 12 + len(records))  # batchLength
    struct.pack_into(">I", head, 17, crc32c(records, crc32c(bytes(head[21:]))))
    return bytes(head) + records
