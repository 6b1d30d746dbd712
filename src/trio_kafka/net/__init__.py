"""I/O on anyio (trio first, asyncio too): broker connections, the shared selector,
cluster metadata and the leader call.

Everything that touches the OS is behind a seam passed in: the `Transport` (sockets, TLS,
name resolution), the `Clock` and a `random.Random`. The simulator swaps all three.

One module per job; a record sent goes through the first three:

- `_clock.py`: the clock and randomness seams, and the running backend's fast paths
  (events, cancel scopes, task groups).
- `_connection.py`: one connection to one broker: the transport seam under it,
  framing, correlation ids, requests in flight, timeouts, version negotiation.
- `_selector.py`: every connection of a process: its options, the nodes, setting up
  their connections (and telling a TLS or SASL listener met in plaintext), reconnect
  backoff, metadata refreshes, waiting for a topic, idle reaping.
- `_metadata.py`: immutable snapshots of the cluster, topic names, bootstrap addresses.
- `_sasl.py`: SASL authentication of a fresh connection.
- `_leader.py`: the one "send to a partition's leader, refresh the metadata, back off,
  retry" call.
- `_groups.py`: exception groups at our context managers' edges.

Exported here: what the other packages of ours use, and the types in those names'
signatures.
"""

from __future__ import annotations

from trio_kafka.net._clock import (
    Clock,
    Event,
    LoopClock,
    Primitives,
    Scope,
    TaskGroup,
    TrioClock,
    checkpoint_function,
    loop_time,
    loop_time_parts,
    open_task_group,
    primitives,
    sleep_until,
)
from trio_kafka.net._connection import (
    CAS_FEATURE,
    TRANSACTION_VERSION_FEATURE,
    ApiVersionsInfo,
    BrokerConnection,
    ByteStream,
    ConnectionState,
    PendingResponse,
    TcpTransport,
    TlsTransport,
    Transport,
    tls_context,
    trust_of,
)
from trio_kafka.net._groups import group_leaves, only_error, sole_error
from trio_kafka.net._leader import (
    Retry,
    ask,
    find_leader,
    leader_of,
    retrying,
    send_to_leader,
)
from trio_kafka.net._metadata import (
    BrokerMetadata,
    ClusterMetadata,
    PartitionMetadata,
    TopicMetadata,
    check_topic_name,
)
from trio_kafka.net._sasl import (
    OAuthBearerToken,
    SaslConfig,
    SaslMechanism,
    TokenProvider,
    TokenSource,
)
from trio_kafka.net._selector import (
    TOPIC_PROPAGATION,
    UNKNOWN_TOPIC_ANSWERS,
    KafkaSelector,
    SelectorConfig,
    open_selector,
)

__all__ = [
    "CAS_FEATURE",
    "TOPIC_PROPAGATION",
    "TRANSACTION_VERSION_FEATURE",
    "UNKNOWN_TOPIC_ANSWERS",
    "ApiVersionsInfo",
    "BrokerConnection",
    "BrokerMetadata",
    "ByteStream",
    "Clock",
    "ClusterMetadata",
    "ConnectionState",
    "Event",
    "KafkaSelector",
    "LoopClock",
    "OAuthBearerToken",
    "PartitionMetadata",
    "PendingResponse",
    "Primitives",
    "Retry",
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
    "ask",
    "check_topic_name",
    "checkpoint_function",
    "find_leader",
    "group_leaves",
    "leader_of",
    "loop_time",
    "loop_time_parts",
    "only_error",
    "open_selector",
    "open_task_group",
    "primitives",
    "retrying",
    "send_to_leader",
    "sleep_until",
    "sole_error",
    "tls_context",
    "trust_of",
]
