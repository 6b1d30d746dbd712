"""Topic configs: the ones the mock broker acts on, and the ones it only stores.

`TopicConfig.from_configs` validates a CreateTopics config map the way Kafka does (an
unknown name or a bad value is INVALID_CONFIG naming it) and keeps every explicitly set
value for DescribeConfigs. These configs change behaviour:

- `max.message.bytes` (default 1048588, Kafka's): the largest record batch accepted;
  a bigger one is MESSAGE_TOO_LARGE.
- `message.timestamp.type` (`CreateTime` or `LogAppendTime`): with LogAppendTime the broker
  overwrites the batch's timestamps with its clock and answers it in `LogAppendTimeMs`.
- `expected.offset.check.enable` (default false): the CAS extension (docs/cas.md).
- `cleanup.policy`: with `compact`, a record without a key is refused (INVALID_RECORD).
- `message.timestamp.after.max.ms` (default 3600000, Kafka 4's) and
  `message.timestamp.before.max.ms`: a CreateTime record further ahead of (behind) the
  broker's clock is refused (INVALID_TIMESTAMP).

The others (retention, cleanup policy, segment sizes...) are accepted and stored so
clients that set them keep working, but have no effect on an in-memory log.
"""

from __future__ import annotations

import attrs

DEFAULT_MAX_MESSAGE_BYTES = 1048588
#: Kafka 4's defaults: a CreateTime record at most an hour ahead of the broker's clock,
#: and as far behind as it likes.
DEFAULT_TIMESTAMP_AFTER_MAX_MS = 3_600_000
DEFAULT_TIMESTAMP_BEFORE_MAX_MS = 9_223_372_036_854_775_807
CAS_CONFIG = "expected.offset.check.enable"

#: Kafka topic configs accepted and stored (no effect here), with Kafka's defaults.
_STORED_DEFAULTS: dict[str, str] = {
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000",
    "flush.messages": "9223372036854775807",
    "flush.ms": "9223372036854775807",
    "index.interval.bytes": "4096",
    "local.retention.bytes": "-2",
    "local.retention.ms": "-2",
    "max.compaction.lag.ms": "9223372036854775807",
    "message.downconversion.enable": "true",
    "message.format.version": "3.0-IV1",
    "message.timestamp.difference.max.ms": "9223372036854775807",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "min.insync.replicas": "1",
    "preallocate": "false",
    "remote.storage.enable": "false",
    "retention.bytes": "-1",
    "retention.ms": "604800000",
    "segment.bytes": "1073741824",
    "segment.index.bytes": "10485760",
    "segment.jitter.ms": "0",
    "segment.ms": "604800000",
    "unclean.leader.election.enable": "false",
}

_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


class TopicConfigError(ValueError):
    """A topic config name or value Kafka would refuse with INVALID_CONFIG."""


def _parse_bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise TopicConfigError(f"invalid value {value!r} for {name}: expected true or false")
    return lowered == "true"


def _parse_int(name: str, value: str, minimum: int) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise TopicConfigError(f"invalid value {value!r} for {name}: not an integer") from None
    if number < minimum:
        raise TopicConfigError(f"invalid value {value!r} for {name}: must be >= {minimum}")
    return number


@attrs.frozen
class TopicConfig:
    """A topic's configs: the effective ones as fields, the explicit ones in `explicit`."""

    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    log_append_time: bool = False
    expected_offset_check: bool = False
    # `cleanup.policy` names compact: every record needs a key (Kafka's LogValidator).
    compacted: bool = False
    # How far a CreateTime record's timestamp may be ahead of (behind) the broker's clock.
    timestamp_after_max_ms: int = DEFAULT_TIMESTAMP_AFTER_MAX_MS
    timestamp_before_max_ms: int = DEFAULT_TIMESTAMP_BEFORE_MAX_MS
    # Every config set explicitly at creation, name -> value (DescribeConfigs marks these
    # as dynamic topic configs, the rest as defaults).
    explicit: dict[str, str] = attrs.field(factory=dict)

    @classmethod
    def from_configs(
        cls,
        configs: dict[str, str | None],
        *,
        after_max_ms: int = DEFAULT_TIMESTAMP_AFTER_MAX_MS,
        before_max_ms: int = DEFAULT_TIMESTAMP_BEFORE_MAX_MS,
    ) -> TopicConfig:
        """`after_max_ms`, `before_max_ms`: the broker's defaults for the two timestamp
        configs (`ClusterOptions`)."""
        max_bytes = DEFAULT_MAX_MESSAGE_BYTES
        log_append = False
        cas = False
        compacted = False
        after, before = after_max_ms, before_max_ms
        explicit: dict[str, str] = {}
        for name, value in configs.items():
            if value is None:
                continue  # a null value means "use the default", as in Kafka
            if name == "max.message.bytes":
                max_bytes = _parse_int(name, value, 0)
            elif name == "message.timestamp.type":
                if value not in _TIMESTAMP_TYPES:
                    raise TopicConfigError(
                        f"invalid value {value!r} for {name}: expected one of {_TIMESTAMP_TYPES}"
                    )
                log_append = value == "LogAppendTime"
            elif name == CAS_CONFIG:
                cas = _parse_bool(name, value)
            elif name == "message.timestamp.after.max.ms":
                after = _parse_int(name, value, 0)
            elif name == "message.timestamp.before.max.ms":
                before = _parse_int(name, value, 0)
            elif name == "cleanup.policy":
                policies = {policy.strip() for policy in value.split(",")}
                if not policies or not policies <= {"compact", "delete"}:
                    raise TopicConfigError(
                        f"invalid value {value!r} for {name}: expected compact, delete or both"
                    )
                compacted = "compact" in policies
            elif name not in _STORED_DEFAULTS:
                raise TopicConfigError(f"unknown topic config name: {name}")
            explicit[name] = value
        return cls(max_bytes, log_append, cas, compacted, after, before, explicit)

    def describe(self) -> dict[str, tuple[str, bool]]:
        """Every config, name -> (value, is_default)."""
        out = {name: (value, True) for name, value in _STORED_DEFAULTS.items()}
        out["max.message.bytes"] = (str(self.max_message_bytes), True)
        out["message.timestamp.type"] = (
            "LogAppendTime" if self.log_append_time else "CreateTime",
            True,
        )
        out[CAS_CONFIG] = ("true" if self.expected_offset_check else "false", True)
        out["message.timestamp.after.max.ms"] = (str(self.timestamp_after_max_ms), True)
        out["message.timestamp.before.max.ms"] = (str(self.timestamp_before_max_ms), True)
        for name, value in self.explicit.items():
            out[name] = (value, False)
        return out
