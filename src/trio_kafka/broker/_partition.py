"""One partition as its leader sees it: validating and appending produced batches.

Theory of operation
-------------------
`Partition.produce` is the whole write path of a Produce request for one partition, pure
(time is `now_ms`). It checks, in this order, and stops at the first failure with nothing
appended:

1. the bytes: exactly one v2 batch whose batchLength matches, whose CRC matches, that is
   not a control batch and whose record count agrees with its lastOffsetDelta
   (CORRUPT_MESSAGE, or INVALID_RECORD for several batches or a control batch); then its
   records, decompressed and read by their length prefixes, must add up to the batch
   (INVALID_RECORD; UNKNOWN_SERVER_ERROR for records that do not decompress, as Kafka
   answers: `record_framing_error`);
2. its size against the topic's `max.message.bytes` (MESSAGE_TOO_LARGE);
3. for an idempotent batch (producer id >= 0), the producer state (`_producer_state`):
   an older epoch, a duplicate (answered with its original offsets, success, nothing
   appended), a sequence gap, an unknown producer;
4. for a transactional batch opening a transaction on this partition, the coordinator's
   verification (passed in as `verify_txn`; before the producer state, as Kafka verifies
   before it appends), and for a non-transactional batch, that its producer has no
   transaction open here (INVALID_TXN_STATE);
5. the CAS check when the topic enables it (`expected.offset.check.enable`): the batch's
   baseOffset is the expected offset, -1 for none; anything else must equal the log end
   offset (EXPECTED_OFFSET_MISMATCH, with the log end offset in the answer). Dedup comes
   before CAS, so a retried batch that landed gets its offset, not a mismatch.

Then the batch is stamped (offsets, and the broker's clock under LogAppendTime), appended,
and its sequence recorded. `write_marker` appends a transaction's COMMIT or ABORT control
batch and closes the transaction on this partition.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from trio_kafka.broker._log import PartitionLog
from trio_kafka.broker._producer_state import ProducerStateTable, Verdict
from trio_kafka.broker._topics import DEFAULT_TIMESTAMP_BEFORE_MAX_MS, TopicConfig
from trio_kafka.errors import CorruptRecordError, ErrorCode
from trio_kafka.records import (
    HEADER_SIZE,
    ControlType,
    build_control_batch,
    decode_batches,
    read_batch_header,
    record_framing_error,
    set_log_append_time,
    verify_batch_crc,
    whole_batches,
)


@attrs.frozen
class ProduceOutcome:
    """How one partition answered one batch (the fields of PartitionProduceResponse)."""

    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    duplicate: bool = False
    # (batch index, why) of each record refused (KIP-467: Produce v8+ record_errors).
    record_errors: tuple[tuple[int, str], ...] = ()


@attrs.define(eq=False)
class Partition:
    """A partition's log, its producers' state, and the broker that leads it."""

    topic: str
    index: int
    # Node id of the leader; handlers answer NOT_LEADER_OR_FOLLOWER on any other broker.
    leader: int
    leader_epoch: int = 0
    log: PartitionLog = attrs.field(factory=PartitionLog)
    producers: ProducerStateTable = attrs.field(factory=ProducerStateTable)

    def epoch_error(self, current_leader_epoch: int) -> ErrorCode | None:
        """What a Fetch or ListOffsets naming the leader epoch it believes current (KIP-320;
        -1: none) gets before anything is read: FENCED_LEADER_EPOCH for an older one,
        UNKNOWN_LEADER_EPOCH for a newer one, as Kafka answers (conformance test)."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return None
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ErrorCode.UNKNOWN_LEADER_EPOCH

    def _fail(self, error: ErrorCode, message: str) -> ProduceOutcome:
        """A refusal from the log's checks (producer state, batch validation): Kafka
        answers those with the partition's log start offset."""
        return ProduceOutcome(error, message, -1, -1, self.log.log_start_offset)

    def _refused_records(
        self, data: bytes, config: TopicConfig, now_ms: int, check_times: bool
    ) -> ProduceOutcome | None:
        """Records Kafka's LogValidator refuses for what they hold, each named, their
        batch refused whole (KIP-467): one without a key for a compacted topic
        (INVALID_RECORD), and with `check_times` a CreateTime timestamp further from the
        broker's clock than the topic allows (INVALID_TIMESTAMP; -1, none, passes). The
        batch is decoded once, only when a check applies."""
        records = next(decode_batches(data)).records
        if config.compacted:
            why = (
                "Compacted topic cannot accept message without key in topic partition "
                f"{self.topic}-{self.index}"
            )
            keyless = tuple((i, why) for i, record in enumerate(records) if record.key is None)
            if keyless:
                return self._refuse_records(ErrorCode.INVALID_RECORD, keyless)
        if check_times:
            low = now_ms - config.timestamp_before_max_ms
            high = now_ms + config.timestamp_after_max_ms
            late = tuple(
                (
                    i,
                    f"Timestamp {record.timestamp} of message with offset {record.offset} is "
                    f"out of range. The timestamp should be within [{low}, {high}]",
                )
                for i, record in enumerate(records)
                if record.timestamp != -1 and not low <= record.timestamp <= high
            )
            if late:
                return self._refuse_records(ErrorCode.INVALID_TIMESTAMP, late)
        return None

    def _refuse_records(
        self, error: ErrorCode, refused: tuple[tuple[int, str], ...]
    ) -> ProduceOutcome:
        """A batch refused for the records named in `refused`, with Kafka's top-level
        message."""
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{why}')" for i, why in refused[:3])
        message = (
            f"One or more records have been rejected due to {len(refused)} record errors in "
            f"total, and only showing the first three errors at most: [{shown}]"
        )
        return attrs.evolve(self._fail(error, message), record_errors=refused)

    @staticmethod
    def _refuse(error: ErrorCode, message: str) -> ProduceOutcome:
        """A refusal before the log is consulted (size, corruption, the transaction's
        verification): Kafka answers those without offsets (UNKNOWN_LOG_APPEND_INFO,
        log start offset -1; conformance test)."""
        return ProduceOutcome(error, message, -1, -1, -1)

    def produce(
        self,
        data: bytes | None,
        config: TopicConfig,
        now_ms: int,
        *,
        verify_txn: Callable[[int, int], ErrorCode] | None = None,
    ) -> ProduceOutcome:
        try:
            batches, end = whole_batches(data or b"")
        except CorruptRecordError as exc:
            return self._refuse(ErrorCode.CORRUPT_MESSAGE, f"corrupt record batch: {exc}")
        if batches != 1:
            return self._refuse(
                ErrorCode.INVALID_RECORD,
                "Produce requests with version 3+ must have at least one record batch per partition"
                if not batches
                else "Produce requests with version 3+ must contain exactly one record batch",
            )
        assert data is not None
        data = data[:end]  # (bytes after the batch too few to frame another are ignored)
        if data[16] != 2:
            return self._refuse(
                ErrorCode.INVALID_RECORD,
                "Produce requests with version 3+ are only allowed to contain record batches "
                "with magic version 2",
            )
        if len(data) > config.max_message_bytes:
            return self._refuse(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"batch of {len(data)} bytes exceeds max.message.bytes={config.max_message_bytes}",
            )
        try:
            header = read_batch_header(data)  # (one whole batch: `whole_batches`)
            if not verify_batch_crc(data):
                raise CorruptRecordError(f"CRC mismatch (header says {header.crc:#010x})")
        except CorruptRecordError as exc:
            return self._refuse(ErrorCode.CORRUPT_MESSAGE, f"corrupt record batch: {exc}")
        if header.is_control:
            return self._fail(ErrorCode.INVALID_RECORD, "clients may not produce control batches")
        if header.producer_id >= 0 and header.base_sequence < 0:
            return self._fail(
                ErrorCode.INVALID_RECORD,
                f"Invalid sequence number {header.base_sequence} in record batch with "
                f"producerId {header.producer_id}",
            )
        # Kafka's LogValidator on a client's batch: INVALID_RECORD (conformance test).
        if header.last_offset_delta < 0:
            return self._fail(
                ErrorCode.INVALID_RECORD,
                f"Batch has an invalid offset range: lastOffsetDelta {header.last_offset_delta}",
            )
        if header.record_count <= 0:
            return self._fail(
                ErrorCode.INVALID_RECORD,
                f"Invalid reported count for record batch: {header.record_count}",
            )
        if header.record_count != header.last_offset_delta + 1:
            return self._fail(
                ErrorCode.INVALID_RECORD,
                f"Inconsistent batch offset range (lastOffsetDelta {header.last_offset_delta}) "
                f"and count of records {header.record_count}",
            )
        if len(data) == HEADER_SIZE and header.record_count:
            return self._fail(ErrorCode.CORRUPT_MESSAGE, "batch has a record count but no records")
        wrong = record_framing_error(data)
        if wrong is not None:
            decompressed, why = wrong
            if not decompressed:  # Kafka's decompression fails unexpectedly
                return self._fail(ErrorCode.UNKNOWN_SERVER_ERROR, why)
            return self._fail(ErrorCode.INVALID_RECORD, f"invalid record batch: {why}")
        check_times = not config.log_append_time and (
            header.max_timestamp > now_ms + config.timestamp_after_max_ms
            or config.timestamp_before_max_ms < DEFAULT_TIMESTAMP_BEFORE_MAX_MS
        )
        if config.compacted or check_times:
            refusal = self._refused_records(data, config, now_ms, check_times)
            if refusal is not None:
                return refusal

        pid, epoch, seq = header.producer_id, header.producer_epoch, header.base_sequence
        idempotent = pid >= 0
        if header.is_transactional and not idempotent:
            return self._fail(
                ErrorCode.INVALID_PRODUCER_ID_MAPPING, "transactional batch without a producer id"
            )
        if idempotent:
            open_first = self.log.open_transaction_first_offset(pid)
            if header.is_transactional and open_first is None and verify_txn is not None:
                # Kafka verifies a batch that would open a transaction here with the
                # coordinator before its log sees it (KIP-890 part 1), so a fenced or
                # timed-out producer gets the coordinator's answer, not the log's.
                error = verify_txn(pid, epoch)
                if error is not ErrorCode.NONE:
                    return self._refuse(
                        error,
                        f"producer {pid} epoch {epoch} has no open transaction "
                        f"including {self.topic}-{self.index}",
                    )
            check = self.producers.check(pid, epoch, seq, header.record_count)
            match check.verdict:
                case Verdict.REJECT:
                    return self._fail(check.error, check.message)
                case Verdict.DUPLICATE:
                    assert check.duplicate is not None
                    return ProduceOutcome(
                        base_offset=check.duplicate.first_offset,
                        log_append_time_ms=check.duplicate.timestamp_ms
                        if config.log_append_time
                        else -1,
                        log_start_offset=self.log.log_start_offset,
                        duplicate=True,
                    )
                case Verdict.APPEND:
                    pass
            if not header.is_transactional and open_first is not None:
                return self._fail(
                    ErrorCode.INVALID_TXN_STATE,
                    f"producer {pid} sent a non-transactional batch inside its transaction",
                )

        if config.expected_offset_check and header.base_offset != -1:
            leo = self.log.log_end_offset
            if header.base_offset != leo:
                return ProduceOutcome(
                    ErrorCode.EXPECTED_OFFSET_MISMATCH,
                    f"expected offset {header.base_offset} but the log end offset of "
                    f"{self.topic}-{self.index} is {leo}",
                    leo,
                    -1,
                    self.log.log_start_offset,
                )

        append_time = -1
        max_timestamp = header.max_timestamp
        if config.log_append_time:
            data = set_log_append_time(data, now_ms)
            append_time = max_timestamp = now_ms
        stored = self.log.append(
            data,
            record_count=header.record_count,
            producer_id=pid,
            producer_epoch=epoch,
            is_transactional=header.is_transactional,
            max_timestamp=max_timestamp,
        )
        if idempotent:
            self.producers.record(
                pid,
                epoch,
                seq,
                first_offset=stored.base_offset,
                last_offset=stored.last_offset,
                now_ms=append_time if config.log_append_time else now_ms,
            )
        return ProduceOutcome(
            base_offset=stored.base_offset,
            log_append_time_ms=append_time,
            log_start_offset=self.log.log_start_offset,
        )

    def write_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        *,
        commit: bool,
        coordinator_epoch: int,
        now_ms: int,
    ) -> ErrorCode:
        """Append a COMMIT or ABORT marker for `producer_id` and close its transaction."""
        error = self.producers.marker_epoch_error(producer_id, producer_epoch)
        if error is not ErrorCode.NONE:
            return error
        data = build_control_batch(
            ControlType.COMMIT if commit else ControlType.ABORT,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            timestamp_ms=now_ms,
            coordinator_epoch=coordinator_epoch,
        )
        stored = self.log.append(
            data,
            record_count=1,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            is_transactional=True,
            is_control=True,
            max_timestamp=now_ms,
        )
        self.log.end_transaction(producer_id, marker_offset=stored.base_offset, committed=commit)
        self.producers.record_marker(producer_id, producer_epoch, coordinator_epoch)
        return ErrorCode.NONE
