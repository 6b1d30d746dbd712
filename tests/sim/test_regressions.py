"""Every seed that ever found a real bug (simulations/regressions/*.toml) still passes:
with its full swarm plan, and with its minimized fault list where one is kept."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tests.conftest import REPO
from trio_kafka.sim.minimize import fault_id
from trio_kafka.sim.runner import run_seed

CASES = sorted((REPO / "simulations" / "regressions").glob("*.toml"))


def test_there_are_regression_cases() -> None:
    assert CASES


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_regression_seed_passes(path: Path) -> None:
    case = tomllib.loads(path.read_text())
    assert case["found"].strip(), "say what the seed found"
    workload, seed, profile = case["workload"], case["seed"], case.get("profile", "lite")
    full = run_seed(workload, seed, profile=profile).result
    assert full.ok, full.violations
    wanted = set(case.get("faults", ()))
    if wanted:
        # Ids that no longer fire (the code changed under the seed) are skipped.
        kept = [f for f in full.fired_identities() if fault_id(f) in wanted]
        replay = run_seed(workload, seed, profile=profile, faults=kept).result
        assert replay.ok, replay.violations
