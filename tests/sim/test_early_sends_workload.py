"""The simulator on sends that wait for their topic's metadata, from several tasks: the
`test-early-sends` workload (tests/sim/early_sends_workload.py) over fresh seeds, every
idempotent invariant held. Before the waiting sends were queued in call order
(client/_unknown_topics.py), every seed of it failed I3 (reorder): the tasks appended in the
order they woke."""

from __future__ import annotations

from tests.sim import early_sends_workload  # noqa: F401  (registers the workload)
from trio_kafka.sim.runner import run_seed

SEEDS = range(80_000, 80_050)


def test_early_sends_seeds_land_in_call_order() -> None:
    for seed in SEEDS:
        result = run_seed("test-early-sends", seed, profile="lite").result
        assert result.ok, f"seed {seed}: {result.violations}"
