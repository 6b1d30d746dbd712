"""Idempotence, retries and the response handler, stepped like Java's runOnce()."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.unit._core_steps import acknowledge_a_first_batch, answer, drain_one
from trio_kafka.broker._producer_state import ProducerStateTable, Verdict
from trio_kafka.core import (
    Acknowledged,
    Ambiguous,
    ClusterView,
    DeliveryHandle,
    Failed,
    ProducerConfig,
    ProducerCore,
    Sequencer,
)
from trio_kafka.core._core import RecordError
from trio_kafka.core._sequencer import PartitionPhase
from trio_kafka.errors import (
    AmbiguousDeliveryTimeoutError,
    AmbiguousError,
    BrokerConnectionError,
    BrokerError,
    ConnectionLostError,
    ErrorCode,
    ExpectedOffsetMismatchError,
    FatalError,
    KafkaError,
    RequestTimeoutError,
)

VALUE = b"v" * 100
TP = ("t", 0)


def make_core(**options: Any) -> ProducerCore:
    options.setdefault("batch_size", 100)  # one 100-byte record per batch
    options.setdefault("linger", 0.0)
    options.setdefault("retry_backoff", 0.1)
    options.setdefault("retry_backoff_max", 1.0)
    config = ProducerConfig.from_kwargs(**options)
    core = ProducerCore(config, random.Random(3), cluster=ClusterView.from_leaders({"t": [1]}))
    if config.enable_idempotence:
        assert core.needs_producer_id
        core.set_producer_id(1000, 0, 0.0)
    return core


def send(core: ProducerCore, count: int, now: float = 0.0) -> list[DeliveryHandle]:
    handles = [core.append("t", VALUE, partition=0, now=now) for _ in range(count)]
    assert all(h is not None for h in handles)
    return handles  # type: ignore[return-value]


def test_sequences_are_assigned_at_drain_and_grow_per_partition() -> None:
    core = make_core(batch_size=400)
    send(core, 7)
    seqs = []
    for offset in range(3):
        batches = drain_one(core, 0.0)
        seqs += [
            (b.base_sequence, len(b.records), b.producer_id, b.producer_epoch) for b in batches
        ]
        answer(core, batches, 0.0, base_offset=offset)
    assert seqs == [(0, 3, 1000, 0), (3, 3, 1000, 0), (6, 1, 1000, 0)]


def test_at_most_max_in_flight_requests_per_partition() -> None:
    core = make_core(max_in_flight=5)
    acknowledge_a_first_batch(core, VALUE)
    send(core, 8)
    requests = [drain_one(core, 0.0) for _ in range(8)]
    assert [len(r) for r in requests] == [1, 1, 1, 1, 1, 0, 0, 0]
    answer(core, requests[0], 0.01, base_offset=0)
    assert len(drain_one(core, 0.01)) == 1  # room for one more


def test_responses_out_of_order_with_an_error_on_the_second_of_five_keep_order() -> None:
    core = make_core(max_in_flight=5)
    acknowledge_a_first_batch(core, VALUE)
    handles = send(core, 7)
    requests = [drain_one(core, 0.0) for _ in range(5)]
    b = [r[0] for r in requests]
    assert [x.base_sequence for x in b] == [1, 2, 3, 4, 5]
    # Responses arrive out of order: 5th, 3rd, 2nd (NOT_LEADER), 4th, 1st.
    answer(core, [b[4]], 0.01, error_code=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    answer(core, [b[2]], 0.01, error_code=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    answer(core, [b[1]], 0.01, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER)
    answer(core, [b[3]], 0.01, error_code=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    answer(core, [b[0]], 0.01, base_offset=100)
    assert not core.sequencing.epoch_bump_required  # sequences 2.. simply follow 1 back
    queue = core.accumulator.queues[TP]
    # Retried batches are back at the front in sequence order, before the new ones.
    assert [x.base_sequence for x in queue] == [2, 3, 4, 5, -1, -1]
    # They keep their sequences and epoch, and go one request at a time in order.
    now, sent = 0.5, []
    offset = 101
    for _ in range(4):
        now += 1.0
        batches = drain_one(core, now)
        assert len(batches) == 1
        assert drain_one(core, now) == []  # while retrying, a single request in flight
        sent.append((batches[0].base_sequence, batches[0].producer_epoch))
        answer(core, batches, now, base_offset=offset)
        offset += 1
    # Recovered: new batches pipeline again.
    pipelined = [drain_one(core, now)[0] for _ in range(2)]
    for batch in pipelined:
        sent.append((batch.base_sequence, batch.producer_epoch))
        answer(core, [batch], now, base_offset=offset)
        offset += 1
    assert sent == [(2, 0), (3, 0), (4, 0), (5, 0), (6, 0), (7, 0)]
    offsets = [h.result().offset for h in handles]
    assert offsets == list(range(100, 107))


def test_kip360_out_of_order_after_the_last_acked_sequence_bumps_the_epoch() -> None:
    core = make_core()
    handles = send(core, 3)
    b0 = drain_one(core, 0.0)[0]
    answer(core, [b0], 0.01, base_offset=0)
    b1, b2 = (drain_one(core, 0.01)[0] for _ in range(2))
    # The broker lost sequence 1 (e.g. unclean leader election): a real gap.
    answer(core, [b1], 0.02, error_code=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert core.sequencing.epoch_bump_required
    assert not core.epoch_bump_due  # b2 is still in flight
    assert drain_one(core, 0.5) == []  # nothing is drained while a bump is pending
    answer(core, [b2], 0.03, error_code=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert core.epoch_bump_due
    # The driver runs InitProducerId(producer_id=1000, epoch=0) -> epoch 1.
    core.set_producer_id(1000, 1, 0.04)
    assert core.metrics_snapshot().epoch_bumps == 1
    assert [
        (x.base_sequence, x.producer_epoch, x.sequence_reset) for x in core.accumulator.queues[TP]
    ] == [
        (0, 1, True),
        (1, 1, True),
    ]
    first = drain_one(core, 1.0)
    assert [x.base_sequence for x in first] == [0]
    answer(core, first, 1.0, base_offset=1)
    second = drain_one(core, 2.0)
    answer(core, second, 2.0, base_offset=2)
    assert [h.result().offset for h in handles] == [0, 1, 2]
    # New batches continue the new epoch's sequence.
    send(core, 1, 3.0)
    assert [(x.base_sequence, x.producer_epoch) for x in drain_one(core, 3.0)] == [(2, 1)]


def test_kip360_unknown_producer_id_bumps_the_epoch_and_retries_instead_of_dying() -> None:
    core = make_core()
    acknowledge_a_first_batch(core, VALUE)
    handles = send(core, 2)
    b0, b1 = (drain_one(core, 0.0)[0] for _ in range(2))
    answer(core, [b0], 0.01, error_code=ErrorCode.UNKNOWN_PRODUCER_ID, log_start_offset=50)
    answer(core, [b1], 0.01, error_code=ErrorCode.UNKNOWN_PRODUCER_ID, log_start_offset=50)
    assert core.epoch_bump_due
    core.bump_epoch_locally(0.02)
    assert core.sequencing.producer_epoch == 1
    for offset, now in ((50, 1.0), (51, 2.0)):
        batches = drain_one(core, now)
        assert batches[0].producer_epoch == 1
        answer(core, batches, now, base_offset=offset)
    assert [h.result().offset for h in handles] == [50, 51]
    assert core.fatal_error is None


def test_an_epoch_bump_makes_a_maybe_written_batch_ambiguous_instead_of_resending_it() -> None:
    core = make_core()
    handles = send(core, 3)
    b0 = drain_one(core, 0.0)[0]
    answer(core, [b0], 0.01, base_offset=0)
    b1, b2 = (drain_one(core, 0.01)[0] for _ in range(2))
    # b1's response is lost: it may be in the log under (epoch 0, sequence 1).
    core.handle_request_failure(1, [b1], ConnectionLostError("reset"), 0.02)
    answer(core, [b2], 0.02, error_code=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    retry = drain_one(core, 1.0)
    assert [x.base_sequence for x in retry] == [1]
    answer(core, retry, 1.0, error_code=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)  # a real gap
    assert core.epoch_bump_due
    core.set_producer_id(1000, 1, 1.1)
    # b1 would lose deduplication under a new epoch: it is reported ambiguous.
    outcome = handles[1].outcome
    assert isinstance(outcome, Ambiguous)
    # b2 was never possibly written: it is re-sequenced and retried.
    assert [(x.base_sequence, x.producer_epoch) for x in core.accumulator.queues[TP]] == [(0, 1)]
    answer(core, drain_one(core, 2.0), 2.0, base_offset=7)
    assert handles[2].result().offset == 7


def test_not_enough_replicas_after_append_is_retried_never_failed() -> None:
    core = make_core()
    (handle,) = send(core, 1)
    batches = drain_one(core, 0.0)
    answer(core, batches, 0.01, error_code=ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    assert not handle.done()
    retry = drain_one(core, 1.0)
    assert retry[0].base_sequence == 0 and retry[0].attempts == 2
    answer(core, retry, 1.0, base_offset=42)  # the broker dedups the retry
    assert handle.result() == Acknowledged("t", 0, 42, handle.result().timestamp)


def test_not_enough_replicas_after_append_becomes_ambiguous_when_retries_run_out() -> None:
    core = make_core(retries=1)
    (handle,) = send(core, 1)
    answer(core, drain_one(core, 0.0), 0.01, error_code=ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    answer(core, drain_one(core, 1.0), 1.0, error_code=ErrorCode.NOT_ENOUGH_REPLICAS)
    outcome = handle.outcome
    assert isinstance(outcome, Ambiguous)  # the first attempt was written


@pytest.mark.parametrize(
    "code", [ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_LEADER_OR_FOLLOWER], ids=lambda c: c.name
)
def test_an_acks_all_answer_that_may_follow_the_append_never_ends_failed(code: ErrorCode) -> None:
    # Kafka appends an acks=all batch, then waits for the in-sync replicas: the wait
    # ends REQUEST_TIMED_OUT (timeout_ms passed) or NOT_LEADER_OR_FOLLOWER (the leader
    # stepped down), and the batch may be committed all the same. A 3-node chaos run on
    # Kafka (leader kill -9) reported such a record DeliveryTimeoutError while it was in
    # the log.
    core = make_core(delivery_timeout=1.5, request_timeout=0.5)
    (handle,) = send(core, 1)
    answer(core, drain_one(core, 0.0), 0.6, error_code=code)
    assert not handle.done()
    assert core.accumulator.queues[TP][0].maybe_written
    core.expire(2.0)
    assert isinstance(handle.outcome, Ambiguous), handle.outcome


def test_not_leader_with_acks_1_is_before_any_append_and_may_end_failed() -> None:
    core = make_core(delivery_timeout=1.5, request_timeout=0.5, acks=1, enable_idempotence=False)
    (handle,) = send(core, 1)
    answer(core, drain_one(core, 0.0), 0.6, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER)
    core.expire(2.0)
    assert isinstance(handle.outcome, Failed), handle.outcome


def test_out_of_order_for_a_batch_whose_followers_were_acknowledged_ends_it() -> None:
    # A request is refused NOT_LEADER_OR_FOLLOWER, the next ones land (Kafka takes any
    # first sequence from a producer it has no state for: here it lost ours, as after
    # producer.id.expiration.ms; a partition's very first batch goes alone, so a new
    # topic no longer meets this), and the refused one's retry is OUT_OF_ORDER for ever.
    # Before, it was retried until delivery_timeout, holding every later batch of the
    # partition back (42,866 of 100,000 records expired in the integration test).
    core = make_core(max_in_flight=5, delivery_timeout=120.0)
    acknowledge_a_first_batch(core, VALUE)
    handles = send(core, 4)
    b = [drain_one(core, 0.0)[0] for _ in range(3)]
    answer(core, [b[0]], 0.01, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER)
    answer(core, [b[1]], 0.02, base_offset=1)
    answer(core, [b[2]], 0.03, base_offset=2)
    retry = drain_one(core, 1.0)
    assert [x.base_sequence for x in retry] == [1]
    answer(core, retry, 1.01, error_code=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    # Ended at once: Ambiguous (a NOT_LEADER_OR_FOLLOWER under acks=all may follow an
    # append), not retried.
    assert isinstance(handles[0].outcome, Ambiguous), handles[0].outcome
    assert [handles[1].result().offset, handles[2].result().offset] == [1, 2]
    # The partition goes on (after the epoch bump the gap asks for).
    if core.needs_producer_id or core.sequencing.epoch_bump_required:
        core.set_producer_id(1000, 1, 2.0)
    answer(core, drain_one(core, 2.0), 2.0, base_offset=3)
    assert handles[3].result().offset == 3


def test_a_partitions_first_batch_goes_alone_until_it_is_acknowledged() -> None:
    core = make_core(max_in_flight=5)
    send(core, 3)
    first = drain_one(core, 0.0)
    assert [b.base_sequence for b in first] == [0]
    # The broker may hold no state for this producer here: nothing else goes yet.
    assert drain_one(core, 0.0) == []
    answer(core, first, 0.01, base_offset=0)
    pipelined = [drain_one(core, 0.01) for _ in range(2)]
    assert [[b.base_sequence for b in r] for r in pipelined] == [[1], [2]]


def test_after_an_epoch_bump_a_partition_the_broker_knows_pipelines_at_once() -> None:
    # Kafka holds the producer id's state for the partition: a newer epoch must start
    # at sequence 0, so a later batch cannot land first (transactions v2 bump at every
    # commit and must not pay a round trip per partition each time).
    core = make_core(max_in_flight=5)
    acknowledge_a_first_batch(core, VALUE)
    core.set_producer_id(1000, 1, 0.0)  # an epoch bump (as after another partition's gap)
    send(core, 3)
    assert [(b.base_sequence, b.producer_epoch) for b in drain_one(core, 0.0)] == [(0, 1)]
    assert [b.base_sequence for b in drain_one(core, 0.0)] == [1]


def test_under_a_new_producer_id_a_partitions_first_batch_goes_alone_again() -> None:
    core = make_core(max_in_flight=5)
    acknowledge_a_first_batch(core, VALUE)
    core.set_producer_id(2000, 0, 0.0)  # a new id: the broker holds no state for it
    send(core, 3)
    first = drain_one(core, 0.0)
    assert [(b.base_sequence, b.producer_id) for b in first] == [(0, 2000)]
    assert drain_one(core, 0.0) == []
    answer(core, first, 0.01, base_offset=1)
    assert [b.base_sequence for b in drain_one(core, 0.01)] == [1]
    assert [b.base_sequence for b in drain_one(core, 0.01)] == [2]


def test_a_first_request_refused_by_a_new_leader_lands_before_the_later_batches() -> None:
    # Kafka right after a topic's creation: the first Produce of the partition is
    # refused NOT_LEADER_OR_FOLLOWER (the node has not taken up its leadership yet),
    # and Kafka stores any first sequence from a producer it holds no state for. Were
    # the second batch out with it, it would land first and the first could never land
    # after it (ended Ambiguous: the asyncio-on-Kafka 100k xfail of
    # test_producer_real.py).
    core = make_core(max_in_flight=5, delivery_timeout=120.0)
    handles = send(core, 4)
    state = ProducerStateTable(strict_unknown_producer=False)  # as Kafka 2.5+
    log: list[int] = []
    refused_one = False
    now = 0.0
    while not all(h.done() for h in handles) and now < 10.0:
        requests = []
        while batches := drain_one(core, now):
            requests.append(batches)
        for batches in requests:
            (batch,) = batches
            if not refused_one:
                refused_one = True
                answer(core, batches, now, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER)
                continue
            n = len(batch.records)
            check = state.check(batch.producer_id, batch.producer_epoch, batch.base_sequence, n)
            if check.verdict is Verdict.REJECT:
                answer(core, batches, now, error_code=check.error)
                continue
            assert check.verdict is Verdict.APPEND
            state.record(
                batch.producer_id,
                batch.producer_epoch,
                batch.base_sequence,
                first_offset=len(log),
                last_offset=len(log) + n - 1,
                now_ms=0,
            )
            answer(core, batches, now, base_offset=len(log))
            log.extend(range(batch.base_sequence, batch.base_sequence + n))
        now += 0.5
    assert refused_one
    assert [h.outcome for h in handles if not isinstance(h.outcome, Acknowledged)] == []
    assert [h.result().offset for h in handles] == [0, 1, 2, 3]
    assert log == [0, 1, 2, 3]


def test_duplicate_sequence_number_is_success_with_unknown_offset() -> None:
    core = make_core()
    (handle,) = send(core, 1)
    answer(core, drain_one(core, 0.0), 0.01, error_code=ErrorCode.DUPLICATE_SEQUENCE_NUMBER)
    result = handle.result()
    assert isinstance(result, Acknowledged) and result.offset == -1
    assert core.metrics_snapshot().records_acknowledged == 1


def test_a_lost_response_is_retried_with_the_same_sequence_and_epoch_after_backoff() -> None:
    core = make_core(retry_backoff=0.1, retry_backoff_max=1.0)
    (handle,) = send(core, 1)
    batches = drain_one(core, 0.0)
    settled = core.handle_request_failure(1, batches, RequestTimeoutError("timeout"), 30.0)
    assert settled.refresh_metadata and settled.retried == 1
    batch = core.accumulator.queues[TP][0]
    assert batch.maybe_written
    backoff = batch.retry_at - 30.0
    assert 0.08 <= backoff <= 0.12  # retry_backoff with +-20% jitter
    ready = core.ready(30.0 + backoff / 2)
    assert ready.ready_nodes == set()
    assert ready.next_check_delay == pytest.approx(backoff / 2)
    retry = drain_one(core, 30.0 + backoff)
    assert (retry[0].base_sequence, retry[0].producer_epoch, retry[0].producer_id) == (0, 0, 1000)
    answer(core, retry, 31.0, base_offset=9)
    assert handle.result().offset == 9


def test_a_request_that_never_left_is_retried_and_fails_cleanly_at_timeout() -> None:
    core = make_core()
    (handle,) = send(core, 1)
    batches = drain_one(core, 0.0)
    core.handle_request_failure(1, batches, BrokerConnectionError("refused"), 0.1, sent=False)
    assert not core.accumulator.queues[TP][0].maybe_written
    core.accumulator.cluster = ClusterView.from_leaders({"t": [-1]})
    core.expire(120.0)
    outcome = handle.outcome
    assert isinstance(outcome, Failed)  # not ambiguous: nothing ever left


def test_retry_backoff_grows_exponentially_up_to_the_maximum() -> None:
    core = make_core(retry_backoff=0.1, retry_backoff_max=1.0)
    send(core, 1)
    now, backoffs = 0.0, []
    for _ in range(7):
        batches = drain_one(core, now)
        answer(core, batches, now, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER)
        batch = core.accumulator.queues[TP][0]
        backoffs.append(batch.retry_at - now)
        now = batch.retry_at
    for attempt, backoff in enumerate(backoffs):
        expected = min(0.1 * 2**attempt, 1.0)
        assert expected * 0.8 - 1e-9 <= backoff <= min(expected * 1.2, 1.0) + 1e-9


def test_a_definite_error_fails_the_batch_and_later_batches_are_resequenced() -> None:
    core = make_core()
    handles = send(core, 3)
    b0 = drain_one(core, 0.0)[0]
    answer(core, [b0], 0.01, base_offset=0)
    b1, b2 = (drain_one(core, 0.01)[0] for _ in range(2))
    answer(
        core,
        [b1],
        0.01,
        error_code=ErrorCode.INVALID_RECORD,
        record_errors=[RecordError(0, "bad record")],
        error_message="one bad record",
    )
    outcome = handles[1].outcome
    assert isinstance(outcome, Failed) and isinstance(outcome.error, BrokerError)
    assert outcome.error.code == ErrorCode.INVALID_RECORD
    assert "bad record" in str(outcome.error)
    # The hole at sequence 1 makes the broker refuse b2: it is retried after a bump.
    answer(core, [b2], 0.02, error_code=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert core.epoch_bump_due
    core.bump_epoch_locally(0.03)
    retry = drain_one(core, 1.0)
    assert [(x.base_sequence, x.producer_epoch) for x in retry] == [(0, 1)]
    answer(core, retry, 1.0, base_offset=1)
    assert handles[2].result().offset == 1


def test_expected_offset_mismatch_reports_the_log_end_offset() -> None:
    core = make_core()
    handle = core.append("t", VALUE, partition=0, now=0.0, expected_offset=5)
    assert handle is not None
    batches = drain_one(core, 0.0)
    assert batches[0].encode()[:8] == (5).to_bytes(8, "big")  # baseOffset carries it
    answer(
        core,
        batches,
        0.01,
        error_code=ErrorCode.EXPECTED_OFFSET_MISMATCH,
        base_offset=8,
        error_message="expected 5, log end is 8",
    )
    outcome = handle.outcome
    assert isinstance(outcome, Failed)
    error = outcome.error
    assert isinstance(error, ExpectedOffsetMismatchError)
    assert (error.expected_offset, error.log_end_offset) == (5, 8)


def test_a_cas_batch_in_flight_behind_a_failed_one_is_never_resent() -> None:
    """Batches expecting 5 and 6 are in flight; 5 mismatches (another writer's record
    took offset 5, so the log end is 6, where the second expects it) and the second
    comes back out of sequence: it fails, and is not resent under the bumped epoch."""
    core = make_core()
    acknowledge_a_first_batch(core, VALUE)
    first = core.append("t", VALUE, partition=0, now=0.0, expected_offset=5)
    request1 = drain_one(core, 0.0)
    second = core.append("t", VALUE, partition=0, now=0.0, expected_offset=6)
    request2 = drain_one(core, 0.0)
    assert first is not None and second is not None and request1 and request2
    answer(core, request1, 0.01, error_code=ErrorCode.EXPECTED_OFFSET_MISMATCH, base_offset=6)
    answer(core, request2, 0.01, error_code=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert [drain_one(core, now) for now in (0.5, 1.0, 2.0)] == [[], [], []]
    assert isinstance(first.outcome, Failed)
    assert isinstance(second.outcome, Failed)


def test_a_cas_batch_appended_after_the_one_before_it_failed_can_be_withdrawn_unsent() -> None:
    """The conditional writer's recall (cas seed 102100152): the batch expecting 6 is
    appended only after the one expecting 5 failed (its send waited), so `fail_behind`
    never saw it; `withdraw` fails it unsent while it is queued, and refuses once it is
    in flight."""
    core = make_core()
    acknowledge_a_first_batch(core, VALUE)
    first = core.append("t", VALUE, partition=0, now=0.0, expected_offset=5)
    request1 = drain_one(core, 0.0)
    answer(core, request1, 0.01, error_code=ErrorCode.EXPECTED_OFFSET_MISMATCH, base_offset=6)
    assert first is not None and isinstance(first.outcome, Failed)
    late = core.append("t", VALUE, partition=0, now=0.02, expected_offset=6)
    assert late is not None
    error = KafkaError("the append before it failed")
    assert core.withdraw(late.batch, error)
    assert isinstance(late.outcome, Failed) and late.outcome.error is error
    assert [drain_one(core, now) for now in (0.5, 1.0, 2.0)] == [[], [], []]
    sent = core.append("t", VALUE, partition=0, now=2.0, expected_offset=6)
    assert sent is not None and drain_one(core, 2.0)
    assert not core.withdraw(sent.batch, error)  # in flight: too late
    assert sent.outcome is None


def test_a_batch_without_expectation_sends_base_offset_minus_one() -> None:
    core = make_core()
    send(core, 1)
    assert drain_one(core, 0.0)[0].encode()[:8] == b"\xff" * 8


def test_a_fatal_error_stops_the_producer() -> None:
    core = make_core()
    handles = send(core, 2)
    b0 = drain_one(core, 0.0)
    answer(core, b0, 0.01, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    assert isinstance(core.fatal_error, FatalError)
    assert drain_one(core, 1.0) == []
    assert core.fail_all(core.fatal_error) == 1
    assert all(isinstance(h.outcome, Failed) for h in handles)


def test_acks_zero_completes_on_send_with_offset_minus_one() -> None:
    core = make_core(acks=0, enable_idempotence=False)
    (handle,) = send(core, 1)
    batches = drain_one(core, 0.0)
    assert batches[0].base_sequence == -1 and batches[0].producer_id == -1
    core.handle_response(1, batches, None, 0.0)
    assert handle.result().offset == -1


def test_without_idempotence_retries_carry_no_sequence() -> None:
    core = make_core(acks=1, enable_idempotence=False, max_in_flight=1)
    (handle,) = send(core, 1)
    answer(core, drain_one(core, 0.0), 0.01, error_code=ErrorCode.REQUEST_TIMED_OUT)
    retry = drain_one(core, 1.0)
    assert retry[0].base_sequence == -1
    answer(core, retry, 1.0, base_offset=3)
    assert handle.result().offset == 3


def test_an_expired_retry_leaves_the_partition_unresolved_until_in_flight_settles() -> None:
    core = make_core()
    acknowledge_a_first_batch(core, VALUE)
    handles = send(core, 2)
    b0, b1 = (drain_one(core, 0.0)[0] for _ in range(2))
    core.handle_request_failure(1, [b0], RequestTimeoutError("lost"), 100.0)
    core.expire(120.0)  # b0 (queued for retry) expires: ambiguous
    outcome = handles[0].outcome
    assert isinstance(outcome, Ambiguous)
    assert isinstance(outcome.error, AmbiguousDeliveryTimeoutError)
    send(core, 1, 120.0)
    assert drain_one(core, 120.1) == []  # unresolved: no new sequence until b1 settles
    answer(core, [b1], 120.2, base_offset=11)  # b1 landed, so b0 did too
    core.expire(120.3)
    assert not core.sequencing.epoch_bump_required
    assert [x.base_sequence for x in drain_one(core, 120.3)] == [3]


def test_handles_settle_per_batch_with_offsets_base_plus_index_and_callbacks() -> None:
    core = make_core(batch_size=200_000, linger=0.0)
    handles = send(core, 1000)
    assert {id(h.batch) for h in handles} == {id(handles[0].batch)}
    seen: list[int] = []
    handles[10].add_done_callback(lambda h: seen.append(h.index))
    with pytest.raises(RuntimeError, match="not settled"):
        handles[0].result()
    batches = core.drain(0.0, [1])[1]
    answer(core, batches, 0.01, base_offset=5000, log_append_time_ms=1234)
    assert seen == [10]
    assert [h.result().offset for h in handles] == list(range(5000, 6000))
    assert handles[999].result().timestamp == 1234
    late: list[int] = []
    handles[3].add_done_callback(lambda h: late.append(h.index))
    assert late == [3]  # already done: called at once
    snapshot = core.metrics_snapshot()
    assert snapshot.records_sent == 1000 and snapshot.records_acknowledged == 1000
    assert snapshot.batches_sent == 1 and snapshot.request_latency_p50 == pytest.approx(0.01)


def test_result_raises_the_error_of_a_failed_or_ambiguous_record() -> None:
    core = make_core(retries=1)
    (handle,) = send(core, 1)
    core.handle_request_failure(1, drain_one(core, 0.0), ConnectionLostError("reset"), 0.1)
    core.handle_request_failure(1, drain_one(core, 1.0), ConnectionLostError("reset"), 1.1)
    with pytest.raises(AmbiguousError):
        handle.result()
    assert core.metrics_snapshot().records_ambiguous == 1


def test_a_partition_walks_through_its_phases_and_new_batches_wait_outside_sequencing() -> None:
    core = make_core()
    seq = core.sequencing
    assert isinstance(seq, Sequencer)
    acknowledge_a_first_batch(core, VALUE)
    handles = send(core, 2)
    b0, b1 = (drain_one(core, 0.0)[0] for _ in range(2))
    e = seq.entry(TP)
    assert e.phase is PartitionPhase.SEQUENCING
    # A lost request: b0 is retried (same sequence): RETRYING, and a new batch waits.
    core.handle_request_failure(1, [b0], RequestTimeoutError("lost"), 0.01)
    assert e.phase is PartitionPhase.RETRYING
    send(core, 1, 0.02)
    # The retry waits for b1 (one request at a time), the new batch for the retry.
    assert drain_one(core, 0.5) == []
    # b0's delivery timeout passes in its queue: ambiguous, the partition UNRESOLVED.
    core.expire(200.0)
    assert isinstance(handles[0].outcome, Ambiguous)
    assert e.phase is PartitionPhase.UNRESOLVED
    assert drain_one(core, 200.1) == []  # the new batch still waits
    # b1 lands right after: the sequences line up, back to SEQUENCING (no bump).
    answer(core, [b1], 200.2, base_offset=11)
    core.expire(200.3)
    assert e.phase is PartitionPhase.SEQUENCING
    assert not seq.epoch_bump_required
    send(core, 1, 200.3)  # (the one sent at 0.02 expired unsent meanwhile: Failed)
    (b2,) = drain_one(core, 200.3)
    assert b2.base_sequence == 3
    # Another partition's gap bumps the epoch while b2 is out: OLD_EPOCH until it lands.
    seq.new_producer_id(seq.producer_id, seq.producer_epoch + 1)
    assert e.phase is PartitionPhase.OLD_EPOCH
    answer(core, [b2], 200.4, base_offset=12)
    assert e.phase is PartitionPhase.SEQUENCING
