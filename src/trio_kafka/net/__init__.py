"""trio I/O: transports, broker connections, the shared selector and cluster metadata.

Everything that touches the OS is behind a seam passed in: the `Transport` (sockets, TLS,
name resolution), the `Clock` and a `random.Random`. The simulator swaps all three.
"""

from __future__ import annotations

from trio_kafka.net._backoff import ExponentialBackoff
from trio_kafka.net._clock import Clock, TrioClock
from trio_kafka.net._config import SelectorConfig
from trio_kafka.net._connection import (
    BrokerConnection,
    ConnectionState,
    PendingResponse,
    expects_response,
    open_connection,
)
from trio_kafka.net._groups import only_error
from trio_kafka.net._metadata import (
    BrokerMetadata,
    ClusterMetadata,
    PartitionMetadata,
    TopicMetadata,
    check_topic_name,
    invalidates_metadata,
    parse_bootstrap,
)
from trio_kafka.net._sasl import SaslConfig, SaslMechanism
from trio_kafka.net._selector import KafkaSelector, open_selector
from trio_kafka.net._transport import TcpTransport, TlsTransport, Transport, tls_context
from trio_kafka.net._versions import (
    CAS_FEATURE,
    TRANSACTION_VERSION_FEATURE,
    ApiVersionsInfo,
)

__all__ = [
    "CAS_FEATURE",
    "TRANSACTION_VERSION_FEATURE",
    "ApiVersionsInfo",
    "BrokerConnection",
    "BrokerMetadata",
    "Clock",
    "ClusterMetadata",
    "ConnectionState",
    "ExponentialBackoff",
    "KafkaSelector",
    "PartitionMetadata",
    "PendingResponse",
    "SaslConfig",
    "SaslMechanism",
    "SelectorConfig",
    "TcpTransport",
    "TlsTransport",
    "TopicMetadata",
    "Transport",
    "TrioClock",
    "check_topic_name",
    "expects_response",
    "invalidates_metadata",
    "only_error",
    "open_connection",
    "open_selector",
    "parse_bootstrap",
    "tls_context",
]
