"""The one backoff (core/_backoff.py): KIP-580 as Java's `ExponentialBackoff` computes
it, with the draw from the injected source so a simulated run replays exactly."""

from __future__ import annotations

import random

import pytest

from trio_kafka.core import ExponentialBackoff, ProducerConfig, ProducerCore
from trio_kafka.core._backoff import backoff_delay
from trio_kafka.core._transaction import Priority, TxnRequestQueue, Work
from trio_kafka.core._transaction import TxnRequestKind as K
from trio_kafka.errors import ConfigError


class _NoDraws:
    def random(self) -> float:
        raise AssertionError("drew a random number where the delay does not depend on it")


def test_the_delay_doubles_from_initial_within_twenty_percent() -> None:
    for attempt in range(4):
        nominal = 0.1 * 2**attempt
        assert backoff_delay(attempt, 0.0, 0.1, 1.0) == pytest.approx(0.8 * nominal)
        assert backoff_delay(attempt, 0.5, 0.1, 1.0) == pytest.approx(nominal)
        assert backoff_delay(attempt, 0.999999, 0.1, 1.0) == pytest.approx(1.2 * nominal, rel=1e-5)


def test_past_the_maximum_the_delay_is_the_maximum_jittered_downwards() -> None:
    for attempt in (4, 10, 10_000):
        assert backoff_delay(attempt, 0.0, 0.1, 1.0) == pytest.approx(0.8)
        assert backoff_delay(attempt, 0.25, 0.1, 1.0) == pytest.approx(0.9)
        assert backoff_delay(attempt, 0.9, 0.1, 1.0) == 1.0  # never above the maximum


def test_a_maximum_not_above_initial_is_a_constant_without_a_draw() -> None:
    assert ExponentialBackoff(0.5, 0.5).backoff(3, _NoDraws()) == 0.5
    assert ExponentialBackoff(2.0, 0.5).backoff(0, _NoDraws()) == 0.5  # Java: the maximum


def test_the_draw_comes_from_the_source_given() -> None:
    backoff = ExponentialBackoff(0.1, 1.0)
    first = [backoff.backoff(n, random.Random(17)) for n in range(8)]
    again = [backoff.backoff(n, random.Random(17)) for n in range(8)]
    other = [backoff.backoff(n, random.Random(18)) for n in range(8)]
    assert first == again
    assert first != other


def test_without_a_source_there_is_no_jitter() -> None:
    backoff = ExponentialBackoff(0.1, 0.35)
    assert [backoff.backoff(n, None) for n in range(4)] == [0.1, 0.2, 0.35, 0.35]


def test_a_negative_option_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"initial=-0\.1"):
        ExponentialBackoff(-0.1, 1.0)


def test_a_batch_retried_past_the_maximum_still_gets_jitter() -> None:
    # The core pinned every retry past the cap at exactly retry_backoff_max, so batches
    # that failed together kept retrying together; Java jitters the capped term too.
    config = ProducerConfig.from_kwargs(retry_backoff=0.1, retry_backoff_max=1.0)
    delays = {ProducerCore(config, random.Random(seed)).backoff(10) for seed in range(20)}
    assert len(delays) > 1
    assert all(0.8 - 1e-9 <= delay <= 1.0 for delay in delays)


def test_the_transaction_queue_backs_off_with_the_one_backoff_unjittered() -> None:
    queue = TxnRequestQueue(retry_backoff=0.1, retry_backoff_max=1.0)
    work = Work(K.END_TXN, Priority.END_TXN)
    waits = []
    for _ in range(6):
        queue.retry(work, now=0.0)
        waits.append(work.not_before)
        queue.remove(work)
    assert waits == [ExponentialBackoff(0.1, 1.0).backoff(n, None) for n in range(6)]
    assert waits == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
