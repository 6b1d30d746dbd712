"""The planted bugs themselves: each class is the client's `Rules` with one decision
broken (sim/mutants.py names them, says what each breaks and hunts them). A run plants
one by building the client with it: `run_seed(..., rules=TimeoutNotWritten())` hands it
to every object the run's client builds, through `Harness` (core/_rules.py)."""

from __future__ import annotations

from typing import Any

from trio_kafka.core import (
    Action,
    Decision,
    MismatchSettler,
    PartitionSequence,
    ProducerBatch,
    ProducerCore,
    Rules,
    Sequencer,
    SequenceVerdict,
    SequencingPolicy,
    TransactionManager,
    TxnResult,
)
from trio_kafka.errors import (
    ConcurrentWriteError,
    DeliveryTimeoutError,
    ExpectedOffsetMismatchError,
    KafkaError,
    TransactionOutcomeUnknownError,
    error_for_code,
)


def _forget_sequence(core: ProducerCore, batch: ProducerBatch) -> None:
    """Take `batch` back to unsequenced (it gets a new sequence when drained again)."""
    sequencing = core.sequencing
    if isinstance(sequencing, Sequencer) and batch.base_sequence >= 0:
        sequencing.entry((batch.topic, batch.partition)).remove(batch)
    batch.base_sequence = -1
    batch.maybe_written = False


class TimeoutNotWritten(Rules):
    def lost_request(
        self, core: ProducerCore, batch: ProducerBatch, now: float, error: KafkaError
    ) -> Decision:
        _forget_sequence(core, batch)
        return core.retry_or_fail(batch, now, error, refresh=True)


class SameEpochOnUnknownProducer(Rules):
    def unknown_producer(
        self,
        sequencer: Sequencer,
        batch: ProducerBatch,
        entry: PartitionSequence,
        log_start_offset: int,
    ) -> SequenceVerdict:
        sequence = 0  # restart at 0, same epoch, no bump
        for unfinished in entry.inflight:
            unfinished.base_sequence = sequence
            unfinished.sequence_reset = True
            sequence += unfinished.record_count
        entry.next_sequence = sequence
        entry.last_acked_sequence = -1
        return SequenceVerdict.RETRY


class ResendAfterBump(Rules):
    def drop_on_rewrite(self, batch: ProducerBatch) -> bool:
        return False


class StaleEndTxn(Rules):
    def unknown_commit_outcome(
        self, manager: TransactionManager, error: KafkaError, now: float
    ) -> None:
        # No re-initialisation: the next transaction keeps this epoch. (Reaches into the
        # manager: the bug is a different end of the transaction than any it has.)
        pending = manager.pending_result
        manager.finish_transaction()
        manager.pending_result = None
        if pending is not None:
            pending.set_error(TransactionOutcomeUnknownError("EndTxn got no answer", error))

    def init_when_ready(self, manager: TransactionManager) -> TxnResult | None:
        done = TxnResult("init (planted bug: nothing to re-initialise)")
        done.set_done()
        return done


class CasMismatchNoRead(Rules):
    async def settle_mismatch(
        self, writer: MismatchSettler, expected: int, sequence: int, after_lost_attempt: bool
    ) -> Any:
        if after_lost_attempt:
            writer.next_offset = None
            raise ConcurrentWriteError(f"offset {expected} was taken (unread)", offset=expected)
        return await super().settle_mismatch(writer, expected, sequence, after_lost_attempt)


class ReorderRetries(Rules):
    def requeue(self, core: ProducerCore, batch: ProducerBatch, now: float) -> None:
        _forget_sequence(core, batch)  # to the back of the queue, with a new sequence
        core.accumulator.reenqueue(batch, now, core.backoff(batch.attempts))
        queue = core.accumulator.queues[(batch.topic, batch.partition)]
        queue.remove(batch)
        queue.append(batch)


class NotEnoughReplicasNotWritten(Rules):
    def answered_after_append(
        self, core: ProducerCore, batch: ProducerBatch, now: float, code: int, message: str | None
    ) -> Decision | None:
        batch.maybe_written = False
        error = error_for_code(code, message)
        core.sequencing.on_final(batch, gap=True, error=error)
        core.finish_failed(batch, error)
        return Decision.FINAL


class ExpireInFlight(Rules):
    def give_up_lost(
        self, core: ProducerCore, batch: ProducerBatch, now: float, error: KafkaError
    ) -> Decision:
        if now - batch.created < core.config.delivery_timeout:
            return super().give_up_lost(core, batch, now, error)
        batch.maybe_written = False  # dropped as not written
        timed_out = DeliveryTimeoutError(f"delivery_timeout passed ({error})")
        core.sequencing.on_final(batch, gap=True, error=timed_out)
        core.finish_failed(batch, timed_out)
        return Decision.FINAL


class CasRebaseOnMismatch(Rules):
    def offset_after_mismatch(self, mismatch: ExpectedOffsetMismatchError) -> int | None:
        return mismatch.log_end_offset if mismatch.log_end_offset >= 0 else None


class BulkWithoutCas(Rules):
    def load_batch_offset(self, expected_offset: int) -> int:
        return -1


class CommitAfterFailedSend(Rules):
    def send_failure_taints_transaction(self, error: KafkaError) -> bool:
        return False


class NewProducerIdOnBump(Rules):
    def epoch_bump(self, sequencing: SequencingPolicy) -> tuple[int, int]:
        return -1, -1


class LoadLostAsWritten(Rules):
    def load_answer(self, code: int | None) -> Action:
        action = super().load_answer(code)
        return Action.ACKNOWLEDGED if action is Action.RETRY else action


class LoadMismatchAsWritten(Rules):
    def load_answer(self, code: int | None) -> Action:
        action = super().load_answer(code)
        return Action.ACKNOWLEDGED if action is Action.RESOLVE_MISMATCH else action


class LoadResumePastCheckpoint(Rules):
    def loaded_through(self, resumed_after_row: int) -> int:
        return resumed_after_row + 1 if resumed_after_row >= 0 else resumed_after_row


class LoadResumeFromAborted(Rules):
    def checkpoint_committed(self, first_marker_after: bool | None) -> bool:
        return True


class LoadRestreamOn(Rules):
    def restream_from(self, streamed: int) -> int:
        return streamed


class PipelinedSameOffset(Rules):
    def pipelined_offset(self, tail: int, settled: int) -> int:
        return settled


class ResendBehindFailedCas(Rules):
    def behind_failed_cas(self, core: ProducerCore, failed: ProducerBatch) -> None:
        return None


__all__ = [
    "BulkWithoutCas",
    "CasMismatchNoRead",
    "CasRebaseOnMismatch",
    "CommitAfterFailedSend",
    "ExpireInFlight",
    "LoadLostAsWritten",
    "LoadMismatchAsWritten",
    "LoadRestreamOn",
    "LoadResumeFromAborted",
    "LoadResumePastCheckpoint",
    "NewProducerIdOnBump",
    "NotEnoughReplicasNotWritten",
    "PipelinedSameOffset",
    "ReorderRetries",
    "ResendAfterBump",
    "ResendBehindFailedCas",
    "SameEpochOnUnknownProducer",
    "StaleEndTxn",
    "TimeoutNotWritten",
]
