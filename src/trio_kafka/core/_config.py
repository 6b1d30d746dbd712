"""`ProducerConfig`: every producer option, validated once at construction.

Times are float seconds (trio's convention); names mirror the Java client's. The table
below is the reference (Java name, default, meaning).

| option | Java name | default |
| --- | --- | --- |
| `acks` | `acks` | `-1` ("all"; 0, 1, -1 allowed; "all" accepted) |
| `enable_idempotence` | `enable.idempotence` | `True` |
| `max_in_flight` | `max.in.flight.requests.per.connection` | `5` (1-5 with idempotence) |
| `retries` | `retries` | `2**31 - 1` (bounded by `delivery_timeout`) |
| `retry_backoff` | `retry.backoff.ms` | `0.1` |
| `retry_backoff_max` | `retry.backoff.max.ms` | `1.0` |
| `request_timeout` | `request.timeout.ms` | `30.0` |
| `delivery_timeout` | `delivery.timeout.ms` | `120.0` (>= `linger + request_timeout`) |
| `linger` | `linger.ms` | `0.005` (Java 4.0's 5 ms) |
| `batch_size` | `batch.size` | `1_000_000` (librdkafka's; Java's is 16384) |
| `buffer_memory` | `buffer.memory` | `32 MiB` |
| `max_block` | `max.block.ms` | `60.0` |
| `max_request_size` | `max.request.size` | `1 MiB` |
| `compression` | `compression.type` | `"none"` (none, gzip, snappy, lz4, zstd) |
| `compression_level` | `compression.<codec>.level` | `None` (the codec's default) |
| `partitioner` | `partitioner.class` | `"sticky"` (sticky, leader_aware, or a callable) |
| `partitioner_ignore_keys` | `partitioner.ignore.keys` | `False` |
| `partitioner_adaptive` | `partitioner.adaptive.partitioning.enable` | `True` |
| `partitioner_availability_timeout` | `partitioner.availability.timeout.ms` | `0.0` (off) |
| `leader_switch_interval` | (ours: leader-aware partitioner) | `30.0` |
| `client_id` | `client.id` | `"trio-kafka"` |
| `transactional_id` | `transactional.id` | `None` |
| `transaction_timeout` | `transaction.timeout.ms` | `60.0` |
| `metadata_max_age` | `metadata.max.age.ms` | `300.0` |
| `metadata_max_idle` | `metadata.max.idle.ms` | `300.0` |
| `connections_max_idle` | `connections.max.idle.ms` | `540.0` |
| `reconnect_backoff` | `reconnect.backoff.ms` | `0.05` |
| `reconnect_backoff_max` | `reconnect.backoff.max.ms` | `1.0` |
| `close_timeout` | (`close(Duration)`) | `30.0` |
| `buffer_full_strategy` | (Netty producer's names) | `"block"` (block, drop, park) |
| `key_serializer` | `key.serializer` | `None` (bytes pass through) |
| `value_serializer` | `value.serializer` | `None` (bytes pass through) |
| `interceptors` | `interceptor.classes` | `()` |
| `telemetry` | (ours: OpenTelemetry) | `None` (on when an OpenTelemetry provider is set; False: off) |
| `telemetry_headers` | (ours: W3C trace context) | `True` (the send span's context in each record's headers) |

A wrong value or a contradictory combination raises `ConfigError` naming the option and
what is allowed; `from_kwargs` also catches misspelt option names. The field validators
(`must_be_positive`, `must_not_be_negative`, `must_be_flag`, `must_be_str`) are the one
check of an option's value: the selector's and the partition reader's options use them
too, so an option shared with the producer is refused in the same words wherever it is set.
"""

from __future__ import annotations

import difflib
import enum
import math
import re
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from trio_kafka.errors import ConfigError
from trio_kafka.records import BatchBuilder, Compression

# The Java client's names, from the table in this module's docstring: a user coming from
# Java writes `linger.ms` or `linger_ms`, and the error should name our option.
_JAVA_NAMES = {
    java.replace(".", "_"): ours
    for ours, java in re.findall(r"^\| `(\w+)` \| `([\w.]+)` \|", __doc__ or "", re.M)
}


def _hint(name: str, known: list[str]) -> str:
    """What to say after "unknown producer option NAME"."""
    if name in ("bootstrap", "bootstrap_servers", "bootstrap.servers"):
        return "; pass the broker address as the first argument: open_producer('host:9092')"
    flat = name.replace(".", "_")
    ours = _JAVA_NAMES.get(flat) or _JAVA_NAMES.get(flat.removesuffix("_ms"))
    if ours is not None and ours != name:
        unit = "; in seconds here, not milliseconds" if flat.endswith("_ms") else ""
        return f"; did you mean {ours!r}? (the Java client's name{unit})"
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    if close:
        unit = " (in seconds)" if flat.endswith("_ms") else ""
        return f"; did you mean {close[0]!r}{unit}?"
    return f"; the options are: {', '.join(known)}"


class TimeUnitWarning(UserWarning):
    """A time option whose value looks like milliseconds: times here are float seconds."""


# A value at or above this, in seconds, is more likely milliseconds than meant: linger
# of a second or more, backoffs of minutes, timeouts and ages of an hour or more.
_LOOKS_LIKE_MS = {
    "linger": 1.0,
    "retry_backoff": 60.0,
    "reconnect_backoff": 60.0,
    "retry_backoff_max": 600.0,
    "reconnect_backoff_max": 600.0,
    "request_timeout": 3600.0,
    "delivery_timeout": 3600.0,
    "max_block": 3600.0,
    "transaction_timeout": 3600.0,
    "close_timeout": 3600.0,
    "metadata_max_age": 3600.0,
    "metadata_max_idle": 3600.0,
    "connections_max_idle": 3600.0,
    "partitioner_availability_timeout": 3600.0,
    "leader_switch_interval": 3600.0,
}


def _warn_units(options: dict[str, Any]) -> None:
    """Warn (`TimeUnitWarning`) for each time option that looks like milliseconds."""
    for name, value in options.items():
        limit = _LOOKS_LIKE_MS.get(name)
        if (
            limit is None
            or isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)  # no unit makes NaN or infinity right
            or value < limit
        ):
            continue
        java = {ours: java for java, ours in _JAVA_NAMES.items()}.get(name)
        java_name = f" (the Java client's {java.replace('_', '.')} is in ms)" if java else ""
        warnings.warn(
            f"{name}={value!r} is in seconds ({_duration(value)}); did you mean "
            f"{value / 1000:g}?{java_name}",
            TimeUnitWarning,
            stacklevel=4,
        )


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:g} hours"
    if seconds >= 60:
        return f"{seconds / 60:g} minutes"
    return f"{seconds:g} s"


class BufferFullStrategy(enum.Enum):
    """What `send` does when `buffer_memory` is used up (the Netty producer's names)."""

    BLOCK = "block"  # wait up to max_block for room, then BufferFullError
    DROP = "drop"  # fail the record at once with BufferFullError
    PARK = "park"  # accept it without limit (the caller promised to bound its own rate)


_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
_PARTITIONERS = ("sticky", "leader_aware")
_MAX_RETRIES = 2**31 - 1


def _acks(value: object) -> int:
    if value == "all":
        return -1
    if isinstance(value, str) and value.lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or value not in (0, 1, -1):
        raise ConfigError(f"acks={value!r} is not allowed: use 0, 1, -1 or 'all'")
    assert isinstance(value, int)
    return value


_Validator = Callable[[object, "attrs.Attribute[Any]", object], None]


def _wrong_type(name: str, value: object, what: str) -> ConfigError:
    return ConfigError(
        f"{name}={value!r} is not allowed: it must be {what}, not {type(value).__name__}"
    )


def _number(rule: str, holds: Callable[[float], bool]) -> _Validator:
    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        # The type first: `linger='5'` is not "below 0", it is a str.
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _wrong_type(attribute.name, value, f"a number (int or float) {rule}")
        if not holds(value):  # NaN too
            raise ConfigError(f"{attribute.name}={value!r} is not allowed: it must be {rule}")

    return check


must_be_positive = _number("> 0", lambda value: value > 0)
must_not_be_negative = _number(">= 0", lambda value: value >= 0)


def must_be_flag(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    # A str from a config file ("false") would be true: refused, not guessed.
    if not isinstance(value, bool):
        raise _wrong_type(attribute.name, value, "True or False")


def _optional_flag(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        must_be_flag(instance, attribute, value)


def must_be_str(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise _wrong_type(attribute.name, value, "a str")


def _transactional_id(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    must_be_str(instance, attribute, value)
    if not value:
        # Kafka's coordinator answers INVALID_REQUEST to an empty one.
        raise ConfigError(
            "transactional_id='' is not allowed: name the producer (a non-empty str), or "
            "leave it None for a producer without transactions"
        )


def _optional_callable(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not callable(value):
        raise _wrong_type(attribute.name, value, "a callable (or None)")


def _optional_int(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise _wrong_type(attribute.name, value, "an int (or None)")


def _interceptors(value: object) -> tuple[Any, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise _wrong_type("interceptors", value, "a list of interceptors")
    interceptors = tuple(value)
    for interceptor in interceptors:
        # A plain function has neither hook: it would be skipped, silently.
        if not any(
            callable(getattr(interceptor, hook, None)) for hook in ("on_send", "on_acknowledgement")
        ):
            raise ConfigError(
                f"interceptor {interceptor!r} has neither on_send(record) nor "
                "on_acknowledgement(outcome): an interceptor is an object with one or both"
            )
    return interceptors


def must_be_positive_int(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{attribute.name}={value!r} is not allowed: it must be an int > 0")


def _one_of(*allowed: str) -> Callable[[object, attrs.Attribute[Any], object], None]:
    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value not in allowed:
            raise ConfigError(
                f"{attribute.name}={value!r} is not allowed: use one of {', '.join(allowed)}"
            )

    return check


def _partitioner(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not callable(value) and value not in _PARTITIONERS:
        raise ConfigError(
            f"partitioner={value!r} is not allowed: use 'sticky', 'leader_aware' or a "
            "callable (record, cluster_view) -> partition"
        )


def _strategy(value: object) -> BufferFullStrategy:
    try:
        return BufferFullStrategy(value)
    except ValueError:
        allowed = ", ".join(s.value for s in BufferFullStrategy)
        raise ConfigError(
            f"buffer_full_strategy={value!r} is not allowed: use one of {allowed}"
        ) from None


@attrs.frozen(slots=True)
class ProducerConfig:
    """Every producer option (see the module's table for Java names and defaults)."""

    acks: int = attrs.field(default=-1, converter=_acks)
    enable_idempotence: bool = attrs.field(default=True, validator=must_be_flag)
    max_in_flight: int = attrs.field(default=5, validator=must_be_positive_int)
    retries: int = attrs.field(default=_MAX_RETRIES, validator=must_not_be_negative)
    retry_backoff: float = attrs.field(default=0.1, validator=must_not_be_negative)
    retry_backoff_max: float = attrs.field(default=1.0, validator=must_not_be_negative)
    request_timeout: float = attrs.field(default=30.0, validator=must_be_positive)
    delivery_timeout: float = attrs.field(default=120.0, validator=must_be_positive)
    linger: float = attrs.field(default=0.005, validator=must_not_be_negative)
    batch_size: int = attrs.field(default=1_000_000, validator=must_be_positive_int)
    buffer_memory: int = attrs.field(default=32 * 1024 * 1024, validator=must_be_positive_int)
    max_block: float = attrs.field(default=60.0, validator=must_not_be_negative)
    max_request_size: int = attrs.field(default=1024 * 1024, validator=must_be_positive_int)
    compression: str = attrs.field(default="none", validator=_one_of(*_CODECS))
    compression_level: int | None = attrs.field(default=None, validator=_optional_int)
    partitioner: str | Callable[..., int] = attrs.field(default="sticky", validator=_partitioner)
    partitioner_ignore_keys: bool = attrs.field(default=False, validator=must_be_flag)
    partitioner_adaptive: bool = attrs.field(default=True, validator=must_be_flag)
    partitioner_availability_timeout: float = attrs.field(
        default=0.0, validator=must_not_be_negative
    )
    leader_switch_interval: float = attrs.field(default=30.0, validator=must_be_positive)
    client_id: str = attrs.field(default="trio-kafka", validator=must_be_str)
    transactional_id: str | None = attrs.field(default=None, validator=_transactional_id)
    transaction_timeout: float = attrs.field(default=60.0, validator=must_be_positive)
    metadata_max_age: float = attrs.field(default=300.0, validator=must_be_positive)
    metadata_max_idle: float = attrs.field(default=300.0, validator=must_be_positive)
    connections_max_idle: float = attrs.field(default=540.0, validator=must_be_positive)
    reconnect_backoff: float = attrs.field(default=0.05, validator=must_not_be_negative)
    reconnect_backoff_max: float = attrs.field(default=1.0, validator=must_not_be_negative)
    close_timeout: float = attrs.field(default=30.0, validator=must_not_be_negative)
    buffer_full_strategy: BufferFullStrategy = attrs.field(
        default=BufferFullStrategy.BLOCK, converter=_strategy
    )
    key_serializer: Callable[[Any], bytes | None] | None = attrs.field(
        default=None, validator=_optional_callable
    )
    value_serializer: Callable[[Any], bytes | None] | None = attrs.field(
        default=None, validator=_optional_callable
    )
    interceptors: Sequence[Any] = attrs.field(default=(), converter=_interceptors)
    telemetry: bool | None = attrs.field(default=None, validator=_optional_flag)
    telemetry_headers: bool = attrs.field(default=True, validator=must_be_flag)

    def __attrs_post_init__(self) -> None:
        # Cross-option rules, as Java's ProducerConfig.postProcessAndValidateIdempotenceConfigs
        # and KafkaProducer.configureDeliveryTimeout check them.
        if self.transactional_id is not None and not self.enable_idempotence:
            raise ConfigError(
                "transactional_id is set but enable_idempotence=False: a transactional "
                "producer must be idempotent (set enable_idempotence=True)"
            )
        if self.enable_idempotence:
            if self.acks != -1:
                raise ConfigError(
                    f"acks={self.acks} is not allowed with enable_idempotence=True: "
                    "use acks=-1 ('all'), or set enable_idempotence=False"
                )
            if self.max_in_flight > 5:
                raise ConfigError(
                    f"max_in_flight={self.max_in_flight} is not allowed with "
                    "enable_idempotence=True: use 1 to 5"
                )
            if self.retries == 0:
                raise ConfigError(
                    "retries=0 is not allowed with enable_idempotence=True: use retries >= 1"
                )
        if self.delivery_timeout < self.linger + self.request_timeout:
            raise ConfigError(
                f"delivery_timeout={self.delivery_timeout} is not allowed: it must be >= "
                f"linger + request_timeout ({self.linger + self.request_timeout})"
            )
        if self.retry_backoff_max < self.retry_backoff:
            raise ConfigError(
                f"retry_backoff_max={self.retry_backoff_max} is not allowed: it must be >= "
                f"retry_backoff ({self.retry_backoff})"
            )
        if self.reconnect_backoff_max < self.reconnect_backoff:
            raise ConfigError(
                f"reconnect_backoff_max={self.reconnect_backoff_max} is not allowed: it must "
                f"be >= reconnect_backoff ({self.reconnect_backoff})"
            )
        if self.compression_level is not None and self.compression == "none":
            raise ConfigError(
                "compression_level is set but compression='none': choose a codec "
                f"({', '.join(_CODECS[1:])}) or leave compression_level=None"
            )
        # The codec's own check of the level, now: in the sender it failed every batch.
        BatchBuilder(Compression[self.compression.upper()], self.compression_level)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> ProducerConfig:
        """Build from keywords, rejecting unknown names with the closest known one."""
        _check_names(cls, kwargs)
        _warn_units(kwargs)  # first: a ConfigError caused by the unit comes with its hint
        return cls(**kwargs)

    def evolve(self, **changes: Any) -> ProducerConfig:
        """A copy with some options changed (validated again)."""
        _check_names(type(self), changes)
        _warn_units(changes)
        return attrs.evolve(self, **changes)


def _check_names(cls: type[ProducerConfig], kwargs: dict[str, Any]) -> None:
    known = [a.name for a in attrs.fields(cls)]
    for name in kwargs:
        if name not in known:
            raise ConfigError(f"unknown producer option {name!r}{_hint(name, known)}")
