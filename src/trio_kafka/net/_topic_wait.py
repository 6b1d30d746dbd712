"""`wait_for_topic`: wait until a topic's metadata has partitions, or say why it never
will (invalid, unknown after a few answers, or no broker answering at all). The
selector's `wait_for_topic` calls it; it uses the selector only through
`MetadataSource`, so this module does not import the selector's.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Protocol

import anyio

from trio_kafka.errors import (
    BrokerConnectionError,
    ConnectionLostError,
    ErrorCode,
    InvalidTopicError,
    UnknownTopicError,
    error_info,
)
from trio_kafka.net._backoff import ExponentialBackoff
from trio_kafka.net._clock import Clock
from trio_kafka.net._config import SelectorConfig
from trio_kafka.net._metadata import ClusterMetadata, TopicMetadata, check_topic_name

# wait_for_topic: this many Metadata answers saying UNKNOWN_TOPIC_OR_PARTITION (the
# broker did not auto-create it), spread over at least TOPIC_PROPAGATION seconds, end the
# wait before max_block. Topic creation reaches the brokers asynchronously, so one answer
# is not enough (librdkafka waits topic.metadata.propagation.max.ms, 30 s, for this);
# the window is short because a user waiting on a typo'd topic waits all of it.
UNKNOWN_TOPIC_ANSWERS = 3
TOPIC_PROPAGATION = 2.0


class MetadataSource(Protocol):
    """What waiting for a topic uses of the selector (`KafkaSelector` is one)."""

    config: SelectorConfig
    clock: Clock
    rng: random.Random
    metadata: ClusterMetadata

    async def refresh_metadata(self, topics: Iterable[str] = ()) -> ClusterMetadata: ...


async def wait_for_topic(
    selector: MetadataSource, topic: str, timeout: float | None
) -> TopicMetadata:
    """`KafkaSelector.wait_for_topic` (its docstring says what it does)."""
    found = selector.metadata.topic(topic)
    if found is None:
        check_topic_name(topic)  # a known topic is valid: checked only when unknown
    timeout = selector.config.max_block if timeout is None else timeout
    deadline = selector.clock.now() + timeout
    retry = ExponentialBackoff(selector.config.retry_backoff, selector.config.retry_backoff_max)
    attempts = 0
    unknown_answers = 0
    unknown_since: float | None = None
    last_error: BaseException | None = None
    while found is None or not found.is_usable:
        with anyio.CancelScope(deadline=deadline):
            try:
                await selector.refresh_metadata([topic])
            except BrokerConnectionError as exc:
                last_error = exc
            else:
                found = selector.metadata.topic(topic)
                code = ErrorCode.NONE if found is None else found.error_code
                if code == ErrorCode.INVALID_TOPIC_EXCEPTION:
                    raise InvalidTopicError(
                        f"topic {topic!r} is invalid: the broker answers "
                        "INVALID_TOPIC_EXCEPTION for it (a reserved or illegal name)",
                        topic=topic,
                    )
                if found is None or code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    if unknown_since is None:
                        unknown_since = selector.clock.now()
                    unknown_answers += 1
                    if (
                        unknown_answers >= UNKNOWN_TOPIC_ANSWERS
                        and selector.clock.now() - unknown_since >= TOPIC_PROPAGATION
                    ):
                        elapsed = timeout - max(deadline - selector.clock.now(), 0.0)
                        raise UnknownTopicError(
                            _unknown_topic_message(selector, topic, elapsed, found, None),
                            topic=topic,
                        )
            found = selector.metadata.topic(topic)
            if found is not None and found.is_usable:
                break
            await anyio.sleep(retry.backoff(attempts, selector.rng))
            attempts += 1
        if selector.clock.now() >= deadline:
            message = _unknown_topic_message(selector, topic, timeout, found, last_error)
            if selector.metadata.updated_at is None:
                raise BrokerConnectionError(message) from last_error
            raise UnknownTopicError(message, topic=topic)
    return found


def _unknown_topic_message(
    selector: MetadataSource,
    topic: str,
    timeout: float,
    found: TopicMetadata | None,
    last_error: BaseException | None,
) -> str:
    if found is not None and found.error_code:
        why = f"the brokers answer {error_info(found.error_code).name} for it"
    elif found is not None:
        why = "it has no partitions yet"
    elif selector.metadata.updated_at is None:
        # Nothing answered at all: the topic is not the problem, the address is.
        servers = ",".join(f"{host}:{port}" for host, port in selector.config.bootstrap_servers)
        why = (
            f" ({last_error})"
            if last_error is not None
            else " (connections hang or nothing answers on them)"
        )
        if last_error is not None and isinstance(last_error.__cause__, ConnectionLostError):
            # Connected, then closed by the other end: something listens there.
            return (
                f"no Kafka broker answered within {timeout:.1f} s, so topic {topic!r} could "
                f"not be looked up{why}. Something at {servers} accepts connections but "
                "closes them: a listener that requires SASL or TLS closes a client that "
                "has neither (set security_protocol=..., see docs/security.md), or it is "
                "not a Kafka broker"
            )
        return (
            f"no Kafka broker answered within {timeout:.1f} s, so topic {topic!r} could "
            f"not be looked up{why}. Is a broker running at {servers}? "
            "Check the host and port (bootstrap=), or start "
            "trio-kafka's mock broker there: `trio-kafka broker --port "
            f"{selector.config.bootstrap_servers[0][1]}`"
        )
    else:
        why = "the brokers do not know it"
    return (
        f"topic {topic!r} is not in the metadata after {timeout:.1f} s ({why}). Create "
        "it (CreateTopics, `kafka-topics.sh --create`, trio_kafka.client.create_topic), "
        "enable auto-creation on the broker, or check the topic name and the client's ACLs"
    )


__all__ = ["TOPIC_PROPAGATION", "UNKNOWN_TOPIC_ANSWERS", "MetadataSource", "wait_for_topic"]
