"""The planted bugs: broken `Rules` that exist only in the simulator and are in effect
only inside its mutant runs, and each is caught from a known seed (the full search is
`trio-kafka simulate --mutants`, see docs/simulator.md for its numbers)."""

from __future__ import annotations

from pathlib import Path

import pytest

import trio_kafka
from trio_kafka.core import ProducerConfig, ProducerCore, Rules, current_rules
from trio_kafka.core._core import CoreRules
from trio_kafka.sim import mutants as _mutants
from trio_kafka.sim.mutants import BROKEN_RULES, MUTANTS, enabled, hunt


def test_the_client_knows_no_mutants_and_runs_the_rules_it_ships() -> None:
    assert type(current_rules()) is Rules
    package = Path(trio_kafka.__file__).parent
    knowing = [
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if path.parts[len(package.parts)] not in ("sim", "_cli")
        and "mutant" in path.read_text().lower()
    ]
    assert knowing == []


def test_enabled_puts_one_mutants_rules_in_effect_for_the_block_only() -> None:
    import random

    with enabled(_mutants.STALE_END_TXN):
        assert type(current_rules()) is BROKEN_RULES[_mutants.STALE_END_TXN]
        core = ProducerCore(ProducerConfig(), random.Random(0))
    assert type(core.rules) is BROKEN_RULES[_mutants.STALE_END_TXN]  # kept once built
    assert type(current_rules()) is Rules
    assert type(ProducerCore(ProducerConfig(), random.Random(0)).rules) is CoreRules
    with pytest.raises(KeyError, match="unknown mutant"), enabled("no-such-bug"):
        pass
    assert type(current_rules()) is Rules


def test_every_mutant_breaks_a_rule_and_names_workloads_that_exist() -> None:
    from trio_kafka.sim.workloads import WORKLOADS

    assert set(BROKEN_RULES) == set(MUTANTS)
    for name, (description, workloads) in MUTANTS.items():
        assert description and workloads
        assert set(workloads) <= set(WORKLOADS)
        broken = BROKEN_RULES[name]
        overridden = [m for m in vars(broken) if callable(getattr(Rules, m, None))]
        assert overridden, f"{name} breaks no rule"


#: Mutants with a known early killing seed (lite profile): (mutant, first seed, budget).
QUICK = [
    (_mutants.TIMEOUT_NOT_WRITTEN, 0, 6),
    (_mutants.SAME_EPOCH_ON_UNKNOWN_PRODUCER, 62, 4),
    (_mutants.NOT_ENOUGH_REPLICAS_NOT_WRITTEN, 31, 4),
    (_mutants.CAS_REBASE_ON_MISMATCH, 0, 2),
    (_mutants.STALE_END_TXN, 6, 3),
    (_mutants.COMMIT_AFTER_FAILED_SEND, 15, 3),
    # Found with `trio-kafka simulate --mutants --mutant NAME --jobs 1 --seeds 1000`.
    (_mutants.RESEND_AFTER_BUMP, 13, 1),
    (_mutants.CAS_MISMATCH_NO_READ, 30, 1),
    (_mutants.REORDER_RETRIES, 3, 1),
    (_mutants.EXPIRE_IN_FLIGHT, 367, 1),
    (_mutants.BULK_WITHOUT_CAS, 138, 1),
    (_mutants.CAS_PIPELINED_SAME_OFFSET, 61, 1),
    (_mutants.CAS_RESEND_BEHIND_FAILED, 4, 1),
    # The seed that found the bug (simulations/regressions/idempotent-lite-904005.toml),
    # and the first the full search finds through BUGGIFY client.forced_epoch_bump.
    (_mutants.NEW_PRODUCER_ID_ON_BUMP, 904005, 1),
    (_mutants.NEW_PRODUCER_ID_ON_BUMP, 471, 1),
    # -- the load pipeline (core/_load.py) --
    (_mutants.LOAD_LOST_AS_WRITTEN, 22, 2),
    (_mutants.LOAD_RESUME_PAST_CHECKPOINT, 143, 2),
    (_mutants.LOAD_RESUME_FROM_ABORTED, 2, 1),
    (_mutants.LOAD_RESTREAM_ON, 56, 1),
    (_mutants.LOAD_MISMATCH_AS_WRITTEN, 138, 2),
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
    assert type(current_rules()) is Rules
