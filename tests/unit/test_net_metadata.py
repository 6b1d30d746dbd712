"""Metadata snapshots, bootstrap parsing, the refresh-worthy errors and backoff (pure)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_kafka.core import ExponentialBackoff
from trio_kafka.errors import (
    BrokerConnectionError,
    ConfigError,
    ConnectionLostError,
    ErrorCode,
    RequestTimeoutError,
    error_for_code,
)
from trio_kafka.net import ClusterMetadata
from trio_kafka.net._metadata import invalidates_metadata, parse_bootstrap
from trio_kafka.protocol.messages.metadata import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)


def response(leader: int, epoch: int, *, topic: str = "t") -> MetadataResponse:
    return MetadataResponse(
        brokers=[MetadataResponseBroker(node_id=n, host=f"b{n}", port=9092) for n in (1, 2)],
        topics=[
            MetadataResponseTopic(
                name=topic,
                partitions=[
                    MetadataResponsePartition(
                        partition_index=0, leader_id=leader, leader_epoch=epoch
                    )
                ],
            )
        ],
    )


def test_a_response_becomes_a_snapshot_with_leaders() -> None:
    snapshot = ClusterMetadata().with_response(response(2, 5), now=1.0, requested=["t"])
    leader = snapshot.leader_for("t", 0)
    assert leader is not None and leader.address == "b2:9092"
    assert snapshot.leader_for("t", 1) is None
    assert snapshot.leader_for("other", 0) is None
    assert snapshot.updated_at == 1.0


def test_an_older_leader_epoch_does_not_replace_the_cached_partition() -> None:
    fresh = ClusterMetadata().with_response(response(2, 5), now=1.0, requested=["t"])
    stale = fresh.with_response(response(1, 4), now=2.0, requested=["t"])
    assert stale.partition("t", 0) == fresh.partition("t", 0)
    newer = fresh.with_response(response(1, 6), now=3.0, requested=["t"])
    leader = newer.leader_for("t", 0)
    assert leader is not None and leader.node_id == 1


def test_topics_not_requested_keep_their_cached_entry() -> None:
    first = ClusterMetadata().with_response(response(1, 0, topic="a"), now=1.0, requested=["a"])
    second = first.with_response(response(1, 0, topic="b"), now=2.0, requested=["b"])
    assert sorted(second.topics) == ["a", "b"]


@pytest.mark.parametrize(
    ("servers", "expected"),
    [
        ("a:1,b:2", [("a", 1), ("b", 2)]),
        (" a:1 , b:2 ,", [("a", 1), ("b", 2)]),
        (["a:1", "b:2"], [("a", 1), ("b", 2)]),
        ("[::1]:9092", [("::1", 9092)]),
        # A listener's scheme, as the Java client and librdkafka take it.
        ("PLAINTEXT://a:1,tcp://b:2", [("a", 1), ("b", 2)]),
    ],
)
def test_bootstrap_servers_parse(servers: str | list[str], expected: list[tuple[str, int]]) -> None:
    assert parse_bootstrap(servers) == expected


@pytest.mark.parametrize("servers", ["", "a", "a:", ":1", "a:x", "a:0", "a:70000", []])
def test_bad_bootstrap_servers_name_the_bad_value(servers: str | list[str]) -> None:
    with pytest.raises(ConfigError):
        parse_bootstrap(servers)


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        ("SSL://a:1", r"without SSL:// \(for SSL, pass security_protocol='SSL'\)"),
        ("http://a:1", "give host:port without http://"),
        (b"a:1", "not bytes"),
        (9092, "not int"),
        ([("a", 1)], r"\('a', 1\) is not a 'host:port' str but a tuple"),
    ],
)
def test_a_bootstrap_of_the_wrong_form_says_what_is_wrong(servers: object, message: str) -> None:
    # A scheme was taken for part of the host, bytes and tuples raised AttributeError.
    with pytest.raises(ConfigError, match=message):
        parse_bootstrap(servers)  # type: ignore[arg-type]


def test_which_errors_mean_refresh_the_metadata() -> None:
    assert invalidates_metadata(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert invalidates_metadata(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert invalidates_metadata(ErrorCode.LEADER_NOT_AVAILABLE)
    assert not invalidates_metadata(ErrorCode.NOT_ENOUGH_REPLICAS)
    assert not invalidates_metadata(ErrorCode.EXPECTED_OFFSET_MISMATCH)
    assert invalidates_metadata(error_for_code(ErrorCode.NOT_LEADER_OR_FOLLOWER))
    assert not invalidates_metadata(error_for_code(ErrorCode.INVALID_PRODUCER_EPOCH))
    assert invalidates_metadata(ConnectionLostError("x"))
    assert invalidates_metadata(RequestTimeoutError("x"))
    assert invalidates_metadata(BrokerConnectionError("x"))
    assert not invalidates_metadata(ValueError("x"))


@settings(max_examples=100)
@given(attempts=st.integers(0, 50), seed=st.integers(0, 2**32))
def test_backoff_stays_within_jitter_of_the_exponential_term(attempts: int, seed: int) -> None:
    backoff = ExponentialBackoff(0.05, 1.0)
    value = backoff.backoff(attempts, random.Random(seed))
    term = min(0.05 * 2**attempts, 1.0)
    assert 0.8 * term - 1e-12 <= value <= min(1.2 * term, 1.0) + 1e-12


def test_backoff_is_a_function_of_the_rng() -> None:
    backoff = ExponentialBackoff(0.05, 1.0)
    a = [backoff.backoff(n, random.Random(3)) for n in range(8)]
    b = [backoff.backoff(n, random.Random(3)) for n in range(8)]
    assert a == b


def test_backoff_config_is_checked() -> None:
    with pytest.raises(ConfigError):
        ExponentialBackoff(-1.0, 1.0)
    with pytest.raises(ConfigError):
        ExponentialBackoff(0.1, 1.0, jitter=1.5)
    assert ExponentialBackoff(0.0, 0.0).backoff(3, random.Random(0)) == 0.0


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("request_timeout", "5", r"request_timeout='5' .* must be a number \(int or float\)"),
        ("client_id", 1, "client_id=1 is not allowed: it must be a str, not int"),
        ("allow_auto_create_topics", "no", "allow_auto_create_topics='no' .* True or False"),
    ],
)
def test_a_selector_option_of_the_wrong_type_names_it(
    option: str, value: object, message: str
) -> None:
    # request_timeout="5" raised a bare TypeError from the comparison; client_id=1 failed
    # every connection's encoding until max_block ran out.
    from trio_kafka.net import SelectorConfig

    with pytest.raises(ConfigError, match=message):
        SelectorConfig(bootstrap_servers="a:1", **{option: value})


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("max_wait", "5", r"max_wait='5' is not allowed: it must be a number \(int or float\)"),
        ("max_bytes", 0, "max_bytes=0 is not allowed: it must be > 0"),
    ],
)
def test_a_reader_option_out_of_range_or_of_the_wrong_type_names_it(
    option: str, value: object, message: str
) -> None:
    # max_wait="5" raised a bare TypeError from the comparison ('<' between str and int).
    from trio_kafka import PartitionReader

    with pytest.raises(ConfigError, match=message):
        PartitionReader(None, **{option: value})  # type: ignore[arg-type]
