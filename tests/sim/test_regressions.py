"""Every seed that ever found a real bug (simulations/regressions/*.toml) still passes:
with its full swarm plan, and with its minimized fault list where one is kept, and every
fault that list names fires in the replay (a replay without them proves nothing)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from tests.conftest import REPO
from trio_kafka.sim.faults import FaultIdentity, FaultKind
from trio_kafka.sim.minimize import case_faults, fault_id
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
    wanted = list(case.get("faults", ()))
    if wanted:
        # Raises, naming them, if the full run no longer fires the named faults (and
        # they are not pinned by their identities): re-minimize the seed.
        kept = case_faults(wanted, case.get("fault_identities", ()), full.fired_identities())
        replay = run_seed(workload, seed, profile=profile, faults=kept).result
        assert replay.ok, replay.violations
        fired = {fault_id(f) for f in replay.fired_identities()}
        missing = [i for i in wanted if i not in fired]
        assert not missing, f"{path.name}: the replay never fired {', '.join(missing)}"


# -- the check itself ---------------------------------------------------------------------


def test_a_named_fault_that_no_longer_fires_is_an_error() -> None:
    fired = run_seed("idempotent", 1532, profile="lite").result.fired_identities()
    ghost = FaultIdentity(FaultKind.BROKER_CRASH, "crash", ("no-such-broker",))
    with pytest.raises(KeyError, match=fault_id(ghost)):
        case_faults([fault_id(fired[0]), fault_id(ghost)], (), fired)


def test_a_pinned_identity_whose_id_drifted_is_an_error() -> None:
    identity = FaultIdentity(FaultKind.INJECTED_ERROR, "produce", ("txn", 1, 1000, 0, 1, 0))
    with pytest.raises(ValueError, match=re.escape("not injected-error.00000000")):
        case_faults(["injected-error.00000000"], [identity.to_json()], ())
    assert case_faults([fault_id(identity)], [identity.to_json()], ()) == (identity,)


def test_a_pinned_fault_the_replay_does_not_reach_does_not_fire() -> None:
    # The replay's own check: an identity whose key the run never meets fires nothing,
    # so test_regression_seed_passes would name it.
    ghost = json.dumps(["injected-error", "produce", ["txn", 9, 4242, 0, 1, 0]])
    identity = FaultIdentity.from_json(ghost)
    replay = run_seed("transactional", 16, profile="lite", faults=[identity]).result
    assert fault_id(identity) not in {fault_id(f) for f in replay.fired_identities()}
