"""ProducerConfig validation: wrong values and contradictions fail at construction."""

from __future__ import annotations

import pytest

from trio_kafka.errors import ConfigError
from trio_kafka.producer import BufferFullStrategy, ProducerConfig


def test_defaults_match_the_java_client_but_batch_size() -> None:
    config = ProducerConfig()
    assert config.acks == -1
    assert config.enable_idempotence is True
    assert config.max_in_flight == 5
    assert config.retry_backoff == 0.1
    assert config.retry_backoff_max == 1.0
    assert config.request_timeout == 30.0
    assert config.delivery_timeout == 120.0
    assert config.linger == 0.005
    assert config.batch_size == 1_000_000  # librdkafka's, not Java's 16 KiB
    assert config.buffer_memory == 32 * 1024 * 1024
    assert config.max_block == 60.0
    assert config.max_request_size == 1024 * 1024
    assert config.transactional_id is None
    assert config.transaction_timeout == 60.0
    assert config.buffer_full_strategy is BufferFullStrategy.BLOCK


def test_acks_all_is_minus_one() -> None:
    assert ProducerConfig(acks="all").acks == -1
    assert ProducerConfig(acks="1", enable_idempotence=False).acks == 1


@pytest.mark.parametrize("acks", [2, "some", -2, True])
def test_bad_acks_names_the_allowed_values(acks: object) -> None:
    with pytest.raises(ConfigError, match=r"acks=.* use 0, 1, -1 or 'all'"):
        ProducerConfig(acks=acks)


def test_idempotence_with_acks_1_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"acks=1 is not allowed with enable_idempotence=True"):
        ProducerConfig(acks=1)


def test_idempotence_with_six_in_flight_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"max_in_flight=6 .* use 1 to 5"):
        ProducerConfig(max_in_flight=6)
    assert ProducerConfig(max_in_flight=6, enable_idempotence=False, acks=1).max_in_flight == 6


def test_transactional_id_needs_idempotence() -> None:
    with pytest.raises(ConfigError, match=r"transactional_id is set but enable_idempotence=False"):
        ProducerConfig(transactional_id="tx", enable_idempotence=False, acks=1)


def test_delivery_timeout_must_cover_linger_and_request_timeout() -> None:
    with pytest.raises(ConfigError, match=r"delivery_timeout=10 .* >= linger \+ request_timeout"):
        ProducerConfig(delivery_timeout=10, request_timeout=30)


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("compression", "brotli", "use one of none, gzip, snappy, lz4, zstd"),
        ("batch_size", 0, "it must be an int > 0"),
        ("linger", -1, "it must be >= 0"),
        ("request_timeout", 0, "it must be > 0"),
        ("buffer_full_strategy", "wait", "use one of block, drop, park"),
        ("partitioner", "round_robin", "use 'sticky', 'leader_aware' or a callable"),
    ],
)
def test_wrong_values_name_the_option_and_what_is_allowed(
    option: str, value: object, message: str
) -> None:
    with pytest.raises(ConfigError, match=rf"{option}=.*{message}"):
        ProducerConfig.from_kwargs(**{option: value})


def test_retry_backoff_max_below_retry_backoff_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"retry_backoff_max=0\.05"):
        ProducerConfig(retry_backoff=0.1, retry_backoff_max=0.05)


def test_unknown_option_suggests_the_closest_name() -> None:
    with pytest.raises(
        ConfigError, match=r"unknown producer option 'linger_ms'; did you mean 'linger'\?"
    ):
        ProducerConfig.from_kwargs(linger_ms=5)
    with pytest.raises(ConfigError, match=r"did you mean 'max_in_flight'"):
        ProducerConfig.from_kwargs(max_inflight=5)


def test_evolve_validates_again() -> None:
    config = ProducerConfig().evolve(linger=0.05)
    assert config.linger == 0.05
    with pytest.raises(ConfigError):
        ProducerConfig().evolve(acks=0)


def test_a_callable_partitioner_is_accepted() -> None:
    assert callable(ProducerConfig(partitioner=lambda record, cluster: 0).partitioner)
