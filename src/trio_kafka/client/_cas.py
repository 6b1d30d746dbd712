"""CAS sends: `producer.send(..., expected_offset=N)` and the checks that guard them.

Theory of operation
-------------------
A write with an expected offset is only meaningful on a broker that checks it; any other
broker silently appends the batch wherever the log end happens to be, which is exactly
the failure CAS exists to prevent. So before a CAS record is appended to the producer's
accumulator, `CasGate.check(topic, partition)` makes sure that

1. the partition's leader advertised `expected.offset.cas` (v1) in its ApiVersions
   `SupportedFeatures` (asked on the leader's connection, so it is the broker the batch
   will go to), and
2. the topic has `expected.offset.check.enable=true` (DescribeConfigs, asked once per
   topic and cached for the life of the selector: the config is set at creation and the
   mock broker cannot change it; delete-and-recreate is the one way to lose it, see
   docs/cas.md).

Either failure raises `CasNotSupportedError` saying what to do, and nothing is appended.
One gate per `KafkaSelector` (a weak map), so producers, conditional writers and bulk
loaders that share a selector share the cache.

Limit: the check runs when the record is appended. A leader moving afterwards to a
broker without the extension (a mixed cluster mid-upgrade) is not caught again at drain
time; docs/cas.md says so.

The append itself is the producer's (`Producer._send_conditional`, `_producer.py`): its
slow path with
the expectation passed to the core, which keeps CAS records in batches of their own
whose offsets line up (`[expected, expected + n)`). The outcome comes back on the record's handle:
`Acknowledged` at exactly the expected offset, `ExpectedOffsetMismatchError` (nothing
written; `log_end_offset` says where the log ends), or an `AmbiguousError` (an attempt
may have landed: `AmbiguousWriteError.cause` is the mismatch when a retry met one).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping

from trio_kafka.errors import (
    CasNotSupportedError,
    ErrorCode,
    InvalidPartitionError,
    KafkaError,
    error_for_code,
)
from trio_kafka.net import (
    CAS_FEATURE,
    ApiVersionsInfo,
    ClusterMetadata,
    KafkaSelector,
    check_topic_name,
    find_leader,
)
from trio_kafka.protocol.messages.create_topics import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from trio_kafka.protocol.messages.describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
)

#: The topic config that turns the broker's check on.
CAS_TOPIC_CONFIG = "expected.offset.check.enable"
#: The topic config that bounds a batch: pipelined CAS appends are cut below it.
MAX_MESSAGE_BYTES = "max.message.bytes"
#: The remedy `CasGate.check` names for a CAS send refused: what works on any broker.
SEND_INSTEAD = "send without expected_offset"
_TOPIC_RESOURCE = 2


class CasGate:
    """Checks that CAS writes to a partition will really be checked (see module doc)."""

    def __init__(self, selector: KafkaSelector) -> None:
        # Weakly: `_GATES` keys gates by their selector weakly, and a strong reference
        # back from the value would keep every selector (and all it holds) alive forever.
        self._selector = weakref.ref(selector)
        # Topic -> whether its CAS config is on (learned once from DescribeConfigs).
        self._topics: dict[str, bool] = {}
        # Topic -> its max.message.bytes (None: not reported), learned with the config.
        self._limits: dict[str, int | None] = {}
        # The last ApiVersions answer seen to advertise the CAS feature (a connection's
        # answer does not change: `checked_leader` need not ask it again).
        self._advertised: ApiVersionsInfo | None = None
        # The metadata snapshot, topic, partition and leader `checked_leader` last found
        # checked (the topic's config on, its leader known): a run of CAS sends goes to
        # one partition.
        self._known: tuple[ClusterMetadata, str, int, int] | None = None

    @property
    def selector(self) -> KafkaSelector:
        selector = self._selector()
        if selector is None:
            raise RuntimeError("this CasGate's selector is gone (closed and collected)")
        return selector

    def __repr__(self) -> str:
        return f"<CasGate topics={self._topics!r}>"

    async def check(
        self,
        topic: str,
        partition: int,
        *,
        timeout: float | None = None,
        instead: str = SEND_INSTEAD,
    ) -> int:
        """Raise `CasNotSupportedError` unless `topic`-`partition` is CAS-checked; returns
        the leader's node id. `instead`: what the caller can do without CAS, on the broker
        it has (the error's remedy; Apache Kafka has no CAS)."""
        selector = self.selector
        leader = self.checked_leader(topic, partition)
        if leader is not None:
            return leader
        meta = await selector.wait_for_topic(topic, timeout=timeout)
        if not 0 <= partition < meta.partition_count:
            raise InvalidPartitionError(
                f"partition {partition} of topic {topic!r} does not exist: it has "
                f"{meta.partition_count}"
            )
        leader = await find_leader(selector, topic, partition)
        info = await selector.negotiated_versions(leader)
        if not info.supports_cas:
            features = sorted(info.supported_features)
            raise CasNotSupportedError(
                f"refusing a write with expected_offset to {topic}-{partition}: its leader, "
                f"broker {selector.node_address(leader)} (node {leader}), does not advertise "
                f"the {CAS_FEATURE!r} feature in ApiVersions (it lists {features or 'none'}), "
                "so it would append at whatever offset the log end happens to be. With this "
                f"broker, {instead}. CAS itself needs a broker with the expected-offset "
                "extension (trio-kafka's mock broker: `trio-kafka broker`)."
            )
        enabled = self._topics.get(topic)
        if enabled is None:
            enabled, limit = await topic_cas_config(selector, topic, leader)
            self._topics[topic] = enabled
            self._limits[topic] = limit
        if not enabled:
            raise CasNotSupportedError(
                f"refusing a write with expected_offset to {topic}-{partition}: the topic "
                f"does not have {CAS_TOPIC_CONFIG}=true, so the broker ignores expected "
                f"offsets there. Create the topic with {CAS_TOPIC_CONFIG}=true (e.g. "
                f"`create_topic(selector, {topic!r}, partitions, cas=True)`), or {instead}."
            )
        return leader

    def max_message_bytes(self, topic: str) -> int | None:
        """The largest batch `topic` takes (its `max.message.bytes`, learned by `check`;
        None: not reported, or not checked yet)."""
        return self._limits.get(topic)

    def checked_leader(self, topic: str, partition: int) -> int | None:
        """The partition's leader when everything `check` asks is already known and
        passed (the topic's metadata, its leader with an open connection that advertised
        the feature, the topic's config): the same answer without an await, so a run of
        CAS sends (a commit log's pipelined appends) costs no round of the event loop
        each, nor a coroutine. None: ask `check`, the slow way."""
        selector = self._selector()
        if selector is None:
            return None
        metadata = selector.metadata
        known = self._known
        if (
            known is not None
            and known[0] is metadata  # (a snapshot never changes: a refresh makes a new one)
            and known[2] == partition
            and known[1] == topic
        ):
            leader = known[3]
        else:
            meta = metadata.partition(topic, partition)
            if meta is None or not self._topics.get(topic):
                return None
            leader = meta.leader
            if leader < 0 or leader not in metadata.brokers:
                return None
            self._known = (metadata, topic, partition, leader)
        if not selector.is_ready(leader):
            return None
        info = selector.api_versions(leader)
        if info is not self._advertised:  # (asked once per connection, not per send)
            if info is None or not info.supports_cas:
                return None
            self._advertised = info
        return leader


# One gate per selector, for as long as the selector lives (the gate refers to it weakly).
_GATES: weakref.WeakKeyDictionary[KafkaSelector, CasGate] = weakref.WeakKeyDictionary()


def cas_gate(selector: KafkaSelector) -> CasGate:
    """The selector's gate (made on first use)."""
    gate = _GATES.get(selector)
    if gate is None:
        gate = _GATES[selector] = CasGate(selector)
    return gate


async def describe_topic_config(
    selector: KafkaSelector, topic: str, name: str, node: int | None = None
) -> str | None:
    """The value of topic config `name` (DescribeConfigs; None: not reported). A failed
    request or an error answer raises `KafkaError`."""
    return (await describe_topic_configs(selector, topic, [name], node))[name]


async def describe_topic_configs(
    selector: KafkaSelector, topic: str, names: list[str], node: int | None = None
) -> dict[str, str | None]:
    """The values of topic configs `names`, in one DescribeConfigs (None: not
    reported). A failed request or an error answer raises `KafkaError`."""
    if node is None:
        node = selector.least_loaded_node()
    request = DescribeConfigsRequest(
        resources=[
            DescribeConfigsResource(
                resource_type=_TOPIC_RESOURCE, resource_name=topic, configuration_keys=names
            )
        ]
    )
    response = await selector.request(node, request)
    values: dict[str, str | None] = dict.fromkeys(names)
    for result in response.results:
        if result.resource_name != topic:
            continue
        if result.error_code != ErrorCode.NONE:
            raise error_for_code(result.error_code, result.error_message)
        for config in result.configs:
            if config.name in values:
                values[config.name] = str(config.value) if config.value is not None else None
    return values


async def topic_cas_config(
    selector: KafkaSelector, topic: str, node: int | None = None
) -> tuple[bool, int | None]:
    """Whether `topic` has `expected.offset.check.enable=true`, and its
    `max.message.bytes` (None: not reported), in one DescribeConfigs."""
    try:
        values = await describe_topic_configs(
            selector, topic, [CAS_TOPIC_CONFIG, MAX_MESSAGE_BYTES], node
        )
    except KafkaError as exc:
        raise CasNotSupportedError(
            f"cannot learn whether topic {topic!r} has {CAS_TOPIC_CONFIG}=true: "
            f"DescribeConfigs failed ({exc}); refusing the CAS write"
        ) from exc
    enabled = (values[CAS_TOPIC_CONFIG] or "").strip().lower() == "true"
    limit = values[MAX_MESSAGE_BYTES]
    return enabled, int(limit) if limit is not None and limit.strip().isdigit() else None


async def create_topic(
    selector: KafkaSelector,
    topic: str,
    partitions: int = 1,
    *,
    cas: bool | None = None,
    replication_factor: int = -1,
    exist_ok: bool = True,
    timeout: float = 30.0,
    configs: Mapping[str, str] | None = None,
) -> bool:
    """Create `topic`, with the topic `configs` given (e.g. `{"cleanup.policy":
    "compact"}`); returns False when it already existed (and `exist_ok`).

    `cas`: None (the default) turns the CAS check on (`expected.offset.check.enable=true`)
    where the broker advertises the extension and leaves it out elsewhere (Apache Kafka:
    a plain topic, as `guarantee="auto"` writes with transactions there); True requires
    it (`CasNotSupportedError` before any request on a broker without it); False never
    asks for it. An invalid name raises `InvalidTopicError` before any request, as do
    partitions that are not an int >= 1 (or -1: the broker's default)."""
    check_topic_name(topic)
    if isinstance(partitions, bool) or not isinstance(partitions, int):
        raise TypeError(
            f"partitions must be an int, not {type(partitions).__name__} ({partitions!r})"
        )
    if partitions < 1 and partitions != -1:
        raise ValueError(
            f"partitions={partitions}: a topic needs at least 1 (or -1: the broker's default)"
        )
    settings = dict(configs or {})
    node = selector.least_loaded_node()
    if cas is None:
        cas = (await selector.negotiated_versions(node)).supports_cas
    elif cas:
        info = await selector.negotiated_versions(node)
        if not info.supports_cas:
            raise CasNotSupportedError(
                f"cannot create {topic!r} with CAS: the broker at "
                f"{selector.node_address(node)} does not advertise the {CAS_FEATURE!r} "
                f"feature in ApiVersions (it lists {sorted(info.supported_features) or 'none'}) "
                f"and would refuse {CAS_TOPIC_CONFIG} as an unknown config (Apache Kafka "
                "has no CAS). Create it with cas=False and write with transactions "
                "(guarantee='transactional', or 'auto' which takes CAS only where the "
                "broker has it; `trio-kafka load --guarantee auto`)"
            )
    if cas:
        settings[CAS_TOPIC_CONFIG] = "true"
    creatable = [CreatableTopicConfig(name=n, value=v) for n, v in sorted(settings.items())]
    request = CreateTopicsRequest(
        topics=[
            CreatableTopic(
                name=topic,
                num_partitions=partitions,
                replication_factor=replication_factor,
                configs=creatable,
            )
        ],
        timeout_ms=int(timeout * 1000),
    )
    # CreateTopics must go to the controller; the mock broker and Tansu accept it anywhere.
    response = await selector.request(node, request, timeout=timeout)
    for result in response.topics:
        if result.name != topic:
            continue
        if result.error_code == ErrorCode.TOPIC_ALREADY_EXISTS and exist_ok:
            return False
        if result.error_code != ErrorCode.NONE:
            raise error_for_code(result.error_code, result.error_message or f"creating {topic!r}")
    await selector.refresh_metadata([topic])
    return True


__all__ = [
    "CAS_TOPIC_CONFIG",
    "CasGate",
    "cas_gate",
    "create_topic",
    "describe_topic_config",
    "describe_topic_configs",
    "topic_cas_config",
]
