"""The simulator on batches the broker refuses for some of their records: the
`test-compacted` workload (tests/sim/compacted_workload.py) over fresh seeds, every
idempotent invariant held while the producer fails each keyless record alone and sends
its batch's other records again (in 40 seeds, about 1,300 such batches)."""

from __future__ import annotations

from tests.sim import compacted_workload  # noqa: F401  (registers the workload)
from trio_kafka.sim.runner import run_seed

SEEDS = range(81_000, 81_040)


def test_keyless_records_fail_alone_and_their_neighbours_land_once_in_order() -> None:
    for seed in SEEDS:
        result = run_seed("test-compacted", seed, profile="lite").result
        assert result.ok, f"seed {seed}: {result.violations}"
