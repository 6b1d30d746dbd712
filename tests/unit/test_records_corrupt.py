"""Bad input to every record decoder: only CorruptRecordError ever comes out."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit._outcome import value_or_refusal
from trio_kafka.errors import CorruptRecordError
from trio_kafka.records import (
    BatchBuilder,
    Compression,
    ControlType,
    build_control_batch,
    decode_batches,
    parse_control_record,
    read_batch_header,
    set_log_append_time,
    verify_batch_crc,
)
from trio_kafka.records._control import ControlRecord
from trio_kafka.records._decoder import BatchHeader, set_base_offset

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _sample(codec: Compression) -> bytes:
    builder = BatchBuilder(codec)
    builder.append(1_000, b"key", b"value " * 10, [("h", b"v"), ("n", None)])
    builder.append(1_002, None, None)
    builder.append(900, b"k" * 200, b"", [("\u00e9", b"x" * 130)])
    return builder.build(producer_id=3, producer_epoch=1, base_sequence=0)


SAMPLES = [_sample(codec) for codec in Compression] + [
    build_control_batch(ControlType.COMMIT, producer_id=3, producer_epoch=1, timestamp_ms=5),
]


def _fix_crc(data: bytearray) -> bytes:
    """Recompute the CRC so that the damage reaches the record parser and the codecs."""
    if len(data) >= 21:
        struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def _exercise(data: bytes) -> list[object]:
    """Feed `data` to every decoder and return what each gave: a value or the refusal.

    Anything but `CorruptRecordError` propagates and fails the test.
    """
    outcomes: list[object] = []
    for verify in (True, False):
        for partial in (True, False):
            batches = value_or_refusal(
                lambda v=verify, p=partial: list(
                    decode_batches(data, verify_crc=v, allow_partial=p)
                ),
                CorruptRecordError,
            )
            outcomes.append(batches)
            if isinstance(batches, list):
                for batch in batches:
                    if batch.is_control:
                        outcomes.extend(
                            value_or_refusal(
                                lambda r=r: parse_control_record(r), CorruptRecordError
                            )
                            for r in batch.records
                        )
    for call in (
        lambda: read_batch_header(data),
        lambda: read_batch_header(data, 3),
        lambda: verify_batch_crc(data),
        lambda: set_base_offset(data, 5),
        lambda: set_log_append_time(data, 5),
    ):
        outcomes.append(value_or_refusal(call, CorruptRecordError))
    return outcomes


def _only_values_or_refusals(outcomes: list[object]) -> bool:
    expected = (list, bytes, bool, BatchHeader, ControlRecord, CorruptRecordError)
    return bool(outcomes) and all(isinstance(o, expected) for o in outcomes)


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes(data: bytes) -> None:
    assert _only_values_or_refusals(_exercise(data))


@FUZZ
@given(st.sampled_from(SAMPLES), st.data())
def test_truncated_batches(sample: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(sample) - 1))
    assert _only_values_or_refusals(_exercise(sample[:cut]))
    assert _only_values_or_refusals(_exercise(_fix_crc(bytearray(sample[:cut]))))
    if cut >= 61:
        with pytest.raises(CorruptRecordError, match="truncated"):
            list(decode_batches(sample[:cut]))
        assert list(decode_batches(sample + sample[:cut], allow_partial=True))


@FUZZ
@given(st.sampled_from(SAMPLES), st.data())
def test_bit_flips(sample: bytes, data: st.DataObject) -> None:
    damaged = bytearray(sample)
    for _ in range(data.draw(st.integers(1, 4))):
        bit = data.draw(st.integers(0, len(damaged) * 8 - 1))
        damaged[bit // 8] ^= 1 << (bit % 8)
    assert _only_values_or_refusals(_exercise(bytes(damaged)))
    assert _only_values_or_refusals(_exercise(_fix_crc(damaged)))


@FUZZ
@given(st.sampled_from(SAMPLES), st.data())
def test_flips_in_the_record_section_are_caught_by_the_crc(
    sample: bytes, data: st.DataObject
) -> None:
    damaged = bytearray(sample)
    bit = data.draw(st.integers(21 * 8, len(damaged) * 8 - 1))
    damaged[bit // 8] ^= 1 << (bit % 8)
    assert not verify_batch_crc(damaged)
    with pytest.raises(CorruptRecordError):
        list(decode_batches(damaged))


@FUZZ
@given(st.sampled_from(SAMPLES), st.binary(min_size=1, max_size=40), st.data())
def test_spliced_garbage_in_the_record_section(
    sample: bytes, garbage: bytes, data: st.DataObject
) -> None:
    at = data.draw(st.integers(61, len(sample)))
    spliced = bytearray(sample[:at] + garbage + sample[at:])
    struct.pack_into(">i", spliced, 8, len(spliced) - 12)
    assert _only_values_or_refusals(_exercise(_fix_crc(spliced)))


def test_record_fields_overrunning_their_length_are_named() -> None:
    data = bytearray(_sample(Compression.NONE))
    data[61] += 2  # first record's length varint: claims two more bytes than it has
    with pytest.raises(CorruptRecordError, match=r"record 0 should end at byte \d+"):
        list(decode_batches(_fix_crc(data)))


def test_trailing_bytes_after_the_last_record_are_named() -> None:
    data = bytearray(_sample(Compression.NONE))
    struct.pack_into(">i", data, 57, 2)  # recordsCount 3 -> 2
    with pytest.raises(CorruptRecordError, match="follow the last of 2 records"):
        list(decode_batches(_fix_crc(data)))


def test_a_varint_longer_than_five_bytes_is_named() -> None:
    data = bytearray(_sample(Compression.NONE))
    data[62:67] = b"\xff" * 5  # the first record's attributes, then its timestamp delta run on
    data[61] = 0x80  # its length varint too: six bytes, each saying "more follows"
    with pytest.raises(CorruptRecordError, match=r"varint.* longer than 5 bytes"):
        list(decode_batches(_fix_crc(data)))
