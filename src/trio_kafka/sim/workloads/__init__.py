"""Simulated workloads: the API (`SimContext`, `register`) and the built-in workloads.

See `_api.py` for how to write one. Importing this package registers the built-ins.
"""

from __future__ import annotations

from trio_kafka.sim.workloads import bulk as _bulk
from trio_kafka.sim.workloads import cas as _cas
from trio_kafka.sim.workloads import idempotent as _idempotent
from trio_kafka.sim.workloads import transactional as _transactional
from trio_kafka.sim.workloads._api import (
    WORKLOADS,
    RecordingContext,
    SimContext,
    Workload,
    WorkloadFn,
    get_workload,
    record_send,
    register,
)

del _bulk, _cas, _idempotent, _transactional

__all__ = [
    "WORKLOADS",
    "RecordingContext",
    "SimContext",
    "Workload",
    "WorkloadFn",
    "get_workload",
    "record_send",
    "register",
]
