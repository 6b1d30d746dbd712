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

The others (retention, segment sizes...) are validated as Apache Kafka 4.4 validates
them (`KAFKA_TOPIC_CONFIGS`: each one's type and range, with Kafka's messages; a name it
does not know is refused, as `remote.storage.enable=true` is on a broker without tiered
storage) and stored, so clients that set them keep working, but have no effect on an
in-memory log.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any

import attrs

DEFAULT_MAX_MESSAGE_BYTES = 1048588
#: Kafka 4's defaults: a CreateTime record at most an hour ahead of the broker's clock,
#: and as far behind as it likes.
DEFAULT_TIMESTAMP_AFTER_MAX_MS = 3_600_000
DEFAULT_TIMESTAMP_BEFORE_MAX_MS = 9_223_372_036_854_775_807
CAS_CONFIG = "expected.offset.check.enable"


class TopicConfigError(ValueError):
    """A topic config name or value Kafka would refuse with INVALID_CONFIG."""


@attrs.frozen
class _Config:
    """One of Kafka's topic configs: its type (`ConfigDef.Type`'s name), its default as
    DescribeConfigs shows it, and what it accepts."""

    type: str
    default: str
    #: INT, LONG, DOUBLE: the smallest and largest value accepted (None: no bound).
    low: float | None = None
    high: float | None = None
    #: STRING: the values accepted; LIST: the values each item may take.
    choices: tuple[str, ...] = ()


_INT_RANGE = (-(2**31), 2**31 - 1)
_LONG_RANGE = (-(2**63), 2**63 - 1)
_LONG_MAX = str(2**63 - 1)
_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
_THROTTLED = re.compile(r"\*|\d+:\d+")

#: Apache Kafka 4.4's topic configs, as a node answers DescribeConfigs for a new topic
#: and as it validates CreateTopics (probed in session 24: 24 values of each name against
#: a Kafka 4.4 node; the conformance scenario `topic_configs` holds the described names
#: and defaults and a sample of the refusals). Names not here are "Unknown topic config
#: name" (Kafka 4 removed `message.format.version`, `message.downconversion.enable` and
#: `message.timestamp.difference.max.ms`).
KAFKA_TOPIC_CONFIGS: dict[str, _Config] = {
    "cleanup.policy": _Config("LIST", "delete", choices=("compact", "delete")),
    "compression.gzip.level": _Config("INT", "-1", 1, 9),
    "compression.lz4.level": _Config("INT", "9", 1, 17),
    "compression.type": _Config("STRING", "producer", choices=_COMPRESSION_TYPES),
    "compression.zstd.level": _Config("INT", "3", -131072, 22),
    "delete.retention.ms": _Config("LONG", "86400000", 0),
    "errors.deadletterqueue.group.enable": _Config("BOOLEAN", "false"),
    "file.delete.delay.ms": _Config("LONG", "60000", 0),
    "flush.messages": _Config("LONG", _LONG_MAX, 1),
    "flush.ms": _Config("LONG", _LONG_MAX, 0),
    "follower.replication.throttled.replicas": _Config("LIST", ""),
    "index.interval.bytes": _Config("INT", "4096", 0),
    "leader.replication.throttled.replicas": _Config("LIST", ""),
    "local.retention.bytes": _Config("LONG", "-2", -2),
    "local.retention.ms": _Config("LONG", "-2", -2),
    "max.compaction.lag.ms": _Config("LONG", _LONG_MAX, 1),
    "max.decompressed.message.bytes": _Config("INT", "2147483639", 1),
    "max.message.bytes": _Config("INT", str(DEFAULT_MAX_MESSAGE_BYTES), 0),
    "message.timestamp.after.max.ms": _Config("LONG", str(DEFAULT_TIMESTAMP_AFTER_MAX_MS), 0),
    "message.timestamp.before.max.ms": _Config("LONG", str(DEFAULT_TIMESTAMP_BEFORE_MAX_MS), 0),
    "message.timestamp.type": _Config("STRING", "CreateTime", choices=_TIMESTAMP_TYPES),
    "min.cleanable.dirty.ratio": _Config("DOUBLE", "0.5", 0, 1),
    "min.compaction.lag.ms": _Config("LONG", "0", 0),
    "min.insync.replicas": _Config("INT", "1", 1),
    "preallocate": _Config("BOOLEAN", "false"),
    "remote.copy.lag.bytes": _Config("LONG", "-1", -1),
    "remote.copy.lag.ms": _Config("LONG", "0", -1),
    "remote.log.copy.disable": _Config("BOOLEAN", "false"),
    "remote.log.delete.on.disable": _Config("BOOLEAN", "false"),
    "remote.storage.enable": _Config("BOOLEAN", "false"),
    "retention.bytes": _Config("LONG", "-1"),
    "retention.ms": _Config("LONG", "604800000", -1),
    "segment.bytes": _Config("INT", "1073741824", 1024 * 1024),
    "segment.index.bytes": _Config("INT", "10485760", 4),
    "segment.jitter.ms": _Config("LONG", "0", 0),
    "segment.ms": _Config("LONG", "604800000", 1),
    "unclean.leader.election.enable": _Config("BOOLEAN", "false"),
}

_INTEGER = re.compile(r"[+-]?[0-9]+")


def _refused(name: str, value: str, why: str) -> TopicConfigError:
    return TopicConfigError(f"Invalid value {value} for configuration {name}: {why}")


def _parse(name: str, value: str) -> Any:
    """`value` as Kafka's `ConfigDef` parses and validates config `name` (known), or
    TopicConfigError with Kafka's message."""
    spec = KAFKA_TOPIC_CONFIGS[name]
    text = value.strip()
    kind = spec.type
    if kind == "BOOLEAN":
        if text.lower() not in ("true", "false"):
            raise _refused(name, value, "Expected value to be either true or false")
        return text.lower() == "true"
    if kind == "STRING":
        if text not in spec.choices:
            raise _refused(name, value, f"String must be one of: {', '.join(spec.choices)}")
        return text
    if kind == "LIST":
        items = [item.strip() for item in text.split(",")] if text else []
        if spec.choices:
            for item in items:
                if item not in spec.choices:
                    raise _refused(name, value, f"String must be one of: {', '.join(spec.choices)}")
        elif not all(_THROTTLED.fullmatch(item) for item in items) or (
            "*" in items and len(items) > 1
        ):
            raise _refused(
                name,
                f"[{', '.join(items)}]",
                f"{name} must be the literal '*' or a list of replicas in the following "
                "format: [partitionId]:[brokerId],[partitionId]:[brokerId],...",
            )
        return items
    number: float
    if kind == "DOUBLE":
        try:
            number = float(text) if "_" not in text else math.nan
        except ValueError:
            number = math.nan
        if math.isnan(number) and text.lower() != "nan":
            raise _refused(name, value, "Not a number of type DOUBLE")
    else:
        low, high = _INT_RANGE if kind == "INT" else _LONG_RANGE
        if not _INTEGER.fullmatch(text) or not low <= int(text) <= high:
            raise _refused(name, value, f"Not a number of type {kind}")
        number = int(text)
    if name == "compression.gzip.level":  # Kafka's own validator: 1 to 9, or -1
        if number != -1 and not 1 <= number <= 9:
            raise _refused(name, value, "Value must be between 1 and 9 or equal to -1")
        return number
    # (Kafka names the parsed value: a DOUBLE as Java prints it.)
    shown = _java_double(number) if kind == "DOUBLE" else value
    if spec.low is not None and number < spec.low:
        raise _refused(name, shown, f"Value must be at least {_bound(spec.low)}")
    if spec.high is not None and number > spec.high:
        raise _refused(name, shown, f"Value must be no more than {_bound(spec.high)}")
    return number


def _java_double(number: float) -> str:
    """`Double.toString(number)`: the shortest digits, in E notation outside 1e-3 to
    1e7 (2147483648 is "2.147483648E9")."""
    if not math.isfinite(number) or number == 0 or 1e-3 <= abs(number) < 1e7:
        return repr(number).replace("inf", "Infinity")
    sign, digits, exponent = Decimal(repr(number)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{exponent + len(text) - 1}"


def _bound(limit: float) -> str:
    return str(int(limit)) if limit == int(limit) else str(limit)


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
        parsed: dict[str, Any] = {}
        explicit: dict[str, str] = {}
        for name, value in configs.items():
            if value is None:
                continue  # a null value means "use the default", as in Kafka
            if name == CAS_CONFIG:  # (ours: Kafka knows no such name)
                if value.strip().lower() not in ("true", "false"):
                    raise _refused(name, value, "Expected value to be either true or false")
                parsed[name] = value.strip().lower() == "true"
            elif name in KAFKA_TOPIC_CONFIGS:
                parsed[name] = _parse(name, value)
            else:
                raise TopicConfigError(f"Unknown topic config name: {name}")
            explicit[name] = value
        if parsed.get("remote.storage.enable"):
            raise TopicConfigError(
                "Tiered Storage functionality is disabled in the broker. Topic cannot be "
                "configured with remote log storage."
            )
        return cls(
            max_message_bytes=parsed.get("max.message.bytes", DEFAULT_MAX_MESSAGE_BYTES),
            log_append_time=parsed.get("message.timestamp.type") == "LogAppendTime",
            expected_offset_check=parsed.get(CAS_CONFIG, False),
            compacted="compact" in parsed.get("cleanup.policy", ()),
            timestamp_after_max_ms=parsed.get("message.timestamp.after.max.ms", after_max_ms),
            timestamp_before_max_ms=parsed.get("message.timestamp.before.max.ms", before_max_ms),
            explicit=explicit,
        )

    def describe(self) -> dict[str, tuple[str, bool]]:
        """Every config, name -> (value, is_default)."""
        out = {name: (spec.default, True) for name, spec in KAFKA_TOPIC_CONFIGS.items()}
        out[CAS_CONFIG] = ("true" if self.expected_offset_check else "false", True)
        out["message.timestamp.after.max.ms"] = (str(self.timestamp_after_max_ms), True)
        out["message.timestamp.before.max.ms"] = (str(self.timestamp_before_max_ms), True)
        for name, value in self.explicit.items():
            out[name] = (value, False)
        return out
