"""ddmin over fault identities: finds small culprits in few replays, keeps the failure
class, is deterministic; fault ids and the replay command."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from tests.conftest import REPO
from trio_kafka.sim.checker import CheckResult, Violation, ViolationKind
from trio_kafka.sim.faults import FaultIdentity, FaultKind
from trio_kafka.sim.minimize import (
    ddmin,
    fault_id,
    keeps_failure,
    minimize_faults,
    parse_fault_ids,
    replay_command,
    resolve_fault_ids,
)


def culprits_test(culprits: set[int]) -> tuple[list[tuple[int, ...]], object]:
    calls: list[tuple[int, ...]] = []

    def still_fails(subset: tuple[int, ...]) -> bool:
        calls.append(subset)
        return culprits <= set(subset)

    return calls, still_fails


@pytest.mark.parametrize("n", [50, 100, 300])
def test_one_culprit_is_found_in_logarithmic_replays(n: int) -> None:
    rng = random.Random(n)
    worst = 0
    for _ in range(20):
        culprit = rng.randrange(n)
        calls, still_fails = culprits_test({culprit})
        result = ddmin(list(range(n)), still_fails)  # type: ignore[arg-type]
        assert result.minimal == (culprit,)
        assert result.replays == len(calls) == len(set(calls))
        worst = max(worst, result.replays)
    # One replay for the empty set, then at most two per halving.
    assert worst <= 1 + 2 * (n - 1).bit_length()


@pytest.mark.parametrize("n", [50, 100, 300])
def test_two_culprits_are_found_in_bounded_replays(n: int) -> None:
    rng = random.Random(1000 + n)
    replays = []
    for _ in range(20):
        pair = set(rng.sample(range(n), 2))
        _, still_fails = culprits_test(pair)
        result = ddmin(list(range(n)), still_fails)  # type: ignore[arg-type]
        assert set(result.minimal) == pair
        replays.append(result.replays)
    # Measured over 200 random pairs: median 33 / 42 / 54 replays, max 43 / 51 / 66 for
    # 50 / 100 / 300 ids (one culprit: median 9 / 11 / 13). research/simulation.md's target
    # is a median of at most 100 replays.
    median_bound, max_bound = {50: (36, 46), 100: (45, 55), 300: (58, 70)}[n]
    assert sorted(replays)[len(replays) // 2] <= median_bound, replays
    assert max(replays) <= max_bound, replays


def test_result_keeps_the_input_order() -> None:
    items = [f"f{i}" for i in range(60)]
    result = ddmin(items, lambda s: "f41" in s and "f7" in s)
    assert result.minimal == ("f7", "f41")


def test_failure_without_faults_takes_one_replay() -> None:
    result = ddmin(list(range(200)), lambda s: True)
    assert result.minimal == ()
    assert result.replays == 1


def test_ddmin_is_deterministic() -> None:
    def run() -> tuple[tuple[int, ...], int]:
        _, still_fails = culprits_test({3, 77, 150})
        result = ddmin(list(range(200)), still_fails)  # type: ignore[arg-type]
        return result.minimal, result.replays

    assert run() == run()
    assert run()[0] == (3, 77, 150)


def test_max_replays_stops_with_the_smallest_failing_subset_so_far() -> None:
    _, still_fails = culprits_test({10, 250})
    result = ddmin(list(range(300)), still_fails, max_replays=3)  # type: ignore[arg-type]
    assert result.replays == 3
    assert {10, 250} <= set(result.minimal)


def result_of(*kinds: ViolationKind) -> CheckResult:
    return CheckResult(tuple(Violation(k, k.value) for k in kinds), {})


def test_minimizing_keeps_the_failure_class() -> None:
    # Faults 5 and 9 together cause a duplicate; fault 5 alone causes a hang. A predicate
    # that accepted any failure would stop at [5], a different bug.
    def run(subset: tuple[int, ...]) -> CheckResult:
        s = set(subset)
        if {5, 9} <= s:
            return result_of(ViolationKind.DUPLICATE, ViolationKind.PENDING)
        if 5 in s:
            return result_of(ViolationKind.PENDING)
        return result_of()

    original = run(tuple(range(40)))
    keeps = keeps_failure(original)
    assert ddmin(list(range(40)), lambda s: keeps(run(s))).minimal == (5, 9)
    assert ddmin(list(range(40)), lambda s: not run(s).ok).minimal == (5,)
    with pytest.raises(ValueError, match="passed"):
        keeps_failure(result_of())


# -- fault ids -------------------------------------------------------------------------------

FAULTS = [
    FaultIdentity(FaultKind.RESET_AFTER_APPLY, "server-write", ("broker-0", 9092, 3, 1)),
    FaultIdentity(FaultKind.ZOMBIE_REQUEST, "client-write", ("broker-1", 9093, 0, 7)),
    FaultIdentity(FaultKind.BUGGIFY, "client.forced_batch_split", (4,)),
    FaultIdentity(FaultKind.CLOG, "swizzle", (2,)),
]


def test_fault_ids_are_short_shell_safe_and_distinct() -> None:
    ids = [fault_id(f) for f in FAULTS]
    assert len(set(ids)) == len(ids)
    for f, i in zip(FAULTS, ids):
        kind, digest = i.rsplit(".", 1)
        assert kind == f.kind.value
        assert len(digest) == 8
        assert all(c.isalnum() or c in "-._" for c in i)


def test_fault_ids_do_not_depend_on_the_process() -> None:
    code = (
        "from trio_kafka.sim.faults import FaultIdentity, FaultKind\n"
        "from trio_kafka.sim.minimize import fault_id\n"
        "print(fault_id(FaultIdentity(FaultKind.CLOG, 'swizzle', (2,))))\n"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={"PYTHONHASHSEED": seed, "PATH": ""},
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert outs == {fault_id(FAULTS[3])}


def test_ids_resolve_back_to_the_identities_that_fired() -> None:
    text = ",".join(fault_id(f) for f in (FAULTS[2], FAULTS[0]))
    assert resolve_fault_ids(parse_fault_ids(text), FAULTS) == (FAULTS[2], FAULTS[0])
    assert resolve_fault_ids(parse_fault_ids("none"), FAULTS) == ()
    with pytest.raises(KeyError, match=r"clog\.00000000"):
        resolve_fault_ids(["clog.00000000"], FAULTS)


def test_replay_command_names_workload_seed_and_faults() -> None:
    assert replay_command("idempotent", 42, FAULTS[:2]) == (
        f"trio-kafka simulate --workload idempotent --seed 42 "
        f"--faults {fault_id(FAULTS[0])},{fault_id(FAULTS[1])}"
    )
    assert (
        replay_command("cas", 7, []) == "trio-kafka simulate --workload cas --seed 7 --faults none"
    )


def test_minimize_faults_reports_the_minimal_list_and_command() -> None:
    fired = FAULTS * 1  # four identities; the zombie and the clog together fail
    out = minimize_faults("transactional", 5, fired, lambda s: FAULTS[1] in s and FAULTS[3] in s)
    assert out.faults == (FAULTS[1], FAULTS[3])
    assert out.before == 4
    assert out.command.endswith(f"--faults {fault_id(FAULTS[1])},{fault_id(FAULTS[3])}")
    text = out.render()
    assert text.startswith(f"minimized 4 -> 2 fault(s) in {out.replays} replays\n")
    assert str(FAULTS[1]) in text
