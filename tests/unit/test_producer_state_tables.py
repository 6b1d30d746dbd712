"""The batch's and the partition phase's state tables (core/_batch.py `_MOVES`,
core/_sequencer.py `_PHASE_MOVES`): each moves only by its table."""

from __future__ import annotations

import pytest

from trio_kafka.core import ProducerBatch, Sequencer
from trio_kafka.core._batch import BatchState
from trio_kafka.core._sequencer import PartitionPhase, PhaseEvent
from trio_kafka.errors import KafkaError

TP = ("t", 0)


def sealed_batch() -> ProducerBatch:
    batch = ProducerBatch(*TP, capacity=1000, now=0.0)
    batch.values.append(b"v")
    batch.seal()
    return batch


def test_a_finished_batch_cannot_be_requeued() -> None:
    batch = sealed_batch()
    batch.drained(1, 0.0)
    assert batch.fail(KafkaError("refused"))
    with pytest.raises(AssertionError, match="no move on requeued from done"):
        batch.requeued(1.0)
    assert batch.state is BatchState.DONE


def test_a_queued_batch_cannot_be_drained_twice() -> None:
    batch = sealed_batch()
    batch.drained(1, 0.0)
    with pytest.raises(AssertionError, match="no move on drained from in_flight"):
        batch.drained(1, 0.1)
    assert batch.attempts == 1


def test_a_partition_rewritten_at_a_bump_leaves_its_old_epoch() -> None:
    seq = Sequencer()
    seq.new_producer_id(1, 0)
    batch = sealed_batch()
    seq.assign(batch)
    batch.drained(1, 0.0)
    seq.new_producer_id(1, 1)  # another partition's gap bumped the epoch meanwhile
    e = seq.entry(TP)
    assert e.phase is PartitionPhase.OLD_EPOCH
    # The batch's request is lost: it is retried, then its own gap asks for a rewrite.
    batch.requeued(0.1)
    seq.on_retry(batch)
    seq.request_epoch_bump(TP)
    seq.new_producer_id(1, 2)
    assert (batch.producer_epoch, batch.base_sequence) == (2, 0)
    assert e.phase is PartitionPhase.RETRYING


def test_a_phase_event_the_table_does_not_name_is_refused() -> None:
    seq = Sequencer()
    e = seq.entry(TP)
    with pytest.raises(AssertionError, match="no phase move on resolved from sequencing"):
        e.move(PhaseEvent.RESOLVED)
    assert e.phase is PartitionPhase.SEQUENCING
