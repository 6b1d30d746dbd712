"""The selector's configuration (names and defaults follow the Java client's)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from trio_kafka.errors import ConfigError
from trio_kafka.net._connection import (
    DEFAULT_MAX_FRAME_SIZE,
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_REQUEST_TIMEOUT,
)
from trio_kafka.net._metadata import parse_bootstrap
from trio_kafka.net._sasl import SaslConfig


def _bootstrap(value: str | Iterable[str]) -> tuple[tuple[str, int], ...]:
    return tuple(parse_bootstrap(value))


def _number(attribute: attrs.Attribute[Any], value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(
            f"{attribute.name} must be a number (int or float), not "
            f"{type(value).__name__} ({value!r})"
        )
    return value


def _positive(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not _number(attribute, value) > 0:
        raise ConfigError(f"{attribute.name} must be positive, not {value!r}")


def _not_negative(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not _number(attribute, value) >= 0:
        raise ConfigError(f"{attribute.name} must not be negative, not {value!r}")


def _text(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise ConfigError(f"{attribute.name} must be a str, not {type(value).__name__} ({value!r})")


def _flag(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool):
        raise ConfigError(
            f"{attribute.name} must be True or False, not {type(value).__name__} ({value!r})"
        )


@attrs.frozen(slots=True)
class SelectorConfig:
    """Times are seconds (floats), as everywhere in trio."""

    #: "host:port,host:port" or a list of "host:port": where to find the first broker.
    bootstrap_servers: tuple[tuple[str, int], ...] = attrs.field(converter=_bootstrap)
    client_id: str = attrs.field(default="trio-kafka", validator=_text)
    #: request.timeout.ms: how long a written request may wait for its response.
    request_timeout: float = attrs.field(default=DEFAULT_REQUEST_TIMEOUT, validator=_positive)
    #: max.in.flight.requests.per.connection.
    max_in_flight: int = attrs.field(default=DEFAULT_MAX_IN_FLIGHT, validator=_positive)
    #: reconnect.backoff.ms and reconnect.backoff.max.ms (50 ms, 1 s).
    reconnect_backoff: float = attrs.field(default=0.05, validator=_not_negative)
    reconnect_backoff_max: float = attrs.field(default=1.0, validator=_not_negative)
    #: retry.backoff.ms and retry.backoff.max.ms (100 ms, 1 s): between metadata retries.
    retry_backoff: float = attrs.field(default=0.1, validator=_not_negative)
    retry_backoff_max: float = attrs.field(default=1.0, validator=_not_negative)
    #: connections.max.idle.ms (9 minutes).
    connections_max_idle: float = attrs.field(default=540.0, validator=_positive)
    #: metadata.max.age.ms (5 minutes).
    metadata_max_age: float = attrs.field(default=300.0, validator=_positive)
    #: metadata.max.idle.ms (5 minutes): a topic unused this long leaves the metadata.
    metadata_max_idle: float = attrs.field(default=300.0, validator=_positive)
    #: max.block.ms: how long to wait for a topic to appear in the metadata.
    max_block: float = attrs.field(default=60.0, validator=_not_negative)
    #: socket.connection.setup.timeout.ms: TCP connect plus TLS handshake.
    connection_setup_timeout: float = attrs.field(default=10.0, validator=_positive)
    #: allow.auto.create.topics (the producer's default is true).
    allow_auto_create_topics: bool = attrs.field(default=True, validator=_flag)
    sasl: SaslConfig | None = None
    max_frame_size: int = attrs.field(default=DEFAULT_MAX_FRAME_SIZE, validator=_positive)
