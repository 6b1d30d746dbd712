"""Record batch v2 compression: round trips, Kafka's framings, other clients' batches."""

from __future__ import annotations

import struct
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_kafka.errors import ConfigError, CorruptRecordError, UnsupportedCodecError
from trio_kafka.records import (
    BatchBuilder,
    Compression,
    ControlType,
    build_control_batch,
    decode_batches,
    parse_control_record,
    read_batch_header,
    verify_batch_crc,
)
from trio_kafka.records._codecs import compress, decompress

optional_bytes = st.none() | st.binary(max_size=200)
headers = st.lists(st.tuples(st.text(max_size=8), optional_bytes), max_size=3)
records = st.lists(
    st.tuples(st.integers(0, 2**42), optional_bytes, optional_bytes, headers),
    min_size=1,
    max_size=20,
)


@pytest.mark.parametrize("codec", list(Compression))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=records, producer_id=st.integers(-1, 2**63 - 1))
def test_round_trip_with_every_codec(codec: Compression, records, producer_id) -> None:  # type: ignore[no-untyped-def]
    builder = BatchBuilder(codec)
    for timestamp, key, value, hdrs in records:
        builder.append(timestamp, key, value, hdrs)
    data = builder.build(base_offset=3, producer_id=producer_id, producer_epoch=1)
    [batch] = decode_batches(data)
    assert batch.compression is codec
    assert batch.producer_id == producer_id
    assert batch.base_timestamp == records[0][0]
    assert batch.max_timestamp == max(r[0] for r in records)
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch.records] == [
        (3 + i, ts, k, v, h) for i, (ts, k, v, h) in enumerate(records)
    ]


def _values() -> list[bytes]:
    return [b"value number %05d " % i * 5 for i in range(2_000)]


def _build(codec: Compression, level: int | None = None) -> bytes:
    builder = BatchBuilder(codec, level)
    for value in _values():
        builder.append(0, None, value)
    return builder.build()


def test_gzip_uses_the_gzip_file_format() -> None:
    assert _build(Compression.GZIP)[61:63] == b"\x1f\x8b"


def test_zstd_writes_a_zstd_frame() -> None:
    assert _build(Compression.ZSTD)[61:65] == b"\x28\xb5\x2f\xfd"


def test_lz4_writes_an_lz4_frame_with_independent_blocks() -> None:
    section = _build(Compression.LZ4)[61:]
    assert section[:4] == b"\x04\x22\x4d\x18"
    flags = section[4]
    assert flags >> 6 == 1  # frame version 01
    assert flags & 0x20  # block independence: Java's reader refuses linked blocks
    assert not flags & 0x08  # no content size


def test_snappy_uses_xerial_framing_in_32k_blocks() -> None:
    section = _build(Compression.SNAPPY)[61:]
    assert section[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    (first_block,) = struct.unpack_from(">i", section, 16)
    assert 0 < first_block < 32 * 1024
    assert len(_values()) * 90 > 64 * 1024  # so there really are several blocks


def test_raw_snappy_as_librdkafka_may_send_is_read() -> None:
    import cramjam

    plain = b"hello " * 100
    assert decompress(Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(plain))) == plain


def test_concatenated_gzip_members_and_zstd_frames_are_read() -> None:
    plain = b"abc" * 100
    for codec in (Compression.GZIP, Compression.ZSTD):
        level = 1 if codec is Compression.ZSTD else 6
        doubled = compress(codec, plain, level) + compress(codec, plain, level)
        assert decompress(codec, doubled) == plain * 2


def test_zstd_frame_without_content_size_is_read() -> None:
    import zstandard

    compressor = zstandard.ZstdCompressor(write_content_size=False)
    plain = b"no size " * 100
    assert decompress(Compression.ZSTD, compressor.compress(plain)) == plain


@pytest.mark.parametrize(
    ("codec", "level"),
    [(Compression.GZIP, 1), (Compression.GZIP, 9), (Compression.ZSTD, 1), (Compression.ZSTD, 19),
     (Compression.ZSTD, -5), (Compression.LZ4, 1), (Compression.LZ4, 17)],
)  # fmt: skip
def test_levels_within_range_round_trip(codec: Compression, level: int) -> None:
    [batch] = decode_batches(_build(codec, level))
    assert [r.value for r in batch.records] == _values()


def test_higher_levels_compress_better() -> None:
    assert len(_build(Compression.ZSTD, 19)) < len(_build(Compression.ZSTD, 1))
    assert len(_build(Compression.GZIP, 9)) <= len(_build(Compression.GZIP, 1))


@pytest.mark.parametrize(
    ("codec", "level"),
    [(Compression.GZIP, 10), (Compression.GZIP, -2), (Compression.ZSTD, 23),
     (Compression.LZ4, 0), (Compression.LZ4, 18), (Compression.SNAPPY, 1), (Compression.NONE, 1)],
)  # fmt: skip
def test_levels_out_of_range_are_config_errors(codec: Compression, level: int) -> None:
    with pytest.raises(ConfigError, match=str(level)):
        BatchBuilder(codec, level)


def test_missing_cramjam_fails_only_when_snappy_or_lz4_is_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    snappy_batch = _build(Compression.SNAPPY)
    monkeypatch.setitem(sys.modules, "cramjam", None)  # makes `import cramjam` fail
    assert list(decode_batches(_build(Compression.ZSTD)))
    for codec in (Compression.SNAPPY, Compression.LZ4):
        builder = BatchBuilder(codec)
        builder.append(0, None, b"x")
        with pytest.raises(UnsupportedCodecError, match="cramjam"):
            builder.build()
    with pytest.raises(UnsupportedCodecError, match="cramjam"):
        list(decode_batches(snappy_batch))


def test_unknown_codec_bits_are_unsupported() -> None:
    data = bytearray(_build(Compression.NONE))
    data[22] |= 0x07
    with pytest.raises(UnsupportedCodecError, match="codec 7"):
        read_batch_header(data)


@pytest.mark.parametrize("codec", [c for c in Compression if c is not Compression.NONE])
def test_garbage_compressed_section_is_a_corrupt_record_error(codec: Compression) -> None:
    with pytest.raises(CorruptRecordError, match=codec.name.lower()):
        decompress(codec, b"\x82SNAPPY\x00\x00\x00\x00\x01garbage" * 3)


# --- other clients' codecs ---------------------------------------------------------------


@pytest.mark.parametrize("codec", list(Compression))
def test_aiokafka_reads_our_batches(codec: Compression) -> None:
    from aiokafka.record.default_records import _DefaultRecordBatchPy

    data = _build(codec)
    theirs = _DefaultRecordBatchPy(bytearray(data))
    assert theirs.validate_crc()
    assert theirs.compression_type == codec
    assert [r.value for r in theirs] == _values()


@pytest.mark.parametrize("codec", list(Compression))
def test_we_read_aiokafka_batches(codec: Compression) -> None:
    from aiokafka.record.default_records import _DefaultRecordBatchBuilderPy

    builder = _DefaultRecordBatchBuilderPy(2, int(codec), 0, 9, 1, 0, batch_size=1 << 24)
    for i, value in enumerate(_values()):
        builder.append(i, 1_000 + i, b"k", value, [("h", b"v")])
    data = bytes(builder.build())
    assert verify_batch_crc(data)
    [batch] = decode_batches(data)
    assert batch.compression is codec
    assert [r.value for r in batch.records] == _values()
    assert batch.records[-1].timestamp == 1_000 + len(_values()) - 1
    assert batch.records[0].headers == (("h", b"v"),)


# --- control batches ---------------------------------------------------------------------


@pytest.mark.parametrize("control_type", list(ControlType))
def test_control_batch_round_trip(control_type: ControlType) -> None:
    data = build_control_batch(
        control_type, producer_id=12, producer_epoch=3, base_offset=40, timestamp_ms=777,
        coordinator_epoch=5, partition_leader_epoch=2,
    )  # fmt: skip
    [batch] = decode_batches(data)
    assert batch.is_control and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (12, 3, -1)
    assert (batch.base_offset, batch.partition_leader_epoch, batch.max_timestamp) == (40, 2, 777)
    [record] = batch.records
    assert record.key == struct.pack(">hh", 0, control_type)
    assert record.value == struct.pack(">hi", 0, 5)
    marker = parse_control_record(record)
    assert (marker.type, marker.coordinator_epoch) == (control_type, 5)


def test_aiokafka_sees_our_control_batch() -> None:
    from aiokafka.record.default_records import _DefaultRecordBatchPy

    data = build_control_batch(ControlType.ABORT, producer_id=1, producer_epoch=0, timestamp_ms=0)
    theirs = _DefaultRecordBatchPy(bytearray(data))
    assert theirs.validate_crc() and theirs.is_control_batch and theirs.is_transactional


def test_malformed_control_records_are_corrupt() -> None:
    from trio_kafka.records import Record

    for key, value in [
        (None, b"\x00" * 6),
        (b"\x00", b"\x00" * 6),
        (b"\x00\x00\x00\x09", b"\x00" * 6),
        (b"\xff\xff\x00\x00", b"\x00" * 6),
        (b"\x00\x00\x00\x01", b"\x00"),
    ]:
        with pytest.raises(CorruptRecordError):
            parse_control_record(Record(0, 0, key, value))
