"""The planted bugs: switched off everywhere but inside the simulator's mutant runs, and
each is caught from a known seed (the full search is `trio-kafka simulate --mutants`,
see docs/simulator.md for its numbers)."""

from __future__ import annotations

import pytest

from trio_kafka.producer import _mutants
from trio_kafka.sim.mutants import hunt


def test_no_mutant_is_active_outside_the_simulator() -> None:
    assert not _mutants.ACTIVE
    assert not any(_mutants.active(name) for name in _mutants.MUTANTS)


def test_enabled_activates_one_mutant_and_restores_the_empty_set() -> None:
    with _mutants.enabled(_mutants.STALE_END_TXN):
        assert _mutants.active(_mutants.STALE_END_TXN)
        assert not _mutants.active(_mutants.TIMEOUT_NOT_WRITTEN)
    assert not _mutants.ACTIVE
    with pytest.raises(KeyError, match="unknown mutant"), _mutants.enabled("no-such-bug"):
        pass
    assert not _mutants.ACTIVE


def test_every_mutant_names_workloads_that_exist() -> None:
    from trio_kafka.sim.workloads import WORKLOADS

    assert len(_mutants.MUTANTS) >= 8
    for description, workloads in _mutants.MUTANTS.values():
        assert description and workloads
        assert set(workloads) <= set(WORKLOADS)


#: Mutants with a known early killing seed (lite profile): (mutant, first seed, budget).
QUICK = [
    (_mutants.TIMEOUT_NOT_WRITTEN, 0, 6),
    (_mutants.SAME_EPOCH_ON_UNKNOWN_PRODUCER, 62, 4),
    (_mutants.NOT_ENOUGH_REPLICAS_NOT_WRITTEN, 31, 4),
    (_mutants.CAS_REBASE_ON_MISMATCH, 0, 2),
    (_mutants.STALE_END_TXN, 6, 3),
    (_mutants.COMMIT_AFTER_FAILED_SEND, 15, 3),
    (_mutants.V1_END_TXN_EPOCH, 3, 3),
    # Found with `trio-kafka simulate --mutants --mutant NAME --jobs 1 --seeds 1000`.
    (_mutants.RESEND_AFTER_BUMP, 13, 1),
    (_mutants.CAS_MISMATCH_NO_READ, 13, 1),
    (_mutants.REORDER_RETRIES, 251, 1),
    (_mutants.EXPIRE_IN_FLIGHT, 367, 1),
    (_mutants.BULK_WITHOUT_CAS, 43, 1),
    # The seed that found the bug (simulations/regressions/idempotent-lite-904005.toml),
    # and the first the full search finds through BUGGIFY client.forced_epoch_bump.
    (_mutants.NEW_PRODUCER_ID_ON_BUMP, 904005, 1),
    (_mutants.NEW_PRODUCER_ID_ON_BUMP, 471, 1),
    # -- the load pipeline (producer/_load.py) --
    (_mutants.LOAD_LOST_AS_WRITTEN, 17, 2),
    (_mutants.LOAD_RESUME_PAST_CHECKPOINT, 2, 2),
    (_mutants.LOAD_MISMATCH_AS_WRITTEN, 436, 2),
]


def test_every_mutant_has_a_quick_seed() -> None:
    # `make test` must exercise each planted bug: a new mutant needs its catching seed here.
    assert {mutant for mutant, _, _ in QUICK} == set(_mutants.MUTANTS)


@pytest.mark.parametrize(("mutant", "first", "budget"), QUICK, ids=[q[0] for q in QUICK])
def test_a_quick_mutant_is_caught_and_minimized(mutant: str, first: int, budget: int) -> None:
    found = hunt(mutant, budget=budget, first_seed=first, max_replays=12)
    assert found.killed, found
    assert found.failure_class is not None
    assert len(found.minimized) <= found.faults_before
    assert not _mutants.ACTIVE
