"""The broker's idempotence and CAS rules, one behaviour per test (pure, no sockets)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests._batches import reframe
from trio_kafka.broker._partition import Partition
from trio_kafka.broker._producer_state import (
    DEDUP_WINDOW,
    ProducerStateTable,
    Verdict,
    increment_sequence,
)
from trio_kafka.broker._topics import TopicConfig, TopicConfigError
from trio_kafka.errors import ErrorCode
from trio_kafka.records import HEADER_SIZE, BatchBuilder, Compression, decode_batches

NOW = 1_700_000_000_000
PLAIN = TopicConfig()
CAS = TopicConfig(expected_offset_check=True)


def batch(
    n: int = 1,
    *,
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
    base_offset: int = 0,
    txn: bool = False,
    value: bytes = b"v",
) -> bytes:
    builder = BatchBuilder()
    for i in range(n):
        builder.append(NOW + i, None, value + str(i).encode())
    return builder.build(
        base_offset=base_offset,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
    )


def part() -> Partition:
    return Partition("t", 0, leader=0)


# -- plain appends ----------------------------------------------------------------------


def test_offsets_are_assigned_consecutively_and_stamped_into_the_batch() -> None:
    p = part()
    assert p.produce(batch(3), PLAIN, NOW).base_offset == 0
    assert p.produce(batch(2), PLAIN, NOW).base_offset == 3
    assert p.log.log_end_offset == 5
    stored = [b for s in p.log.batches for b in decode_batches(s.data)]
    assert [b.base_offset for b in stored] == [0, 3]
    assert [r.offset for b in stored for r in b.records] == [0, 1, 2, 3, 4]


def test_bad_crc_is_corrupt_message_and_appends_nothing() -> None:
    p = part()
    data = bytearray(batch(2))
    data[-1] ^= 0xFF
    out = p.produce(bytes(data), PLAIN, NOW)
    assert out.error is ErrorCode.CORRUPT_MESSAGE
    assert "CRC" in (out.message or "")
    assert p.log.log_end_offset == 0


def test_records_that_frame_no_whole_batch_are_refused_as_kafka_refuses_them() -> None:
    # Kafka's batch iterator stops at bytes too few for a whole batch: no batch at all
    # is INVALID_RECORD; a length below a record's overhead is CORRUPT_MESSAGE
    # (conformance scenario `produce_edges`).
    p = part()
    data = batch(2)
    assert p.produce(data[:-3], PLAIN, NOW).error is ErrorCode.INVALID_RECORD
    assert p.produce(b"\x00" * 10, PLAIN, NOW).error is ErrorCode.INVALID_RECORD
    assert p.produce(b"", PLAIN, NOW).error is ErrorCode.INVALID_RECORD
    assert p.produce(b"\x00" * 20, PLAIN, NOW).error is ErrorCode.CORRUPT_MESSAGE
    assert p.log.log_end_offset == 0
    # Bytes after a whole batch, too few to frame another, are ignored.
    assert p.produce(data + data[:11], PLAIN, NOW).error is ErrorCode.NONE
    assert p.log.log_end_offset == 2


def test_two_batches_in_one_partition_are_an_invalid_record() -> None:
    p = part()
    assert p.produce(batch(1) + batch(1), PLAIN, NOW).error is ErrorCode.INVALID_RECORD


CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_records_that_do_not_decompress_are_refused_as_kafka_refuses_them(
    codec: Compression,
) -> None:
    # Appended before, and every fetch of the partition then failed to decode.
    p = part()
    one = batch(1, pid=7, epoch=0, seq=0)
    out = p.produce(reframe(one, b"not any codec's output" * 3, codec=codec), PLAIN, NOW)
    assert out.error is ErrorCode.UNKNOWN_SERVER_ERROR
    assert "does not decompress" in (out.message or "")
    assert p.log.log_end_offset == 0
    assert p.produce(one, PLAIN, NOW).base_offset == 0  # its sequence 0 was not taken


@pytest.mark.parametrize(
    ("records", "count", "why"),
    [
        (lambda r: r[:-3], 2, "runs 3 bytes past the records"),
        (lambda r: r + b"\0\0", 0, "2 bytes follow the last of 2 records"),
        (lambda r: r, 3, "the records end before record 2 of 3"),
        (lambda r: b"\x02" + r[1:], 0, "record 0 has impossible length 1"),
    ],
    ids=["cut short", "bytes after", "fewer than the count", "impossible length"],
)
def test_records_that_do_not_add_up_to_the_batch_are_an_invalid_record(
    records: Callable[[bytes], bytes], count: int, why: str
) -> None:
    p = part()
    two = batch(2)
    out = p.produce(reframe(two, records(two[HEADER_SIZE:]), count=count), PLAIN, NOW)
    assert out.error is ErrorCode.INVALID_RECORD
    assert why in (out.message or "")
    assert p.log.log_end_offset == 0


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_compressed_batches_are_appended_and_read_back(codec: Compression) -> None:
    builder = BatchBuilder(codec)
    for i in range(300):
        builder.append(NOW, b"k%d" % i, b"value %d" % i, (("h", b"x"),))
    p = part()
    assert p.produce(builder.build(base_offset=0), PLAIN, NOW).error is ErrorCode.NONE
    stored = [r for s in p.log.batches for b in decode_batches(s.data) for r in b.records]
    assert [r.value for r in stored] == [b"value %d" % i for i in range(300)]


def test_a_record_too_far_from_the_brokers_clock_is_named_and_its_batch_refused() -> None:
    # Kafka 4: an hour ahead at most by default, and as far behind as the topic allows.
    builder = BatchBuilder()
    for timestamp in (NOW, NOW + 2 * 3_600_000, -1, NOW - 86_400_001):
        builder.append(timestamp, None, b"v")
    data = builder.build(base_offset=0)
    p = part()
    out = p.produce(data, PLAIN, NOW)
    assert out.error is ErrorCode.INVALID_TIMESTAMP
    assert [index for index, _ in out.record_errors] == [1]
    assert "out of range" in out.record_errors[0][1]
    strict = TopicConfig.from_configs({"message.timestamp.before.max.ms": "86400000"})
    assert [i for i, _ in p.produce(data, strict, NOW).record_errors] == [1, 3]
    lenient = TopicConfig.from_configs({}, after_max_ms=3 * 3_600_000)
    assert p.produce(data, lenient, NOW).error is ErrorCode.NONE
    assert p.produce(data, TopicConfig(log_append_time=True), NOW).error is ErrorCode.NONE


def test_max_message_bytes_gives_message_too_large() -> None:
    p = part()
    data = batch(1, value=b"x" * 200)
    out = p.produce(data, TopicConfig(max_message_bytes=len(data) - 1), NOW)
    assert out.error is ErrorCode.MESSAGE_TOO_LARGE
    assert p.produce(data, TopicConfig(max_message_bytes=len(data)), NOW).error is ErrorCode.NONE


def test_log_append_time_overwrites_the_timestamp() -> None:
    p = part()
    out = p.produce(batch(2), TopicConfig(log_append_time=True), NOW + 5000)
    assert out.log_append_time_ms == NOW + 5000
    (stored,) = decode_batches(p.log.batches[0].data)
    assert stored.max_timestamp == NOW + 5000
    assert all(r.timestamp == NOW + 5000 for r in stored.records)


# -- idempotence ------------------------------------------------------------------------


def test_duplicate_batch_is_answered_with_its_original_offset() -> None:
    p = part()
    p.produce(batch(1), PLAIN, NOW)
    first = batch(3, pid=7, epoch=0, seq=0)
    assert p.produce(first, PLAIN, NOW).base_offset == 1
    p.produce(batch(2, pid=7, epoch=0, seq=3), PLAIN, NOW)
    again = p.produce(first, PLAIN, NOW)
    assert again.error is ErrorCode.NONE
    assert again.duplicate
    assert again.base_offset == 1
    assert p.log.log_end_offset == 6


def test_the_dedup_window_holds_five_batches() -> None:
    p = part()
    batches = [batch(1, pid=7, epoch=0, seq=i) for i in range(DEDUP_WINDOW + 1)]
    for b in batches:
        p.produce(b, PLAIN, NOW)
    assert p.produce(batches[1], PLAIN, NOW).duplicate
    out = p.produce(batches[0], PLAIN, NOW)  # fell out of the window
    assert out.error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert p.log.log_end_offset == DEDUP_WINDOW + 1


def test_sequence_gap_is_out_of_order() -> None:
    p = part()
    p.produce(batch(2, pid=7, epoch=0, seq=0), PLAIN, NOW)
    out = p.produce(batch(1, pid=7, epoch=0, seq=3), PLAIN, NOW)
    assert out.error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert p.log.log_end_offset == 2


def test_overlapping_but_different_batch_is_out_of_order() -> None:
    p = part()
    p.produce(batch(3, pid=7, epoch=0, seq=0), PLAIN, NOW)
    out = p.produce(batch(2, pid=7, epoch=0, seq=0), PLAIN, NOW)
    assert out.error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_old_epoch_is_invalid_producer_epoch() -> None:
    p = part()
    p.produce(batch(1, pid=7, epoch=3, seq=0), PLAIN, NOW)
    out = p.produce(batch(1, pid=7, epoch=2, seq=1), PLAIN, NOW)
    assert out.error is ErrorCode.INVALID_PRODUCER_EPOCH


def test_new_epoch_must_start_at_sequence_zero() -> None:
    p = part()
    p.produce(batch(2, pid=7, epoch=0, seq=0), PLAIN, NOW)
    bad = p.produce(batch(1, pid=7, epoch=1, seq=2), PLAIN, NOW)
    assert bad.error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert p.produce(batch(1, pid=7, epoch=1, seq=0), PLAIN, NOW).base_offset == 2


def test_new_epoch_forgets_the_old_dedup_window() -> None:
    p = part()
    old = batch(1, pid=7, epoch=0, seq=0)
    p.produce(old, PLAIN, NOW)
    p.produce(batch(1, pid=7, epoch=1, seq=0), PLAIN, NOW)
    assert p.produce(old, PLAIN, NOW).error is ErrorCode.INVALID_PRODUCER_EPOCH


def test_unknown_producer_with_nonzero_sequence_is_unknown_producer_id() -> None:
    p = part()
    out = p.produce(batch(1, pid=9, epoch=0, seq=5), PLAIN, NOW)
    assert out.error is ErrorCode.UNKNOWN_PRODUCER_ID
    assert p.produce(batch(1, pid=9, epoch=0, seq=0), PLAIN, NOW).error is ErrorCode.NONE


def test_lenient_table_accepts_any_first_sequence_like_modern_kafka() -> None:
    table = ProducerStateTable(strict_unknown_producer=False)
    assert table.check(9, 0, 5, 1).verdict is Verdict.APPEND


def test_lenient_table_stores_a_later_batch_first_and_refuses_the_skipped_one() -> None:
    # Kafka 2.5+ (ProducerAppendInfo.checkSequence): with no state for the producer, its
    # first batch is stored whatever its sequence; the batches before it can then never
    # land. Why the producer sends a partition's first batch alone.
    table = ProducerStateTable(strict_unknown_producer=False)
    assert table.check(9, 0, 1, 1).verdict is Verdict.APPEND
    table.record(9, 0, 1, first_offset=0, last_offset=0, now_ms=NOW)
    assert table.check(9, 0, 0, 1).error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_lenient_table_still_wants_a_known_producers_new_epoch_at_zero() -> None:
    table = ProducerStateTable(strict_unknown_producer=False)
    table.record(9, 0, 0, first_offset=0, last_offset=0, now_ms=NOW)
    assert table.check(9, 1, 3, 1).error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert table.check(9, 1, 0, 1).verdict is Verdict.APPEND


def test_producers_are_independent() -> None:
    p = part()
    p.produce(batch(1, pid=1, epoch=0, seq=0), PLAIN, NOW)
    assert p.produce(batch(1, pid=2, epoch=0, seq=0), PLAIN, NOW).error is ErrorCode.NONE
    assert p.produce(batch(1, pid=1, epoch=0, seq=1), PLAIN, NOW).error is ErrorCode.NONE


def test_sequence_wraps_after_int32_max() -> None:
    assert increment_sequence(2**31 - 1, 1) == 0
    assert increment_sequence(2**31 - 2, 3) == 1
    table = ProducerStateTable()
    table.record(1, 0, 2**31 - 2, first_offset=0, last_offset=1, now_ms=NOW)
    assert table.check(1, 0, 0, 1).verdict is Verdict.APPEND
    assert table.check(1, 0, 1, 1).error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_marker_with_bumped_epoch_resets_sequences() -> None:
    p = part()
    p.produce(batch(2, pid=7, epoch=0, seq=0, txn=True), PLAIN, NOW)
    assert p.write_marker(7, 1, commit=False, coordinator_epoch=0, now_ms=NOW) is ErrorCode.NONE
    assert p.produce(batch(1, pid=7, epoch=0, seq=2, txn=True), PLAIN, NOW).error is (
        ErrorCode.INVALID_PRODUCER_EPOCH
    )
    assert p.produce(batch(1, pid=7, epoch=1, seq=1, txn=True), PLAIN, NOW).error is (
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    )
    assert p.produce(batch(1, pid=7, epoch=1, seq=0, txn=True), PLAIN, NOW).error is ErrorCode.NONE


def test_marker_from_an_older_epoch_is_producer_fenced() -> None:
    p = part()
    p.produce(batch(1, pid=7, epoch=4, seq=0, txn=True), PLAIN, NOW)
    assert p.write_marker(7, 3, commit=True, coordinator_epoch=0, now_ms=NOW) is (
        ErrorCode.PRODUCER_FENCED
    )


def test_transactional_batch_without_producer_id_is_refused() -> None:
    p = part()
    out = p.produce(batch(1, txn=True), PLAIN, NOW)
    assert out.error is ErrorCode.INVALID_PRODUCER_ID_MAPPING


def test_non_transactional_batch_inside_an_open_transaction_is_invalid_txn_state() -> None:
    p = part()
    p.produce(batch(1, pid=7, epoch=0, seq=0, txn=True), PLAIN, NOW)
    out = p.produce(batch(1, pid=7, epoch=0, seq=1), PLAIN, NOW)
    assert out.error is ErrorCode.INVALID_TXN_STATE


def test_transactional_batch_is_verified_with_the_coordinator_once_per_transaction() -> None:
    p = part()
    calls: list[tuple[int, int]] = []

    def verify(pid: int, epoch: int) -> ErrorCode:
        calls.append((pid, epoch))
        return ErrorCode.NONE

    p.produce(batch(1, pid=7, epoch=0, seq=0, txn=True), PLAIN, NOW, verify_txn=verify)
    p.produce(batch(1, pid=7, epoch=0, seq=1, txn=True), PLAIN, NOW, verify_txn=verify)
    assert calls == [(7, 0)]
    refused = p.produce(
        batch(1, pid=8, epoch=0, seq=0, txn=True),
        PLAIN,
        NOW,
        verify_txn=lambda _p, _e: ErrorCode.INVALID_TXN_STATE,
    )
    assert refused.error is ErrorCode.INVALID_TXN_STATE


# -- CAS -------------------------------------------------------------------------------


def test_cas_appends_at_the_expected_offset() -> None:
    p = part()
    assert p.produce(batch(2, base_offset=0), CAS, NOW).base_offset == 0
    assert p.produce(batch(1, base_offset=2), CAS, NOW).base_offset == 2


def test_cas_mismatch_appends_nothing_and_reports_the_log_end_offset() -> None:
    p = part()
    p.produce(batch(2, base_offset=0), CAS, NOW)
    out = p.produce(batch(1, base_offset=1), CAS, NOW)
    assert out.error is ErrorCode.EXPECTED_OFFSET_MISMATCH
    assert out.base_offset == 2
    assert "expected offset 1" in (out.message or "")
    assert p.log.log_end_offset == 2


def test_cas_minus_one_means_no_expectation() -> None:
    p = part()
    p.produce(batch(2, base_offset=0), CAS, NOW)
    assert p.produce(batch(1, base_offset=-1), CAS, NOW).base_offset == 2


def test_cas_zero_from_a_plain_client_mismatches_on_a_non_empty_cas_topic() -> None:
    p = part()
    p.produce(batch(1, base_offset=0), CAS, NOW)
    assert p.produce(batch(1, base_offset=0), CAS, NOW).error is ErrorCode.EXPECTED_OFFSET_MISMATCH


def test_base_offset_is_ignored_on_topics_without_cas() -> None:
    p = part()
    p.produce(batch(1), PLAIN, NOW)
    assert p.produce(batch(1, base_offset=77), PLAIN, NOW).base_offset == 1


def test_dedup_comes_before_cas() -> None:
    p = part()
    first = batch(2, pid=7, epoch=0, seq=0, base_offset=0)
    assert p.produce(first, CAS, NOW).base_offset == 0
    retry = p.produce(first, CAS, NOW)  # expected offset 0 now mismatches, but it's a dup
    assert retry.error is ErrorCode.NONE
    assert retry.base_offset == 0
    assert retry.duplicate


def test_cas_mismatch_does_not_consume_the_sequence() -> None:
    p = part()
    bad = p.produce(batch(1, pid=7, epoch=0, seq=0, base_offset=5), CAS, NOW)
    assert bad.error is ErrorCode.EXPECTED_OFFSET_MISMATCH
    assert p.produce(batch(1, pid=7, epoch=0, seq=0, base_offset=0), CAS, NOW).base_offset == 0


# -- topic configs ----------------------------------------------------------------------


def test_topic_configs_parse_and_refuse_bad_values() -> None:
    cfg = TopicConfig.from_configs(
        {
            "expected.offset.check.enable": "true",
            "max.message.bytes": "2048",
            "message.timestamp.type": "LogAppendTime",
            "retention.ms": "1000",
        }
    )
    assert cfg.expected_offset_check
    assert cfg.max_message_bytes == 2048
    assert cfg.log_append_time
    assert cfg.describe()["retention.ms"] == ("1000", False)
    for bad in (
        {"expected.offset.check.enable": "maybe"},
        {"max.message.bytes": "lots"},
        {"message.timestamp.type": "Now"},
        {"no.such.config": "1"},
    ):
        with pytest.raises(TopicConfigError):
            TopicConfig.from_configs(dict(bad))
