"""The pytest tier of the simulator: a few hundred seeds of every built-in workload,
lite profile, zero violations. (The headline runs are `trio-kafka simulate`.)"""

from __future__ import annotations

import pytest

from trio_kafka.sim.faults import FaultKind
from trio_kafka.sim.runner import run_seed
from trio_kafka.sim.workloads import WORKLOADS

#: Seeds per workload (idempotent ~50 ms each on this machine when idle, cas ~4x that,
#: transactional ~5x, bulk ~3x).
SEEDS = {
    "idempotent": range(1000, 1300),
    "cas": range(1000, 1100),
    "transactional": range(1000, 1200),
    "bulk": range(1000, 1200),
}
BUILT_IN = [name for name in WORKLOADS if not name.startswith("test-")]


@pytest.mark.parametrize("workload", BUILT_IN)
def test_lite_seeds_have_no_violations(workload: str) -> None:
    seeds = SEEDS.get(workload, range(1000, 1150))
    failed = []
    kinds = dict.fromkeys(FaultKind, 0)
    for seed in seeds:
        r = run_seed(workload, seed, profile="lite").result
        if not r.ok:
            failed.append((seed, r.failure_class, r.violations[:3]))
        for kind in FaultKind:
            kinds[kind] += r.faults[kind.value] > 0
    assert not failed, failed
    # Every fault kind fired somewhere in the tier.
    assert all(kinds.values()), {k.value: n for k, n in kinds.items()}
