"""The sequencing-policy seam of `ProducerCore`: what a wrapping policy is told.

A recording `Sequencer` subclass stands in for the transactional policy: `on_final`
carries the error the batch ends with (and is called before the batch finishes),
`on_fatal` is called once, `owns_producer_id` hides InitProducerId from the driver.
"""

from __future__ import annotations

import random
from typing import Any

from trio_kafka.core import ClusterView, ProducerBatch, ProducerConfig, ProducerCore, Sequencer
from trio_kafka.core._core import PartitionResponse
from trio_kafka.core._sequencer import NoSequencing, TopicPartition
from trio_kafka.errors import (
    AmbiguousDeliveryTimeoutError,
    BrokerError,
    ConnectionLostError,
    DeliveryTimeoutError,
    ErrorCode,
    ExpectedOffsetMismatchError,
    FatalError,
    KafkaError,
    ProducerClosedError,
)

VALUE = b"v" * 100


class Recording(Sequencer):
    def __init__(self, *, owns_producer_id: bool = False) -> None:
        super().__init__()
        self.owns_producer_id = owns_producer_id
        # (batch, gap, error, batch already finished?) per on_final call.
        self.finals: list[tuple[ProducerBatch, bool, KafkaError | None, bool]] = []
        self.fatals: list[KafkaError] = []
        self.bumps: list[TopicPartition] = []

    def on_final(self, batch: ProducerBatch, *, gap: bool, error: KafkaError | None = None) -> None:
        super().on_final(batch, gap=gap, error=error)
        self.finals.append((batch, gap, error, batch.done))

    def on_fatal(self, error: KafkaError) -> None:
        super().on_fatal(error)
        self.fatals.append(error)

    def request_epoch_bump(self, tp: TopicPartition) -> None:
        super().request_epoch_bump(tp)
        self.bumps.append(tp)


def make(policy: Any = None, **options: Any) -> tuple[ProducerCore, Recording]:
    options.setdefault("batch_size", 100)
    options.setdefault("linger", 0.0)
    options.setdefault("retries", 1)
    config = ProducerConfig.from_kwargs(**options)
    policy = policy if policy is not None else Recording()
    core = ProducerCore(
        config,
        random.Random(0),
        sequencing=policy,
        cluster=ClusterView.from_leaders({"t": [1]}),
    )
    if core.needs_producer_id:
        core.set_producer_id(1000, 0, 0.0)
    return core, policy


def drain(core: ProducerCore, now: float = 0.0) -> list[ProducerBatch]:
    return core.drain(now, [1]).get(1, [])


def answer(core: ProducerCore, batches: list[ProducerBatch], now: float, **fields: Any) -> None:
    core.handle_response(1, batches, {("t", 0): PartitionResponse(**fields)}, now)


def test_on_final_carries_the_broker_error_before_the_batch_finishes() -> None:
    core, policy = make()
    core.append("t", VALUE, partition=0, now=0.0)
    (batch,) = drain(core)
    answer(core, [batch], 0.0, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    ((seen, gap, error, finished),) = policy.finals
    assert seen is batch and gap and not finished
    assert isinstance(error, BrokerError) and error.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert batch.error is error


def test_on_final_carries_the_delivery_timeout_of_an_expired_batch() -> None:
    core, policy = make(delivery_timeout=1.0, request_timeout=0.5)
    core.append("t", VALUE, partition=0, now=0.0)
    core.expire(2.0)
    ((_, gap, error, finished),) = policy.finals
    assert isinstance(error, DeliveryTimeoutError) and not gap and not finished


def test_on_final_carries_the_ambiguous_error_of_a_lost_request() -> None:
    core, policy = make()
    core.append("t", VALUE, partition=0, now=0.0)
    (batch,) = drain(core)
    core.handle_request_failure(1, [batch], ConnectionLostError("reset"), 0.1)
    assert policy.finals == []  # retried once (retries=1)
    assert drain(core, 1.0) == [batch]
    core.handle_request_failure(1, [batch], ConnectionLostError("reset"), 1.1)
    ((_, gap, error, _),) = policy.finals
    assert not gap and error is batch.error
    assert not isinstance(error, AmbiguousDeliveryTimeoutError)


def test_on_final_carries_the_cas_mismatch() -> None:
    core, policy = make()
    core.append("t", VALUE, partition=0, now=0.0)
    (batch,) = drain(core)
    answer(core, [batch], 0.0, error_code=ErrorCode.EXPECTED_OFFSET_MISMATCH, base_offset=7)
    ((_, gap, error, _),) = policy.finals
    assert gap and isinstance(error, ExpectedOffsetMismatchError)
    assert error.log_end_offset == 7


def test_on_final_carries_the_error_of_fail_all() -> None:
    core, policy = make()
    core.append("t", VALUE, partition=0, now=0.0)
    closed = ProducerClosedError("closed")
    assert core.fail_all(closed) == 1
    ((_, _, error, _),) = policy.finals
    assert error is closed


def test_a_fatal_produce_error_reaches_the_policy_once_through_on_fatal() -> None:
    core, policy = make()
    core.append("t", VALUE, partition=0, now=0.0)
    core.append("t", VALUE, partition=0, now=0.0)
    (b0,) = drain(core)
    answer(core, [b0], 0.0, error_code=ErrorCode.PRODUCER_FENCED)
    assert core.fatal_error is not None
    assert policy.fatals == [core.fatal_error]
    assert policy.fatal_error is core.fatal_error  # the Sequencer stops draining
    assert isinstance(policy.finals[0][2], FatalError)
    assert drain(core) == []


def test_on_fatal_is_part_of_the_protocol_for_a_policy_without_idempotence() -> None:
    calls: list[KafkaError] = []

    class Quiet(NoSequencing):
        def on_fatal(self, error: KafkaError) -> None:
            calls.append(error)

    core, _ = make(Quiet(), enable_idempotence=False, acks="1")
    core.append("t", VALUE, partition=0, now=0.0)
    (batch,) = drain(core)
    answer(core, [batch], 0.0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    assert calls == [core.fatal_error]


def test_a_policy_that_owns_the_producer_id_hides_init_producer_id_from_the_driver() -> None:
    core, policy = make(Recording(owns_producer_id=True))
    assert policy.producer_id < 0
    assert not core.needs_producer_id  # someone else runs InitProducerId
    policy.request_epoch_bump(("t", 0))
    assert policy.epoch_bump_required
    assert not core.epoch_bump_due


def test_an_idempotent_policy_still_asks_the_driver_for_a_producer_id_and_bumps() -> None:
    policy = Recording()
    core, _ = make(policy)
    assert policy.producer_id == 1000  # make() ran the driver's step
    policy.request_epoch_bump(("t", 0))
    assert core.epoch_bump_due


def test_a_real_gap_is_requested_through_the_overridable_request_epoch_bump() -> None:
    core, policy = make(retries=5)
    for _ in range(2):
        core.append("t", VALUE, partition=0, now=0.0)
    b0 = drain(core)[0]
    answer(core, [b0], 0.0, base_offset=0)
    b1 = drain(core)[0]
    answer(core, [b1], 0.0, error_code=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert policy.bumps == [("t", 0)]
    assert core.epoch_bump_due
