"""ProducerConfig validation: wrong values and contradictions fail at construction."""

from __future__ import annotations

import pytest

from trio_kafka.core import BufferFullStrategy, ProducerConfig, TimeUnitWarning
from trio_kafka.errors import ConfigError


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
        # The type first, not "below 0" (linger='5' said "it must be >= 0").
        ("linger", "5", r"must be a number \(int or float\) >= 0, not str"),
        ("request_timeout", "30", r"must be a number \(int or float\) > 0, not str"),
        ("linger", float("nan"), "it must be >= 0"),
        # These went through and failed later: at the first use, or a minute later.
        ("client_id", 5, "it must be a str, not int"),
        ("transactional_id", 5, "it must be a str, not int"),
        ("transactional_id", "", "name the producer"),
        ("key_serializer", "utf8", r"it must be a callable \(or None\), not str"),
        ("value_serializer", b"json", r"it must be a callable \(or None\), not bytes"),
        ("enable_idempotence", "false", "it must be True or False, not str"),
        ("partitioner_adaptive", 0, "it must be True or False, not int"),
        ("interceptors", 5, "it must be a list of interceptors, not int"),
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


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        (
            "linger",
            5,
            "linger=5 is in seconds (5 s); did you mean 0.005? (the Java client's linger.ms is in ms)",
        ),
        ("linger", 1.0, "linger=1.0 is in seconds (1 s); did you mean 0.001?"),
        (
            "request_timeout",
            30000,
            "request_timeout=30000 is in seconds (8.33333 hours); did you mean 30?",
        ),
        ("max_block", 60000, "max_block=60000 is in seconds (16.6667 hours); did you mean 60?"),
        (
            "retry_backoff",
            100,
            "retry_backoff=100 is in seconds (1.66667 minutes); did you mean 0.1?",
        ),
        ("transaction_timeout", 60000, "did you mean 60?"),
    ],
)
def test_a_time_that_looks_like_milliseconds_warns_naming_the_unit(
    option: str, value: float, message: str
) -> None:
    options: dict[str, object] = {option: value}
    if option in ("linger", "request_timeout"):
        options["delivery_timeout"] = 10**9  # >= linger + request_timeout
    if option == "retry_backoff":
        options["retry_backoff_max"] = 500
    with pytest.warns(TimeUnitWarning) as caught:
        config = ProducerConfig.from_kwargs(**options)
    assert getattr(config, option) == value  # a warning, not a refusal
    assert message in str(caught[0].message)


def test_times_in_seconds_do_not_warn() -> None:
    # pyproject's filterwarnings=error turns any warning here into a failure.
    ProducerConfig.from_kwargs(
        linger=0.5, request_timeout=30.0, delivery_timeout=120.0, max_block=600.0
    )
    ProducerConfig().evolve(linger=0.05)


def test_evolve_warns_only_for_the_options_it_changes() -> None:
    with pytest.warns(TimeUnitWarning, match="linger=2"):
        config = ProducerConfig.from_kwargs(linger=2)
    with pytest.warns(TimeUnitWarning) as caught:
        config.evolve(max_block=7200)
    assert [str(w.message).split("=")[0] for w in caught] == ["max_block"]


def test_the_java_name_still_gets_its_did_you_mean() -> None:
    with pytest.raises(ConfigError, match="did you mean 'linger'"):
        ProducerConfig.from_kwargs(**{"linger.ms": 5})


def test_a_compression_level_must_be_an_int() -> None:
    with pytest.raises(ConfigError, match=r"compression_level='9'.*an int \(or None\), not str"):
        ProducerConfig(compression="gzip", compression_level="9")  # type: ignore[arg-type]


def test_nan_and_infinity_do_not_warn_about_milliseconds() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ConfigError):
            ProducerConfig.from_kwargs(linger=float("nan"))
        ProducerConfig.from_kwargs(max_block=float("inf"))


def test_an_interceptor_without_either_hook_is_refused() -> None:
    # A function passed as an interceptor was skipped at every send, silently.
    with pytest.raises(ConfigError, match="has neither on_send"):
        ProducerConfig(interceptors=[lambda record: record])


@pytest.mark.parametrize(
    ("codec", "level", "message"),
    [("gzip", 99, "outside -1..9 for gzip"), ("snappy", 1, "snappy takes no level")],
)
def test_a_compression_level_the_codec_refuses_is_refused_here(
    codec: str, level: int, message: str
) -> None:
    # It passed, and then every batch failed to encode in the sender.
    with pytest.raises(ConfigError, match=message):
        ProducerConfig(compression=codec, compression_level=level)
