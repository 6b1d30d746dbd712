"""The mock broker's topic configs are Apache Kafka 4.4's: the same names, defaults,
types and ranges, refused with Kafka's messages (the conformance scenario
`topic_configs` holds them against a Kafka node; these run without one). Each expected
message is the one Kafka 4.4 answered for the same CreateTopics."""

from __future__ import annotations

import pytest

from trio_kafka.broker._topics import KAFKA_TOPIC_CONFIGS, TopicConfig, TopicConfigError


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        (
            "min.insync.replicas",
            "0",
            "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1",
        ),
        (
            "min.insync.replicas",
            "x",
            "Invalid value x for configuration min.insync.replicas: Not a number of type INT",
        ),
        (
            "segment.bytes",
            "2147483648",
            "Invalid value 2147483648 for configuration segment.bytes: Not a number of type INT",
        ),
        (
            "min.cleanable.dirty.ratio",
            "2147483648",
            "Invalid value 2.147483648E9 for configuration min.cleanable.dirty.ratio: Value "
            "must be no more than 1",
        ),
        (
            "cleanup.policy",
            "x",
            "Invalid value x for configuration cleanup.policy: String must be one of: "
            "compact, delete",
        ),
        (
            "compression.type",
            "none",
            "Invalid value none for configuration compression.type: String must be one of: "
            "uncompressed, zstd, lz4, snappy, gzip, producer",
        ),
        (
            "compression.gzip.level",
            "0",
            "Invalid value 0 for configuration compression.gzip.level: Value must be between "
            "1 and 9 or equal to -1",
        ),
        (
            "preallocate",
            "yes",
            "Invalid value yes for configuration preallocate: Expected value to be either "
            "true or false",
        ),
        (
            "follower.replication.throttled.replicas",
            "x",
            "Invalid value [x] for configuration follower.replication.throttled.replicas: "
            "follower.replication.throttled.replicas must be the literal '*' or a list of "
            "replicas in the following format: [partitionId]:[brokerId],[partitionId]:"
            "[brokerId],...",
        ),
        (
            "remote.storage.enable",
            "true",
            "Tiered Storage functionality is disabled in the broker. Topic cannot be "
            "configured with remote log storage.",
        ),
        # Removed in Kafka 4.
        ("message.format.version", "3.0-IV1", "Unknown topic config name: message.format.version"),
        (
            "message.timestamp.difference.max.ms",
            "1000",
            "Unknown topic config name: message.timestamp.difference.max.ms",
        ),
    ],
)
def test_a_value_kafka_refuses_is_refused_with_its_message(
    name: str, value: str, message: str
) -> None:
    with pytest.raises(TopicConfigError) as raised:
        TopicConfig.from_configs({name: value})
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("min.insync.replicas", "2"),
        ("retention.ms", "-1"),
        ("retention.bytes", "-5"),
        ("segment.bytes", " 1048576 "),
        ("min.cleanable.dirty.ratio", "0.25"),
        ("compression.zstd.level", "-3"),
        ("preallocate", "TRUE"),
        ("follower.replication.throttled.replicas", "0:1, 1:2"),
        ("leader.replication.throttled.replicas", "*"),
        ("remote.storage.enable", "false"),
    ],
)
def test_a_value_kafka_accepts_is_kept(name: str, value: str) -> None:
    config = TopicConfig.from_configs({name: value})
    assert config.describe()[name] == (value, False)


def test_an_empty_cleanup_policy_is_accepted_and_compacts_nothing() -> None:
    assert not TopicConfig.from_configs({"cleanup.policy": ""}).compacted
    assert TopicConfig.from_configs({"cleanup.policy": "delete, compact"}).compacted


def test_a_new_topic_describes_kafkas_configs_and_the_cas_one() -> None:
    described = TopicConfig.from_configs({}).describe()
    assert set(described) == {*KAFKA_TOPIC_CONFIGS, "expected.offset.check.enable"}
    assert described["min.insync.replicas"] == ("1", True)
    assert described["segment.bytes"] == ("1073741824", True)
