"""The mock Kafka broker: in memory, in trio, speaking the real wire protocol.

See `_cluster.py` (how it runs), `_state.py` (what it knows), `handlers/` (one module per
API), `_hooks.py` (how tests intercept requests) and docs/cas.md (the CAS extension).
This module only re-exports.
"""

from __future__ import annotations

from trio_kafka.broker._cluster import (
    Cluster,
    ThreadedCluster,
    open_cluster,
    run_in_thread,
    wall_clock_ms,
)
from trio_kafka.broker._context import RequestContext
from trio_kafka.broker._hooks import BLACKHOLE, DROP, Delay, Hook, HookCall, Phase
from trio_kafka.broker._sasl import MECHANISMS, SaslConfig
from trio_kafka.broker._state import ClusterOptions, ClusterState
from trio_kafka.broker._topics import CAS_CONFIG, TopicConfig
from trio_kafka.broker._txn import TransactionCoordinator, TransactionState

__all__ = [
    "BLACKHOLE",
    "CAS_CONFIG",
    "DROP",
    "MECHANISMS",
    "Cluster",
    "ClusterOptions",
    "ClusterState",
    "Delay",
    "Hook",
    "HookCall",
    "Phase",
    "RequestContext",
    "SaslConfig",
    "ThreadedCluster",
    "TopicConfig",
    "TransactionCoordinator",
    "TransactionState",
    "open_cluster",
    "run_in_thread",
    "wall_clock_ms",
]
