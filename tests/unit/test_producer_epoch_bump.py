"""The idempotent producer's epoch bump, stepped with `now` (DESIGN.md "Producer ids and
epochs"): the core bumps its epoch itself, keeping its producer id, so the broker fences
every request of the old epoch that may still land; it asks for a new producer id only
for the first one and when the epoch is exhausted.

Seeds 709627, 901616 and 904005 (simulations/regressions/) found the bug these tests
pin: after an ambiguous request the producer took a new producer id, and the old id's
delayed request landed after newer records.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.unit._core_steps import acknowledge_a_first_batch, answer, drain_one
from trio_kafka.broker._producer_state import ProducerStateTable, Verdict
from trio_kafka.core import (
    Ambiguous,
    ClusterView,
    DeliveryHandle,
    Failed,
    ProducerBatch,
    ProducerConfig,
    ProducerCore,
    Sequencer,
    TransactionManager,
)
from trio_kafka.errors import ConnectionLostError, ErrorCode, ProducerFencedError

VALUE = b"v" * 100
TP = ("t", 0)
PID = 1000


def make_core(**options: Any) -> ProducerCore:
    options.setdefault("batch_size", 100)  # one 100-byte record per batch
    options.setdefault("linger", 0.0)
    options.setdefault("retry_backoff", 0.1)
    options.setdefault("retry_backoff_max", 1.0)
    config = ProducerConfig.from_kwargs(**options)
    core = ProducerCore(config, random.Random(3), cluster=ClusterView.from_leaders({"t": [1]}))
    core.set_producer_id(PID, 0, 0.0)
    return core


def send(core: ProducerCore, count: int, now: float = 0.0) -> list[DeliveryHandle]:
    handles = [core.append("t", VALUE, partition=0, now=now) for _ in range(count)]
    assert all(h is not None for h in handles)
    return handles  # type: ignore[return-value]


def ids(batches: list[ProducerBatch]) -> list[tuple[int, int, int]]:
    return [(b.producer_id, b.producer_epoch, b.base_sequence) for b in batches]


def test_after_a_lost_request_the_core_bumps_its_epoch_and_keeps_its_producer_id() -> None:
    # Seed 709627's shape: w0-3 (sequence 1) is lost with its connection and may still
    # land (a zombie); its retry finds a gap; the producer must fence the zombie.
    core = make_core()
    handles = send(core, 3)
    b0 = drain_one(core, 0.0)[0]
    answer(core, [b0], 0.01, base_offset=0)
    b1 = drain_one(core, 0.01)[0]
    core.handle_request_failure(1, [b1], ConnectionLostError("reset"), 0.02)
    retry = drain_one(core, 1.0)
    assert ids(retry) == [(PID, 0, 1)]
    answer(core, retry, 1.0, error_code=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)  # the gap
    # No driver step: the core applies the bump itself in its next pass's expire(),
    # which returns the batch it ended (the driver wakes flush and waiters for it).
    assert core.expire(1.5) == [b1]
    batches = drain_one(core, 1.5)
    assert not core.needs_producer_id
    assert (core.sequencing.producer_id, core.sequencing.producer_epoch) == (PID, 1)
    assert isinstance(handles[1].outcome, Ambiguous)  # may be in the log: never resent
    assert ids(batches) == [(PID, 1, 0)]  # same id, next epoch, sequences from 0
    assert core.metrics_snapshot().epoch_bumps == 1


def test_a_batch_that_expired_in_flight_is_fenced_by_a_bump_of_the_same_producer_id() -> None:
    # Seed 904005's shape: t0-1's request is still out when its delivery timeout passes
    # (a network stall); t0-2 must go under a bumped epoch of the same producer id.
    core = make_core(delivery_timeout=5.0, request_timeout=1.0)
    handles = send(core, 2)
    b0 = drain_one(core, 0.0)[0]
    answer(core, [b0], 0.01, base_offset=0)
    b1 = drain_one(core, 0.01)[0]
    core.handle_request_failure(1, [b1], ConnectionLostError("stalled"), 6.0)
    assert isinstance(handles[1].outcome, Ambiguous)
    (late,) = send(core, 1, 6.0)
    batches = drain_one(core, 6.1)
    assert ids(batches) == [(PID, 1, 0)]
    answer(core, batches, 6.2, base_offset=2)
    assert late.result().offset == 2


def test_the_broker_fences_the_old_epochs_zombie_but_not_a_new_producer_ids() -> None:
    # Why the bump must keep the producer id: the mock broker, as Kafka's
    # ProducerStateManager, accepts a higher epoch at sequence 0 and refuses an older
    # epoch with INVALID_PRODUCER_EPOCH; a fresh id has its own sequence space.
    bumped = ProducerStateTable()
    bumped.record(PID, 0, 0, first_offset=0, last_offset=0, now_ms=0)
    assert bumped.check(PID, 1, 0, 1).verdict is Verdict.APPEND
    bumped.record(PID, 1, 0, first_offset=1, last_offset=1, now_ms=0)
    zombie = bumped.check(PID, 0, 1, 1)
    assert zombie.error is ErrorCode.INVALID_PRODUCER_EPOCH
    new_id = ProducerStateTable()
    new_id.record(PID, 0, 0, first_offset=0, last_offset=0, now_ms=0)
    new_id.record(PID + 1, 0, 0, first_offset=1, last_offset=1, now_ms=0)
    assert new_id.check(PID, 0, 1, 1).verdict is Verdict.APPEND  # lands after newer records


def test_the_bump_waits_until_no_request_of_the_old_epoch_is_in_flight() -> None:
    core = make_core()
    send(core, 3)
    b0 = drain_one(core, 0.0)[0]
    answer(core, [b0], 0.01, base_offset=0)
    b1, b2 = (drain_one(core, 0.01)[0] for _ in range(2))
    answer(core, [b1], 0.02, error_code=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert drain_one(core, 0.5) == []
    assert core.sequencing.producer_epoch == 0  # b2 is still out
    answer(core, [b2], 0.6, error_code=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert ids(drain_one(core, 1.0)) == [(PID, 1, 0)]


def test_an_exhausted_epoch_asks_for_a_new_producer_id_only_then() -> None:
    core = make_core()
    core.set_producer_id(PID, 32767, 0.0)  # Short.MAX_VALUE: no local bump is left
    (handle,) = send(core, 1)
    (b0,) = drain_one(core, 0.0)
    answer(core, [b0], 0.01, error_code=ErrorCode.UNKNOWN_PRODUCER_ID, log_start_offset=0)
    assert drain_one(core, 1.0) == []
    assert core.needs_producer_id  # InitProducerId (no id, no epoch) for a fresh id
    assert core.metrics_snapshot().epoch_bumps == 0
    core.set_producer_id(PID + 1, 0, 1.1)
    batches = drain_one(core, 1.2)
    assert ids(batches) == [(PID + 1, 0, 0)]
    answer(core, batches, 1.3, base_offset=0)
    assert handle.result().offset == 0


def test_a_transactional_policy_never_bumps_locally() -> None:
    config = ProducerConfig.from_kwargs(transactional_id="tx", batch_size=100, linger=0.0)
    policy = Sequencer(is_transactional=True, hooks=TransactionManager.from_config(config))
    core = ProducerCore(
        config, random.Random(0), sequencing=policy, cluster=ClusterView.from_leaders({"t": [1]})
    )
    core.set_producer_id(PID, 4, 0.0)
    # A bump due (as an idempotent sequencer's would be; a transaction's hooks defer it
    # to the abort): the core must still leave it to the manager.
    policy.epoch_bump_required = True
    policy.partitions_to_rewrite.add(TP)
    assert not core.epoch_bump_due
    assert core.expire(1.0) == []
    assert (policy.producer_id, policy.producer_epoch) == (PID, 4)  # the manager bumps
    assert policy.epoch_bump_required


def test_a_pending_bump_refuses_a_new_producer_id_from_the_driver() -> None:
    core = make_core()
    send(core, 2)
    b0 = drain_one(core, 0.0)[0]
    answer(core, [b0], 0.01, base_offset=0)
    b1 = drain_one(core, 0.01)[0]
    answer(core, [b1], 0.02, error_code=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert core.epoch_bump_due
    with pytest.raises(ValueError, match="cannot install producer id 1001"):
        core.set_producer_id(PID + 1, 0, 0.03)  # what InitProducerId gives on Kafka
    assert (core.sequencing.producer_id, core.sequencing.producer_epoch) == (PID, 0)
    core.set_producer_id(PID, 1, 0.03)  # the same id at a newer epoch is fine
    assert ids(drain_one(core, 1.0)) == [(PID, 1, 0)]


def test_a_refused_bumped_epoch_stops_an_idempotent_producer_saying_why() -> None:
    core = make_core()
    (handle,) = send(core, 1)
    answer(core, drain_one(core, 0.0), 0.01, error_code=ErrorCode.PRODUCER_FENCED)
    outcome = handle.outcome
    assert isinstance(outcome, Failed) and isinstance(outcome.error, ProducerFencedError)
    assert "bumps its epoch itself" in str(outcome.error)
    assert "transactionalId" not in str(outcome.error)  # we have none
    assert core.fatal_error is outcome.error
    core.expire(0.02)
    assert core.metrics_snapshot().epoch_bumps == 0  # nothing more after a fatal error


def test_a_request_split_in_two_keeps_a_bump_waiting_for_both_halves() -> None:
    # Seed 10816290 (simulations/regressions/idempotent-standard-10816290.toml): BUGGIFY
    # sent one drained request as one request per batch but counted one in flight, so
    # the first half to settle let a pending bump rewrite the partition while the other
    # half was still out; its batch was resent under the new epoch and landed twice.
    config = ProducerConfig.from_kwargs(batch_size=100, linger=0.0, retry_backoff=0.1)
    cluster = ClusterView.from_leaders({"t": [1, 1]})
    core = ProducerCore(config, random.Random(3), cluster=cluster)
    core.set_producer_id(PID, 0, 0.0)
    acknowledge_a_first_batch(core, VALUE)  # (else the next batch waits for the zombie)
    first = core.append("t", VALUE, partition=0, now=0.0)
    (zombie,) = drain_one(core, 0.0)
    late = core.append("t", VALUE, partition=0, now=0.0)
    other = core.append("t", VALUE, partition=1, now=0.0)
    pair = drain_one(core, 0.0)
    assert sorted((b.partition, b.base_sequence) for b in pair) == [(0, 2), (1, 0)]
    core.split_request(1, 2)  # sent as two requests: each settles on its own
    (p0,) = [b for b in pair if b.partition == 0]
    (p1,) = [b for b in pair if b.partition == 1]
    core.handle_request_failure(1, [zombie], ConnectionLostError("reset"), 0.01)
    core.sequencing.request_epoch_bump(TP)  # as BUGGIFY's forced bump does
    answer(core, [p1], 0.02, base_offset=0)  # one half back, the other still out
    assert not core.epoch_bump_due
    assert core.expire(0.03) == []  # no bump while p0's request may land
    assert core.sequencing.producer_epoch == 0
    core.handle_request_failure(1, [p0], ConnectionLostError("reset"), 0.04)
    ended = core.expire(0.05)  # now the bump: both possibly-written batches end
    assert core.sequencing.producer_epoch == 1
    assert sorted(b.base_sequence for b in ended) == [1, 2] and p0 in ended
    assert first is not None and late is not None and other is not None
    assert isinstance(first.outcome, Ambiguous) and isinstance(late.outcome, Ambiguous)
    assert other.outcome is not None and not isinstance(other.outcome, Ambiguous)


def test_a_request_settled_twice_is_a_bookkeeping_error() -> None:
    core = make_core()
    send(core, 1)
    (batch,) = drain_one(core, 0.0)
    answer(core, [batch], 0.01, base_offset=0)
    with pytest.raises(AssertionError, match="never in flight"):
        core.accumulator.batches.request_done(1)
