"""Record batch v2: builder and decoder round trips, exact bytes, CRC, broker rewrites."""

from __future__ import annotations

import random
import struct
import warnings

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_kafka.errors import CorruptRecordError
from trio_kafka.records import (
    BatchBuilder,
    Compression,
    decode_batches,
    read_batch_header,
    set_log_append_time,
    verify_batch_crc,
)
from trio_kafka.records._builder import TimestampType
from trio_kafka.records._decoder import set_base_offset


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


# --- an independent encoder, written from the spec, for byte-for-byte comparison --------


def spec_varint(value: int) -> bytes:
    """Zigzag (64-bit form) then base-128, low group first: the protobuf rules."""
    raw = ((value << 1) ^ (value >> 63)) & ((1 << 64) - 1)
    out = b""
    while True:
        group = raw & 0x7F
        raw >>= 7
        if raw:
            out += bytes([group | 0x80])
        else:
            return out + bytes([group])


def spec_bytes(data: bytes | None) -> bytes:
    return spec_varint(-1) if data is None else spec_varint(len(data)) + data


def spec_record(offset_delta: int, timestamp_delta: int, key, value, headers) -> bytes:  # type: ignore[no-untyped-def]
    body = b"\x00"  # attributes
    body += spec_varint(timestamp_delta)
    body += spec_varint(offset_delta)
    body += spec_bytes(key)
    body += spec_bytes(value)
    body += spec_varint(len(headers))
    for name, header_value in headers:
        body += spec_bytes(name.encode())
        body += spec_bytes(header_value)
    return spec_varint(len(body)) + body


def spec_batch(records, *, base_offset, leader_epoch, attributes, producer_id, epoch, sequence):  # type: ignore[no-untyped-def]
    base_ts = records[0][0]
    encoded = b"".join(
        spec_record(i, ts - base_ts, k, v, h) for i, (ts, k, v, h) in enumerate(records)
    )
    after_crc = (
        struct.pack(">h", attributes)
        + struct.pack(">i", len(records) - 1)  # lastOffsetDelta
        + struct.pack(">q", base_ts)
        + struct.pack(">q", max(r[0] for r in records))
        + struct.pack(">q", producer_id)
        + struct.pack(">h", epoch)
        + struct.pack(">i", sequence)
        + struct.pack(">i", len(records))
        + encoded
    )
    return (
        struct.pack(">q", base_offset)
        + struct.pack(">i", 4 + 1 + 4 + len(after_crc))  # leader epoch, magic, crc, rest
        + struct.pack(">i", leader_epoch)
        + struct.pack(">b", 2)
        + struct.pack(">I", crc32c.crc32c(after_crc))
        + after_crc
    )


def test_spec_varint_matches_the_protocol_examples() -> None:
    assert [spec_varint(n) for n in (0, -1, 1, -2, 63, -64, 64)] == [
        b"\x00", b"\x01", b"\x02", b"\x03", b"\x7e", b"\x7f", b"\x80\x01",
    ]  # fmt: skip
    assert spec_varint(150) == b"\xac\x02"


HAND_RECORDS = [
    (1_700_000_000_000, b"key", b"value", []),
    (1_700_000_000_005, None, b"v" * 300, [("trace", b"abc"), ("empty", b""), ("null", None)]),
    (1_699_999_999_000, b"", None, []),  # earlier than the base: a negative delta
    (1_700_000_100_000, b"k" * 20_000, b"", [("\u00e9t\u00e9", b"\x00" * 200)]),
]


def test_builder_output_equals_a_batch_built_field_by_field_from_the_spec() -> None:
    builder = BatchBuilder()
    for ts, key, value, headers in HAND_RECORDS:
        builder.append(ts, key, value, headers)
    ours = builder.build(
        base_offset=-1, producer_id=1234, producer_epoch=7, base_sequence=99,
        is_transactional=True, partition_leader_epoch=3,
    )  # fmt: skip
    expected = spec_batch(
        HAND_RECORDS, base_offset=-1, leader_epoch=3, attributes=0x10, producer_id=1234,
        epoch=7, sequence=99,
    )  # fmt: skip
    assert ours == expected


def test_decoder_reads_a_batch_built_field_by_field_from_the_spec() -> None:
    data = spec_batch(
        HAND_RECORDS, base_offset=500, leader_epoch=0, attributes=0, producer_id=-1,
        epoch=-1, sequence=-1,
    )  # fmt: skip
    [batch] = decode_batches(data)
    assert batch.max_timestamp == 1_700_000_100_000
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch.records] == [
        (500 + i, ts, k, v, h) for i, (ts, k, v, h) in enumerate(HAND_RECORDS)
    ]


def test_builder_matches_kafka_python_byte_for_byte() -> None:
    with warnings.catch_warnings():  # kafka-python's import uses a deprecated API
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.record.default_records import DefaultRecordBatchBuilder

    theirs = DefaultRecordBatchBuilder(2, 0, True, 77, 2, 10, batch_size=1 << 20)
    ours = BatchBuilder()
    for i, (ts, key, value, headers) in enumerate(HAND_RECORDS):
        theirs.append(i, ts, key, value, headers)
        ours.append(ts, key, value, headers)
    built = ours.build(
        producer_id=77, producer_epoch=2, base_sequence=10, is_transactional=True,
        partition_leader_epoch=0,
    )  # fmt: skip
    assert built == bytes(theirs.build())


# --- builder behaviour ------------------------------------------------------------------


def test_empty_builder_refuses_to_build() -> None:
    with pytest.raises(ValueError, match="empty"):
        BatchBuilder().build()


def test_append_returns_offset_deltas_and_counts() -> None:
    builder = BatchBuilder()
    assert [builder.append(0, None, b"x") for _ in range(3)] == [0, 1, 2]
    assert builder.record_count == 3
    assert builder.size_in_bytes() == len(builder.build())


def test_rebuild_rewrites_only_the_header_and_never_recompresses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import trio_kafka.records._builder as builder_module

    calls = []
    real = builder_module.compress

    def counting(*args):  # type: ignore[no-untyped-def]
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(builder_module, "compress", counting)
    builder = BatchBuilder(Compression.ZSTD)
    for i in range(50):
        builder.append(i, None, b"payload %d" % i)
    first = builder.build(producer_id=1, producer_epoch=0, base_sequence=0)
    second = builder.build(producer_id=1, producer_epoch=1, base_sequence=0, base_offset=9)
    assert len(calls) == 1
    assert first[61:] == second[61:]
    assert first[:61] != second[:61]
    assert verify_batch_crc(first) and verify_batch_crc(second)
    assert read_batch_header(second).producer_epoch == 1
    builder.append(99, None, b"late")  # an append after a build is encoded in the next one
    [batch] = decode_batches(builder.build())
    assert batch.record_count == 51 and len(calls) == 2


def test_log_append_time_builder_sets_the_attribute() -> None:
    builder = BatchBuilder(timestamp_type=TimestampType.LOG_APPEND_TIME)
    builder.append(10, None, b"x")
    builder.append(30, None, b"y")
    [batch] = decode_batches(builder.build())
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in batch.records] == [30, 30]


def test_large_timestamp_deltas_and_many_records_take_the_slow_varint_path() -> None:
    builder = BatchBuilder()
    timestamps = [0, 10**12, -(10**12), 5]
    for i in range(20_000):
        builder.append(timestamps[i % 4], None, b"")
    [batch] = decode_batches(builder.build())
    assert batch.records[-1].offset == 19_999
    assert [r.timestamp for r in batch.records[:4]] == timestamps
    assert batch.max_timestamp == 10**12


# --- several batches, partial batches, headers ----------------------------------------


def _small_batch(base_offset: int) -> bytes:
    builder = BatchBuilder()
    builder.append(1, b"k", b"v")
    return builder.build(base_offset=base_offset)


def test_several_batches_are_decoded_in_order() -> None:
    data = _small_batch(0) + _small_batch(1) + _small_batch(2)
    assert [b.base_offset for b in decode_batches(memoryview(data))] == [0, 1, 2]


@pytest.mark.parametrize("cut", [1, 11, 12, 17, 40, 61, -1])
def test_partial_trailing_batch_is_dropped_only_when_allowed(cut: int) -> None:
    whole = _small_batch(0)
    data = whole + _small_batch(1)[:cut]
    assert [b.base_offset for b in decode_batches(data, allow_partial=True)] == [0]
    with pytest.raises(CorruptRecordError, match="truncated"):
        list(decode_batches(data))


def test_read_batch_header_reads_the_fixed_fields_at_a_position() -> None:
    data = _small_batch(0) + _small_batch(5)
    first = read_batch_header(data)
    second = read_batch_header(data, first.size)
    assert (second.base_offset, second.record_count, second.last_offset) == (5, 1, 5)
    assert second.last_sequence == -1 and second.compression is Compression.NONE


def test_last_sequence_wraps_like_kafka() -> None:
    builder = BatchBuilder()
    builder.append(0, None, b"a")
    builder.append(0, None, b"b")
    header = read_batch_header(builder.build(producer_id=1, base_sequence=2**31 - 1))
    assert header.last_sequence == 0


def test_wrong_magic_is_named() -> None:
    data = bytearray(_small_batch(0))
    data[16] = 1
    with pytest.raises(CorruptRecordError, match="magic 1"):
        list(decode_batches(data))
    with pytest.raises(CorruptRecordError, match="magic 1"):
        read_batch_header(data)


def test_impossible_batch_length_is_named() -> None:
    data = bytearray(_small_batch(0))
    struct.pack_into(">i", data, 8, 10)
    with pytest.raises(CorruptRecordError, match="batchLength 10"):
        list(decode_batches(data, allow_partial=True))


def test_set_base_offset_refuses_more_than_one_batch() -> None:
    with pytest.raises(CorruptRecordError, match="exactly one"):
        set_base_offset(_small_batch(0) * 2, 3)


@pytest.mark.parametrize("size", [0, 100, 20_000, 200_000])
def test_append_values_encodes_exactly_what_append_does(size: int) -> None:
    # Timestamps that go back and jump far (slow varints); a null value; offset deltas
    # past the varint table when the values are small.
    count = 3 if size > 10_000 else 17_000
    timestamps = [1_700_000_000_000 + (i * 7919) % 50_000 - 20_000 for i in range(count)]
    values: list[bytes | None] = [bytes([i % 251]) * size for i in range(count)]
    values[1] = None
    one_by_one = BatchBuilder()
    one_by_one.append(5, b"k", b"first")
    bulk = BatchBuilder()
    bulk.append(5, b"k", b"first")
    for timestamp, value in zip(timestamps, values, strict=True):
        one_by_one.append(timestamp, None, value)
    bulk.append_values(timestamps, values)
    assert bulk.record_count == one_by_one.record_count == count + 1
    assert bulk.build(base_sequence=3) == one_by_one.build(base_sequence=3)
    [batch] = decode_batches(bulk.build())
    assert [r.value for r in batch.records[1:]] == values


@pytest.mark.parametrize(("size", "key_size"), [(0, 3), (100, 20), (20_000, 70), (100, 9_000)])
def test_append_keyed_values_encodes_exactly_what_append_does(size: int, key_size: int) -> None:
    count = 3 if max(size, key_size) > 5_000 else 17_000
    timestamps = [1_700_000_000_000 + (i * 7919) % 50_000 - 20_000 for i in range(count)]
    values: list[bytes | None] = [bytes([i % 251]) * size for i in range(count)]
    keys: list[bytes | None] = [bytes([i % 13]) * key_size for i in range(count)]
    values[1] = keys[2] = None
    keys[0] = values[0] = None
    one_by_one = BatchBuilder()
    one_by_one.append(5, b"k", b"first", [("h", b"v")])
    bulk = BatchBuilder()
    bulk.append(5, b"k", b"first", [("h", b"v")])
    for timestamp, key, value in zip(timestamps, keys, values, strict=True):
        one_by_one.append(timestamp, key, value)
    bulk.append_keyed_values(timestamps, keys, values)
    assert bulk.record_count == one_by_one.record_count == count + 1
    assert bulk.build(base_sequence=3) == one_by_one.build(base_sequence=3)
    [batch] = decode_batches(bulk.build())
    assert [(r.key, r.value) for r in batch.records[1:]] == list(zip(keys, values, strict=True))


@pytest.mark.parametrize(
    ("count", "value_size", "vary", "none_at"),
    [
        (9_000, 100, 0, -1),
        (70, 0, 0, -1),
        (200, 70, 50, -1),
        (200, 40, 50, -1),
        (5, 16_380, 0, -1),
        (300, 40, 0, 150),
        (6, 3, 0, -1),
    ],
)
def test_append_keyed_values_of_one_timestamp_encodes_exactly_what_append_does(
    count: int, value_size: int, vary: int, none_at: int
) -> None:
    # One timestamp (a load's batch) takes the layout without a step per record: keys
    # of several lengths, values of one length or of several (`vary`), offset deltas
    # past 64 and 8,192 (wider varints). Lengths of two varint widths, a record past
    # the varint table and a None key fall back to the loop.
    timestamp = 1_700_000_000_123
    keys: list[bytes | None] = [b"key-%d" % (i * 7919 % 100_003) for i in range(count)]
    values: list[bytes | None] = [
        bytes([i % 251]) * (value_size + (i * 31 % vary if vary else 0)) for i in range(count)
    ]
    if none_at >= 0:
        keys[none_at] = None
    one_by_one = BatchBuilder()
    one_by_one.append(timestamp - 5, b"k", b"first", [("h", b"v")])
    bulk = BatchBuilder()
    bulk.append(timestamp - 5, b"k", b"first", [("h", b"v")])
    for key, value in zip(keys, values, strict=True):
        one_by_one.append(timestamp, key, value)
    bulk.append_keyed_values([timestamp] * count, keys, values)
    assert bulk.record_count == one_by_one.record_count == count + 1
    assert bulk.size_in_bytes() == one_by_one.size_in_bytes()
    assert bulk.build(base_sequence=3) == one_by_one.build(base_sequence=3)


@pytest.mark.parametrize(
    "steps", [(0, 3_000, 1), (0, 40, 90, 1), (0, 5, -1), (0, 2), tuple(range(0, 3_000, 3))]
)
def test_append_keyed_values_in_runs_of_one_timestamp_encodes_what_append_does(
    steps: tuple[int, ...],
) -> None:
    # Runs of one timestamp each (the producer's bulk sends into one batch) are laid out
    # run by run; a timestamp below the batch's first and runs of fewer than 16 records
    # on average take the loop.
    count = 3_000
    timestamps = [1_700_000_000_000 + steps[i * len(steps) // count] for i in range(count)]
    keys: list[bytes | None] = [b"key-%d" % (i * 7919 % 100_003) for i in range(count)]
    values: list[bytes | None] = [bytes([i % 251]) * 100 for i in range(count)]
    one_by_one = BatchBuilder()
    bulk = BatchBuilder()
    for key, value, timestamp in zip(keys, values, timestamps, strict=True):
        one_by_one.append(timestamp, key, value)
    bulk.append_keyed_values(timestamps, keys, values)
    assert bulk.record_count == one_by_one.record_count == count
    assert bulk.build(base_sequence=3) == one_by_one.build(base_sequence=3)


def test_append_keyed_values_refuses_lists_of_other_lengths() -> None:
    with pytest.raises(ValueError, match="2 timestamps and 1 keys for 2 values"):
        BatchBuilder().append_keyed_values([1, 2], [b"k"], [b"a", b"b"])


def test_append_values_on_an_empty_builder_sets_the_base_and_max_timestamps() -> None:
    builder = BatchBuilder()
    builder.append_values([20, 10, 30], [b"a", b"b", b"c"])
    [batch] = decode_batches(builder.build())
    assert (batch.base_timestamp, batch.max_timestamp) == (20, 30)
    assert [r.timestamp for r in batch.records] == [20, 10, 30]


@settings(max_examples=300, deadline=None)
@given(
    count=st.integers(1, 9_000),
    length=st.sampled_from([0, 1, 100, 16_300, 17_000, -1]),
    prefix=st.integers(0, 70),
    steps=st.lists(
        st.tuples(st.integers(0, 8_999), st.sampled_from([0, 1, 63, 64, 20_000])), max_size=6
    ),
    seed=st.integers(0, 2**32 - 1),
)
def test_append_runs_encodes_exactly_what_append_values_does(
    count: int, length: int, prefix: int, steps: list[tuple[int, int]], seed: int
) -> None:
    # Fixed-length values take the sliced layout, others (length -1: mixed, with a
    # null) the per-record path; runs of one millisecond start anywhere, timestamps
    # jump past the varint table; records appended before shift the offset deltas
    # across the varint width boundaries (64, 8192) and past the table.
    rng = random.Random(seed)
    if length < 0:
        values: list[bytes | None] = [b"v" * rng.randrange(300) for _ in range(count)]
        values[rng.randrange(count)] = None
    else:
        values = [bytes([rng.randrange(256)]) * length for _ in range(count)]
    base = 1_700_000_000_000
    starts = sorted({0, *(at % count for at, _ in steps)})
    run_ms = [base]
    for _ in starts[1:]:
        run_ms.append(run_ms[-1] + rng.choice([1, 63, 64, 20_000]))
    timestamps: list[int] = []
    for start, stop, ms in zip(starts, [*starts[1:], count], run_ms, strict=True):
        timestamps += [ms] * (stop - start)
    runs, flat = BatchBuilder(), BatchBuilder()
    for builder in (runs, flat):
        for i in range(prefix):
            builder.append(base - 3 + i % 5, None, b"p")
    runs.append_runs(starts, run_ms, values)
    flat.append_values(timestamps, values)
    assert runs.build(base_sequence=9) == flat.build(base_sequence=9)


def test_append_runs_refuses_runs_that_do_not_start_at_zero() -> None:
    with pytest.raises(ValueError, match="run_starts"):
        BatchBuilder().append_runs([1], [5], [b"a", b"b"])
