"""MESSAGE_TOO_LARGE, stepped with `now`: a batch of several records is split and its
pieces sent again in order, under its producer id, epoch and sequences (Java's
`Sender.completeBatch` -> `splitAndReenqueue`); a single record the broker will not take
fails alone with `RecordTooLargeError`, whatever the producer (issue 13: it reached a
non-transactional producer as `AbortableBrokerError`, and nothing was split).
"""

from __future__ import annotations

import random
from typing import Any

from tests.unit._core_steps import answer, drain_one
from trio_kafka.core import (
    Acknowledged,
    Ambiguous,
    ClusterView,
    DeliveryHandle,
    Failed,
    ProducerBatch,
    ProducerConfig,
    ProducerCore,
)
from trio_kafka.errors import ConnectionLostError, ErrorCode, RecordTooLargeError

TP = ("t", 0)
PID = 1000


def make_core(**options: Any) -> ProducerCore:
    options.setdefault("batch_size", 10_000)
    options.setdefault("linger", 0.0)
    options.setdefault("retry_backoff", 0.1)
    config = ProducerConfig.from_kwargs(**options)
    core = ProducerCore(config, random.Random(3), cluster=ClusterView.from_leaders({"t": [1]}))
    if config.enable_idempotence:
        core.set_producer_id(PID, 0, 0.0)
    return core


def send(core: ProducerCore, *values: bytes, now: float = 0.0) -> list[DeliveryHandle]:
    handles = [core.append("t", v, partition=0, now=now) for v in values]
    assert all(h is not None for h in handles)
    return handles  # type: ignore[return-value]


def too_large(core: ProducerCore, batches: list[ProducerBatch], now: float) -> None:
    answer(core, batches, now, error_code=ErrorCode.MESSAGE_TOO_LARGE, error_message="too big")


def test_a_refused_batch_is_split_and_its_pieces_keep_its_id_epoch_and_sequences() -> None:
    core = make_core()
    handles = send(core, *[b"v" * 100] * 4)
    (batch,) = drain_one(core, 0.0)
    assert (batch.record_count, batch.base_sequence) == (4, 0)
    too_large(core, [batch], 0.01)
    assert not any(h.done() for h in handles)  # nothing failed: the pieces go again
    assert core.metrics_snapshot().batch_splits == 1
    pieces = list(core.accumulator.queues[TP])
    assert [(p.producer_id, p.producer_epoch, p.base_sequence, p.record_count) for p in pieces] == [
        (PID, 0, 0, 2),
        (PID, 0, 2, 2),
    ]
    # Sent at once (no backoff), one request at a time, lowest sequence first.
    first = drain_one(core, 0.01)
    assert first == [pieces[0]] and drain_one(core, 0.01) == []
    answer(core, first, 0.02, base_offset=10)
    assert not handles[0].done()  # the handles follow the whole batch
    second = drain_one(core, 0.02)
    assert second == [pieces[1]]
    answer(core, second, 0.03, base_offset=12)
    assert [h.result().offset for h in handles] == [10, 11, 12, 13]
    assert core.metrics_snapshot().records_acknowledged == 4
    assert core.accumulator.buffer_used == 0


def test_new_records_wait_behind_the_pieces_and_continue_their_sequences() -> None:
    core = make_core()
    send(core, *[b"v" * 100] * 4)
    (batch,) = drain_one(core, 0.0)
    (later,) = send(core, b"later", now=0.005)
    too_large(core, [batch], 0.01)
    for offset in (0, 2):
        pieces = drain_one(core, 0.02)
        assert len(pieces) == 1 and pieces[0].base_sequence == offset
        answer(core, pieces, 0.02, base_offset=offset)
    (new,) = drain_one(core, 0.03)
    assert new.base_sequence == 4  # after the pieces' range, which the split kept
    answer(core, [new], 0.04, base_offset=4)
    assert later.result().offset == 4


def test_pieces_are_split_again_until_one_record_too_large_fails_alone() -> None:
    core = make_core()
    values = [b"%02d" % i + b"." * 98 for i in range(10)]
    values[6] = b"HUGE" * 75  # 300 bytes: more than the broker below ever takes
    handles = send(core, *values)
    (batch,) = drain_one(core, 0.0)

    def broker_refuses(piece: ProducerBatch) -> bool:  # a topic taking ~250 bytes
        return piece.size > 250 or any(v == values[6] for _, _, v, _ in piece.records)

    now, offset = 0.0, 0
    too_large(core, [batch], now)
    while not batch.done:
        now += 0.01
        for piece in drain_one(core, now):
            if broker_refuses(piece):
                too_large(core, [piece], now)
            else:
                answer(core, [piece], now, base_offset=offset)
                offset += piece.record_count
        assert now < 10.0, "no progress"
    assert core.metrics_snapshot().batch_splits >= 3  # pieces were split again
    outcomes = [h.outcome for h in handles]
    failed = outcomes.pop(6)
    assert isinstance(failed, Failed) and isinstance(failed.error, RecordTooLargeError)
    assert "MESSAGE_TOO_LARGE" in str(failed.error) and "too big" in str(failed.error)
    assert [o.offset for o in outcomes if isinstance(o, Acknowledged)] == list(range(9))
    # The split batch names the records that did not land, also through pieces that
    # were split again (what `RecordHandle.succeeded()` and `first_error()` read).
    assert batch.record_errors is not None and set(batch.record_errors) == {6}
    assert core.fatal_error is None and core.accumulator.buffer_used == 0


def test_a_single_record_too_large_is_record_too_large_error_without_idempotence() -> None:
    core = make_core(enable_idempotence=False, acks=1)
    (handle,) = send(core, b"x" * 500)
    too_large(core, drain_one(core, 0.0), 0.01)
    outcome = handle.outcome
    assert isinstance(outcome, Failed)
    assert isinstance(outcome.error, RecordTooLargeError)  # not AbortableBrokerError
    assert "a record of" in str(outcome.error) and "t-0" in str(outcome.error)


def test_without_idempotence_the_pieces_go_first_with_no_sequence() -> None:
    core = make_core(enable_idempotence=False, acks=1, max_in_flight=1)
    handles = send(core, *[b"v" * 100] * 3)
    too_large(core, drain_one(core, 0.0), 0.01)
    offset, now = 0, 0.01
    while not handles[0].done():
        now += 0.01
        (piece,) = drain_one(core, now)  # max_in_flight=1: one piece at a time, in order
        assert piece.base_sequence == -1
        answer(core, [piece], now, base_offset=offset)
        offset += piece.record_count
    assert [h.result().offset for h in handles] == [0, 1, 2]


def test_a_cas_batch_is_never_split() -> None:
    core = make_core()
    first = core.append("t", b"v" * 100, partition=0, now=0.0, expected_offset=7)
    second = core.append("t", b"w" * 100, partition=0, now=0.0, expected_offset=8)
    assert first is not None and second is not None and first.batch is second.batch
    too_large(core, drain_one(core, 0.0), 0.01)
    outcome = second.outcome
    assert isinstance(outcome, Failed) and isinstance(outcome.error, RecordTooLargeError)
    assert "a batch of 2 records" in str(outcome.error)
    assert core.metrics_snapshot().batch_splits == 0


def test_a_batch_that_may_have_been_written_is_not_split_but_ambiguous() -> None:
    core = make_core(delivery_timeout=60.0)
    handles = send(core, *[b"v" * 100] * 2)
    (batch,) = drain_one(core, 0.0)
    core.handle_request_failure(1, [batch], ConnectionLostError("reset"), 0.01)
    retry = drain_one(core, 1.0)
    too_large(core, retry, 1.01)  # an earlier attempt may be in the log
    assert all(isinstance(h.outcome, Ambiguous) for h in handles)
    assert core.metrics_snapshot().batch_splits == 0
