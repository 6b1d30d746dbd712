"""Record batch v2: builder and decoder round trips, exact bytes, CRC, broker rewrites."""

from __future__ import annotations

import struct

import crc32c
import pytest

from trio_kafka.errors import CorruptRecordError
from trio_kafka.records import (
    BatchBuilder,
    Compression,
    TimestampType,
    decode_batches,
    read_batch_header,
    set_base_offset,
    set_log_append_time,
    verify_batch_crc,
)


def test_round_trip_keeps_every_field() -> None:
    builder = BatchBuilder()
    assert builder.append(1_000, b"k", b"v", [("h", b"x"), ("n", None)]) == 0
    assert builder.append(999, None, None) == 1
    data = builder.build(
        base_offset=7, producer_id=42, producer_epoch=3, base_sequence=11,
        is_transactional=True, partition_leader_epoch=5,
    )  # fmt: skip
    [batch] = decode_batches(data)
    assert (batch.base_offset, batch.producer_id, batch.producer_epoch) == (7, 42, 3)
    assert (batch.base_sequence, batch.partition_leader_epoch) == (11, 5)
    assert batch.is_transactional and not batch.is_control
    assert batch.timestamp_type is TimestampType.CREATE_TIME
    assert batch.compression is Compression.NONE
    assert (batch.base_timestamp, batch.max_timestamp) == (1_000, 1_000)
    assert (batch.last_offset, batch.next_offset, batch.record_count) == (8, 9, 2)
    first, second = batch.records
    assert (first.offset, first.timestamp, first.key, first.value) == (7, 1_000, b"k", b"v")
    assert first.headers == (("h", b"x"), ("n", None))
    assert (second.offset, second.timestamp, second.key, second.value) == (8, 999, None, None)


def test_crc_matches_the_crc32c_package_over_attributes_to_end() -> None:
    builder = BatchBuilder()
    builder.append(5, b"key", b"value")
    data = builder.build()
    (stored,) = struct.unpack_from(">I", data, 17)
    assert stored == crc32c.crc32c(data[21:])
    assert verify_batch_crc(data)


def test_wrong_crc_is_detected() -> None:
    builder = BatchBuilder()
    builder.append(5, b"key", b"value")
    data = bytearray(builder.build())
    data[-1] ^= 0x01
    assert not verify_batch_crc(data)
    with pytest.raises(CorruptRecordError, match="CRC"):
        list(decode_batches(data))


def test_set_base_offset_and_log_append_time_keep_the_crc_valid() -> None:
    builder = BatchBuilder()
    builder.append(5, None, b"a")
    builder.append(6, None, b"b")
    data = set_log_append_time(set_base_offset(builder.build(), 100), 12_345)
    assert verify_batch_crc(data)
    header = read_batch_header(data)
    assert header.base_offset == 100
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    [batch] = decode_batches(data)
    assert [(r.offset, r.timestamp) for r in batch.records] == [(100, 12_345), (101, 12_345)]
