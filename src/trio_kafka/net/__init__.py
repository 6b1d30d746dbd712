"""I/O on anyio (trio first, asyncio too): transports, broker connections, the shared
selector and cluster metadata.

Everything that touches the OS is behind a seam passed in: the `Transport` (sockets, TLS,
name resolution), the `Clock` and a `random.Random`. The simulator swaps all three.
"""

from __future__ import annotations

from trio_kafka.net._backoff import ExponentialBackoff
from trio_kafka.net._clock import (
    Clock,
    Event,
    LoopClock,
    Primitives,
    Scope,
    TaskGroup,
    TrioClock,
    backend_name,
    checkpoint_function,
    loop_time,
    open_task_group,
    primitives,
    sleep_until,
)
from trio_kafka.net._config import SelectorConfig
from trio_kafka.net._connection import (
    BrokerConnection,
    ConnectionState,
    open_connection,
)
from trio_kafka.net._groups import group_leaves, only_error, sole_error
from trio_kafka.net._metadata import (
    BrokerMetadata,
    ClusterMetadata,
    PartitionMetadata,
    TopicMetadata,
    check_topic_name,
    invalidates_metadata,
    parse_bootstrap,
)
from trio_kafka.net._pending import PendingResponse, expects_response
from trio_kafka.net._sasl import (
    OAuthBearerToken,
    SaslConfig,
    SaslMechanism,
    TokenProvider,
    TokenSource,
)
from trio_kafka.net._selector import KafkaSelector, open_selector
from trio_kafka.net._transport import (
    STREAM_ERRORS,
    AnyioStream,
    ByteStream,
    TcpTransport,
    TlsTransport,
    Transport,
    tls_context,
    trust_of,
)
from trio_kafka.net._versions import (
    CAS_FEATURE,
    TRANSACTION_VERSION_FEATURE,
    ApiVersionsInfo,
)

__all__ = [
    "CAS_FEATURE",
    "STREAM_ERRORS",
    "TRANSACTION_VERSION_FEATURE",
    "AnyioStream",
    "ApiVersionsInfo",
    "BrokerConnection",
    "BrokerMetadata",
    "ByteStream",
    "Clock",
    "ClusterMetadata",
    "ConnectionState",
    "Event",
    "ExponentialBackoff",
    "KafkaSelector",
    "LoopClock",
    "OAuthBearerToken",
    "PartitionMetadata",
    "PendingResponse",
    "Primitives",
    "SaslConfig",
    "SaslMechanism",
    "Scope",
    "SelectorConfig",
    "TaskGroup",
    "TcpTransport",
    "TlsTransport",
    "TokenProvider",
    "TokenSource",
    "TopicMetadata",
    "Transport",
    "TrioClock",
    "backend_name",
    "check_topic_name",
    "checkpoint_function",
    "expects_response",
    "group_leaves",
    "invalidates_metadata",
    "loop_time",
    "only_error",
    "open_connection",
    "open_selector",
    "open_task_group",
    "parse_bootstrap",
    "primitives",
    "sleep_until",
    "sole_error",
    "tls_context",
    "trust_of",
]
