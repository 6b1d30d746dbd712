"""Searching fault plans with Hypothesis.

Theory of operation
-------------------
A seed sweep takes each seed's fault plan from the seed (`FaultPlan.swarm`: each kind
off or at a rate drawn below the profile's maximum). Here Hypothesis draws the plan
instead: a seed and, for each of the 14 fault kinds, off or a rate up to the profile's
maximum (`plan_cases`), run with `run_seed(workload, seed, rates=...)`. Everything else
about the run (the network, the brokers, which fault fires where) is still a function of
the seed, so a drawn plan replays exactly.

What that buys:

1. **A failure shrinks in plan space, then in fault space.** `search` is
   `hypothesis.find` holding the first failure's class: Hypothesis turns off every kind
   the failure does not need, lowers the rates of the rest and moves the seed towards 0
   (each step one run). ddmin (`minimize.py`) then takes the faults that fired under that
   smaller plan down to a 1-minimal list. The report says which kinds of fault the bug
   needs, not only which twelve faults one seed happened to fire.
2. **Property tests over your own workload.** `@given(plan_cases())` in a pytest suite
   runs the workload under plans Hypothesis picks (and keeps in its example database),
   with its usual reporting of the falsifying example.

A search is deterministic: Hypothesis draws from `random.Random(search_seed)` with no
example database, so the same arguments find and shrink to the same plan.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from trio_kafka.core import Rules
from trio_kafka.sim.faults import PROFILES, FaultIdentity, FaultKind, Profile
from trio_kafka.sim.minimize import ddmin, fault_id, format_rates, replay_command
from trio_kafka.sim.mutants import BUDGET, MUTANTS, Hunt, planted
from trio_kafka.sim.runner import RunOutput, SeedResult, run_seed, still_fails
from trio_kafka.sim.workloads import Workload, get_workload

#: Seeds Hypothesis draws: 4 base-100 digits, 0 to 99,999,999 (shrinking towards 0).
SEED_DIGITS = 4


def _profile(profile: str | Profile) -> Profile:
    if isinstance(profile, Profile):
        return profile
    try:
        return PROFILES[profile]
    except KeyError:
        raise ValueError(f"unknown profile {profile!r} (known: {', '.join(PROFILES)})") from None


def digits(n: int) -> st.SearchStrategy[int]:
    """An integer of `n` base-100 digits, each drawn as `st.integers(0, 99)`, the most
    significant first (so it shrinks towards 0).

    Not one `st.integers` over the whole range: Hypothesis now and then draws an integer
    from the constants in the source of the local modules loaded so far, so what a search
    drew would depend on what the process had imported (the command line and a script
    found different plans with the same arguments). It never takes a constant below 100
    from there, so digits are drawn the same in any process."""
    if n < 1:
        raise ValueError(f"digits: n must be at least 1, not {n}")
    digit = st.integers(min_value=0, max_value=99)
    return st.tuples(*(digit for _ in range(n))).map(
        lambda drawn: sum(d * 100 ** (n - 1 - i) for i, d in enumerate(drawn))
    )


def fault_rates(
    profile: str | Profile = "lite", *, kinds: frozenset[FaultKind] | None = None
) -> st.SearchStrategy[dict[FaultKind, float]]:
    """A rate for every fault kind, drawn as the seed sweep's swarm plans are: off with
    the profile's `kind_off_probability`, else uniform up to the kind's maximum (in 100
    steps); BUGGIFY on (1.0) or off. `kinds`: only these may be on. Shrinks towards
    every kind off.

    (Not `st.floats`: Hypothesis's floats favour edge values, 0, the maximum, subnormal
    numbers, so most kinds would be off or at an edge, and bugs that need several kinds
    at middling rates went unfound.)"""
    prof = _profile(profile)
    off_below = round(100 * prof.kind_off_probability)

    def one(kind: FaultKind) -> st.SearchStrategy[float]:
        top = prof.max_rates.get(kind, 0.0)
        if top <= 0.0 or (kinds is not None and kind not in kinds):
            return st.just(0.0)
        # Drawn first and shrinking to 0: off.
        on = digits(1).map(lambda n: n >= off_below)
        if kind is FaultKind.BUGGIFY:
            return on.map(lambda yes: 1.0 if yes else 0.0)
        return st.tuples(on, digits(1)).map(
            # (rounded: 0.0095, not 0.009500000000000001, in reports and commands)
            lambda drawn: round(top * (drawn[1] + 1) / 100, 12) if drawn[0] else 0.0
        )

    return st.fixed_dictionaries({kind: one(kind) for kind in FaultKind})


@attrs.frozen(slots=True)
class PlanCase:
    """One drawn fault plan: the seed and the rate of each kind (kinds absent are off)."""

    seed: int
    rates: Mapping[FaultKind, float] = attrs.field(hash=False)

    @property
    def kinds_on(self) -> tuple[FaultKind, ...]:
        return tuple(k for k in FaultKind if self.rates.get(k, 0.0) > 0.0)

    def describe(self) -> str:
        return f"seed {self.seed}, rates {format_rates(self.rates)}"

    def run(
        self,
        workload: str | Workload,
        profile: str | Profile = "lite",
        *,
        trace: bool = False,
        rules: Rules | None = None,
    ) -> RunOutput:
        """`run_seed` of this seed under this plan (and `rules`: a planted bug's)."""
        return run_seed(
            workload, self.seed, profile=profile, rates=self.rates, trace=trace, rules=rules
        )

    def replay_command(
        self, workload: str, profile: str, faults: Iterable[FaultIdentity | str] | None = None
    ) -> str:
        """The command that reruns this plan (with exactly `faults`, fault ids or
        identities, when given; None: every fault the plan fires)."""
        return replay_command(
            workload,
            self.seed,
            faults,
            profile=profile,
            rates=self.rates,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "rates": {k.value: r for k, r in self.rates.items() if r > 0.0},
        }


def plan_cases(
    profile: str | Profile = "lite",
    *,
    seeds: st.SearchStrategy[int] | None = None,
    kinds: frozenset[FaultKind] | None = None,
) -> st.SearchStrategy[PlanCase]:
    """Fault plans to run: a seed (from `seeds`, default `digits(4)`) and `fault_rates`."""
    return st.builds(
        PlanCase,
        seed=seeds if seeds is not None else digits(SEED_DIGITS),
        rates=fault_rates(profile, kinds=kinds),
    )


@attrs.frozen(slots=True)
class SearchResult:
    """What `search` found: nothing in `examples` plans, or the first failing plan, the
    plan Hypothesis shrank it to, and the faults ddmin kept of that plan's run."""

    workload: str
    profile: str
    mutant: str | None
    search_seed: int
    #: Distinct plans run before the first failure (all of them when none failed), and
    #: plans Hypothesis drew up to then (it draws some plans more than once: a plan
    #: drawn again is answered from memory, not run again).
    examples: int
    drawn: int = 0
    first: PlanCase | None = None
    first_result: SeedResult | None = None
    shrunk: PlanCase | None = None
    shrunk_result: SeedResult | None = None
    #: Runs Hypothesis spent shrinking the plan, and ddmin's replays after it.
    shrink_runs: int = 0
    minimized: tuple[str, ...] = ()
    minimized_identities: tuple[str, ...] = ()
    replays: int = 0

    @property
    def found(self) -> bool:
        return self.shrunk is not None

    @property
    def replay(self) -> str | None:
        if self.shrunk is None:
            return None
        # Not minimized (no replay): the plan's own run, every fault it fires.
        faults = self.minimized if self.replays else None
        return self.shrunk.replay_command(self.workload, self.profile, faults)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "workload": self.workload,
            "profile": self.profile,
            "mutant": self.mutant,
            "search_seed": self.search_seed,
            "examples": self.examples,
            "drawn": self.drawn,
            "found": self.found,
        }
        if self.first is not None and self.first_result is not None:
            data["first"] = {
                **self.first.to_json(),
                "failure_class": self.first_result.failure_class,
                "fired": len(self.first_result.fired),
            }
        if self.shrunk is not None and self.shrunk_result is not None:
            data["shrunk"] = {
                **self.shrunk.to_json(),
                "failure_class": self.shrunk_result.failure_class,
                "violations": list(self.shrunk_result.violations[:5]),
                "fired": len(self.shrunk_result.fired),
                "shrink_runs": self.shrink_runs,
            }
            data["minimized"] = {
                "faults": list(self.minimized),
                "identities": list(self.minimized_identities),
                "replays": self.replays,
            }
        return data


def search(
    workload: str | Workload,
    *,
    profile: str | Profile = "lite",
    examples: int = 100,
    search_seed: int = 0,
    mutant: str | None = None,
    max_shrink_runs: int = 200,
    max_replays: int | None = 100,
    minimize: bool = True,
) -> SearchResult:
    """Run up to `examples` Hypothesis-drawn plans of `workload`; shrink the first that
    fails (keeping its failure class, at most `max_shrink_runs` more runs), then ddmin its
    faults (at most `max_replays` replays). `mutant`: with that planted bug."""
    if examples < 1:
        raise ValueError(f"examples must be at least 1, not {examples}")
    spec = get_workload(workload) if isinstance(workload, str) else workload
    prof = _profile(profile)

    rules = planted(mutant)  # an unknown mutant fails here, before any run
    runs = drawn = 0
    wanted: str | None = None
    first: tuple[PlanCase, SeedResult] | None = None
    first_at = 0
    results: dict[tuple[int, tuple[float, ...]], SeedResult] = {}

    def key(case: PlanCase) -> tuple[int, tuple[float, ...]]:
        return case.seed, tuple(case.rates.get(k, 0.0) for k in FaultKind)

    def fails(case: PlanCase) -> bool:
        nonlocal runs, drawn, wanted, first, first_at
        if wanted is None:
            drawn += 1
        result = results.get(key(case))
        if result is None:  # (a plan run before is answered as it was: Hypothesis
            # replays the shrunk plan once more at the end)
            if wanted is not None and runs - first_at >= max_shrink_runs:
                return False  # the shrink budget is spent: refuse every further step
            runs += 1
            result = case.run(spec, prof, rules=rules).result
            results[key(case)] = result
        if result.ok:
            return False
        if wanted is None:
            wanted, first, first_at = result.failure_class, (case, result), runs
            return True
        return wanted in result.classes

    config = settings(
        max_examples=examples,
        database=None,
        deadline=None,
        phases=(Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
    )
    base = SearchResult(spec.name, prof.name, mutant, search_seed, examples)
    try:
        shrunk = find(plan_cases(prof), fails, settings=config, random=random.Random(search_seed))
    except NoSuchExample:
        return attrs.evolve(base, examples=runs, drawn=drawn)
    assert first is not None and wanted is not None
    shrunk_result = results[key(shrunk)]
    found = attrs.evolve(
        base,
        examples=first_at,
        drawn=drawn,
        first=first[0],
        first_result=first[1],
        shrunk=shrunk,
        shrunk_result=shrunk_result,
        shrink_runs=runs - first_at,
    )
    if not minimize:
        return found
    test = still_fails(spec, shrunk.seed, prof, wanted, rules=rules)
    cut = ddmin(shrunk_result.fired_identities(), test, max_replays=max_replays)
    return attrs.evolve(
        found,
        minimized=tuple(fault_id(f) for f in cut.minimal),
        minimized_identities=tuple(str(f) for f in cut.minimal),
        replays=cut.replays,
    )


def hunt_by_search(
    mutant: str,
    *,
    budget: int = BUDGET,
    profile: str = "lite",
    search_seed: int = 0,
    minimize: bool = True,
    max_replays: int = 100,
) -> Hunt:
    """`hunt`, with Hypothesis drawing the fault plans (`sim/search.py`): up to `budget`
    draws split between the mutant's workloads, the first failing plan shrunk."""
    description, workloads = MUTANTS[mutant]
    per_workload = max(1, budget // len(workloads))
    run = 0
    for workload in workloads:
        found = search(
            workload,
            profile=profile,
            examples=per_workload,
            search_seed=search_seed,
            mutant=mutant,
            minimize=minimize,
            max_replays=max_replays,
        )
        run += found.examples
        result = found.shrunk_result
        if found.shrunk is None or result is None:
            continue
        return Hunt(
            mutant,
            description,
            True,
            workload,
            found.shrunk.seed,
            run,
            result.failure_class,
            result.violations[0] if result.violations else None,
            len(result.fired),
            found.minimized,
            found.replays,
            f"{found.replay} --mutant {mutant}",
        )
    return Hunt(mutant, description, False, None, None, run)


__all__ = [
    "SEED_DIGITS",
    "PlanCase",
    "SearchResult",
    "digits",
    "fault_rates",
    "hunt_by_search",
    "plan_cases",
    "search",
]
