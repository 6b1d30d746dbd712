"""The fault model without trio: swarm plans, content-addressed decisions, the log, BUGGIFY."""

from __future__ import annotations

import pytest

from trio_kafka.sim.faults import (
    BUGGIFY_SITES,
    LITE,
    PROFILES,
    STANDARD,
    Buggify,
    BuggifyRegistry,
    Coverage,
    FaultDecider,
    FaultIdentity,
    FaultKind,
    FaultPlan,
)
from trio_kafka.sim.rand import Draws, key_head, keyed

SEEDS = 500
#: Decisions asked per kind per seed in the coverage sweep.
ASKS = 30


def swarm(seed: int) -> FaultDecider:
    draws = Draws(seed)
    return FaultDecider(FaultPlan.swarm(draws, STANDARD), draws)


def ask_everything(decider: FaultDecider) -> None:
    """What a run does, in miniature: every kind asked at ASKS places; BUGGIFY through
    its own helper at every registered site."""
    for kind in FaultKind:
        if kind is FaultKind.BUGGIFY:
            continue
        for i in range(ASKS):
            decider.fires(kind, "site", "broker-0", i, now=1.0)
    buggify = Buggify(decider, now=lambda: 1.0)
    for site in BUGGIFY_SITES.names():
        for _ in range(ASKS):
            buggify(site)


def test_every_kind_has_a_rate_in_every_profile() -> None:
    assert set(PROFILES) == {"lite", "standard"}
    for profile in (LITE, STANDARD):
        assert set(profile.max_rates) == set(FaultKind)
        assert all(0 < r <= 1 for r in profile.max_rates.values())
        assert 0 < profile.fault_phase < profile.budget
    assert len(FaultKind) == 14
    assert sum(k.is_network for k in FaultKind) == 8


def test_swarm_rates_differ_per_seed_and_each_seed_turns_some_kinds_off() -> None:
    plans = [FaultPlan.swarm(Draws(seed), STANDARD) for seed in range(100)]
    vectors = {tuple(p.rates[k] for k in FaultKind) for p in plans}
    assert len(vectors) == 100
    off_counts = [sum(1 for k in FaultKind if p.rates[k] == 0) for p in plans]
    assert min(off_counts) >= 0 and max(off_counts) >= 6
    # Off about kind_off_probability of the time, per kind.
    for kind in FaultKind:
        off = sum(p.rates[kind] == 0 for p in plans)
        assert 15 <= off <= 50, (kind, off)
    # Same seed, same plan.
    assert FaultPlan.swarm(Draws(3), STANDARD).rates == plans[3].rates


def test_each_kind_fires_in_at_least_one_percent_of_500_seeds() -> None:
    coverage = Coverage()
    for seed in range(SEEDS):
        decider = swarm(seed)
        ask_everything(decider)
        coverage.add_run(decider.log)
    assert coverage.seeds == SEEDS
    assert coverage.never_fired() == []
    for kind, seeds in coverage.kinds.items():
        assert seeds >= SEEDS // 100, (kind, seeds)
    # Swarm: no kind fires in every seed.
    assert max(coverage.kinds.values()) < SEEDS
    for site, seeds in coverage.site_report().items():
        assert SEEDS // 100 <= seeds < SEEDS // 2, (site, seeds)


def test_decisions_are_content_addressed_not_ordered() -> None:
    plan = FaultPlan.fixed({FaultKind.RESET_AFTER_APPLY: 0.3}, STANDARD)
    keys = [("client", "broker-1", 9092, c, w) for c in range(10) for w in range(10)]
    forward = FaultDecider(plan, Draws(11))
    fired = {k for k in keys if forward.fires(FaultKind.RESET_AFTER_APPLY, "w", *k, now=0)}
    # Asked in another order, and only every other key: the same answers.
    backward = FaultDecider(plan, Draws(11))
    subset = keys[::-2]
    again = {k for k in subset if backward.fires(FaultKind.RESET_AFTER_APPLY, "w", *k, now=0)}
    assert again == fired & set(subset)
    assert 10 < len(fired) < 50


def test_a_restricted_plan_fires_exactly_its_identities() -> None:
    decider = swarm(5)
    ask_everything(decider)
    fired = decider.log.identities()
    assert len(fired) >= 3
    dropped = fired[1]
    replay = FaultDecider(decider.plan.restricted_to(set(fired) - {dropped}), Draws(5))
    ask_everything(replay)
    assert replay.log.identities() == tuple(i for i in fired if i != dropped)
    # Restriction ignores rates: a kind that is off still fires if its identity is named.
    forced = FaultIdentity(FaultKind.CLOG, "swizzle", (0,))
    quiet = FaultPlan.fixed({}, STANDARD).restricted_to([forced])
    d = FaultDecider(quiet, Draws(5))
    assert d.fires(FaultKind.CLOG, "swizzle", 0, now=0)
    assert not d.fires(FaultKind.CLOG, "swizzle", 1, now=0)
    assert quiet.may_fire(FaultKind.CLOG) and not quiet.may_fire(FaultKind.LATENCY)


def test_nothing_fires_after_the_fault_phase() -> None:
    plan = FaultPlan.fixed({FaultKind.BROKER_CRASH: 1.0}, STANDARD, fault_phase_end=10.0)
    decider = FaultDecider(plan, Draws(1))
    assert decider.fires(FaultKind.BROKER_CRASH, "tick", 0, now=9.99)
    assert not decider.fires(FaultKind.BROKER_CRASH, "tick", 1, now=10.0)
    assert not decider.fires(FaultKind.BROKER_CRASH, "tick", 2, now=50.0)
    assert [e.time for e in decider.log.entries] == [9.99]
    swarm_plan = FaultPlan.swarm(Draws(1), STANDARD, start=5.0)
    assert swarm_plan.fault_phase_end == 5.0 + STANDARD.fault_phase


def test_the_log_keeps_firing_order_times_and_distinct_identities() -> None:
    decider = FaultDecider(FaultPlan.fixed({FaultKind.INJECTED_ERROR: 1.0}, STANDARD), Draws(2))
    for t, p in [(1.0, 3), (2.0, 1), (3.0, 3)]:
        decider.fires(FaultKind.INJECTED_ERROR, "produce", "topic", p, now=t)
    log = decider.log
    assert [e.time for e in log.entries] == [1.0, 2.0, 3.0]
    assert [i.key for i in log.identities()] == [("topic", 3), ("topic", 1)]
    assert log.count_by_kind()[FaultKind.INJECTED_ERROR] == 3
    assert log.lines()[0] == "1.0 injected-error@produce['topic', 3]"


def test_fault_identities_round_trip_through_json() -> None:
    identity = FaultIdentity(FaultKind.ZOMBIE_REQUEST, "client-write", ("c", "b", 9092, 0, 3))
    assert FaultIdentity.from_json(identity.to_json()) == identity
    assert sorted([identity, FaultIdentity(FaultKind.CLOG, "swizzle", (1,))])[0].kind is (
        FaultKind.CLOG
    )


def test_fault_parameters_are_fixed_by_the_identity() -> None:
    a = FaultDecider(FaultPlan.fixed({}, STANDARD), Draws(9))
    b = FaultDecider(FaultPlan.fixed({}, STANDARD), Draws(9))
    assert a.param(FaultKind.ZOMBIE_REQUEST, "delay", "w", 1, 2) == b.param(
        FaultKind.ZOMBIE_REQUEST, "delay", "w", 1, 2
    )
    assert a.param(FaultKind.ZOMBIE_REQUEST, "delay", "w", 1, 2) != a.param(
        FaultKind.ZOMBIE_REQUEST, "delay", "w", 1, 3
    )


# -- BUGGIFY ----------------------------------------------------------------------------------


def test_buggify_activates_a_quarter_of_sites_and_fires_on_a_quarter_of_their_calls() -> None:
    site = "client.forced_batch_split"
    seeds, calls = 2000, 40
    active_seeds = 0
    fired_calls = 0
    for seed in range(seeds):
        decider = FaultDecider(FaultPlan.fixed({FaultKind.BUGGIFY: 1.0}, STANDARD), Draws(seed))
        buggify = Buggify(decider, now=lambda: 0.0)
        results = [buggify(site) for _ in range(calls)]
        if buggify.active(site):
            active_seeds += 1
            fired_calls += sum(results)
        else:
            assert not any(results)
    assert 0.22 <= active_seeds / seeds <= 0.28
    assert 0.22 <= fired_calls / (active_seeds * calls) <= 0.28


def test_buggify_is_off_when_the_plan_turns_it_off_or_the_phase_is_over() -> None:
    decider = FaultDecider(FaultPlan.fixed({}, STANDARD), Draws(1))
    buggify = Buggify(decider, now=lambda: 0.0)
    assert not any(buggify("client.tiny_request_timeout") for _ in range(200))
    late = FaultDecider(
        FaultPlan.fixed({FaultKind.BUGGIFY: 1.0}, STANDARD, fault_phase_end=1.0), Draws(1)
    )
    assert not any(Buggify(late, now=lambda: 2.0)(s) for s in BUGGIFY_SITES.names() * 50)


def test_buggify_rejects_unregistered_sites() -> None:
    buggify = Buggify(swarm(1), now=lambda: 0.0)
    with pytest.raises(KeyError, match=r"no\.such\.site"):
        buggify("no.such.site")


def test_buggify_replays_exactly_the_calls_a_minimizer_kept() -> None:
    registry = BuggifyRegistry()
    for name in ("a", "b", "c"):
        registry.register(name, name)
    decider = FaultDecider(FaultPlan.fixed({FaultKind.BUGGIFY: 1.0}, STANDARD), Draws(4))
    buggify = Buggify(decider, now=lambda: 0.0, registry=registry)
    first = [(s, buggify(s)) for s in ["a", "b", "c"] * 200]
    fired = decider.log.identities()
    assert fired, "some site fires in 600 calls"
    keep = fired[::2]
    replay = FaultDecider(decider.plan.restricted_to(keep), Draws(4))
    again = Buggify(replay, now=lambda: 0.0, registry=registry)
    second = [(s, again(s)) for s in ["a", "b", "c"] * 200]
    assert replay.log.identities() == keep
    assert sum(f for _, f in second) == len(keep) <= sum(f for _, f in first)


def test_registry_refuses_one_name_with_two_meanings() -> None:
    registry = BuggifyRegistry()
    registry.register("x", "one thing")
    registry.register("x", "one thing")
    with pytest.raises(ValueError, match="twice"):
        registry.register("x", "another thing")


def test_a_draw_keyed_by_its_keys_text_is_the_same_draw() -> None:
    # The network keeps the text of a connection's key and adds a chunk or write number
    # (`key_head`, `keyed`): the draws must be those of the key itself, or every seed
    # would change.
    draws = Draws(12345)
    conn_key = ("p0", "broker-1", 9092, 3)
    for last in (0, 7, 12345):
        key = (*conn_key, "c2s", last)
        text = keyed(key_head(*conn_key, "c2s"), last)
        assert text == repr(key)
        assert draws.uniform_keyed("latency", text) == draws.uniform("latency", *key)
        for p in (0.0, 0.3, 0.9):
            assert draws.chance_keyed(p, "fault.x", text) == draws.chance(p, "fault.x", *key)
    with pytest.raises(ValueError, match="two items"):
        key_head("alone")
