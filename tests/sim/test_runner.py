"""The runner: one seed end to end (the real client against three mock brokers over the
simulated network), each broker fault kind, replays restricted to fault identities,
user workloads, and that a wrong history or a hang is reported."""

from __future__ import annotations

import trio

from trio_kafka.sim.faults import FaultKind
from trio_kafka.sim.history import Fail
from trio_kafka.sim.runner import EXCEPTION, run_seed
from trio_kafka.sim.workloads import WORKLOADS, SimContext, get_workload, register


def test_a_quiet_seed_acknowledges_every_record_and_reads_them_back() -> None:
    out = run_seed("idempotent", 1, rates={})
    r = out.result
    assert r.ok, r.violations
    assert r.ops["ok"] == len(out.history) > 10
    assert r.ops["pending"] == r.ops["fail"] == r.ops["info"] == 0
    assert not any(r.faults.values())
    assert out.check is not None
    assert out.check.counters["read_committed.records"] == len(out.history)
    assert 10.0 <= r.virtual_time < 60.0


def test_broker_crashes_fire_and_the_producer_survives_them() -> None:
    for seed in range(3):
        r = run_seed("idempotent", seed, rates={FaultKind.BROKER_CRASH: 0.15}).result
        assert r.ok, r.violations
        assert r.faults["broker-crash"] >= 1


def test_leader_changes_and_coordinator_moves_fire() -> None:
    r = run_seed(
        "idempotent", 4, rates={FaultKind.LEADER_CHANGE: 0.3, FaultKind.COORDINATOR_MOVE: 0.3}
    ).result
    assert r.ok, r.violations
    assert r.faults["leader-change"] >= 3 and r.faults["coordinator-move"] >= 1


def test_injected_errors_fire_and_every_outcome_stays_true() -> None:
    fired = 0
    for seed in range(3):
        out = run_seed("idempotent", seed, rates={FaultKind.INJECTED_ERROR: 0.3})
        assert out.result.ok, out.result.violations
        fired += out.result.faults["injected-error"]
    assert fired >= 5


def test_buggify_and_a_competing_instance_fire() -> None:
    sites: set[str] = set()
    competitors = 0
    for seed in range(6):
        r = run_seed(
            "idempotent", seed, rates={FaultKind.BUGGIFY: 1.0, FaultKind.COMPETING_INSTANCE: 1.0}
        ).result
        assert r.ok, r.violations
        sites.update(r.buggify_sites)
        competitors += r.faults["competing-instance"]
    assert competitors == 6
    assert "client.tiny_request_timeout" in sites


def test_a_replay_fires_only_the_faults_it_is_given() -> None:
    full = run_seed("idempotent", 11).result
    fired = full.fired_identities()
    assert len(fired) >= 2
    keep = fired[: len(fired) // 2]
    replay = run_seed("idempotent", 11, faults=keep).result
    assert set(replay.fired_identities()) <= set(keep)
    assert replay.restricted
    none = run_seed("idempotent", 11, faults=()).result
    assert not any(none.faults.values()) and none.ok


def test_a_user_workload_is_registered_and_run() -> None:
    @register("test-tiny", topics={"tiny": 1}, description="two records")
    async def tiny(ctx: SimContext) -> None:
        async with ctx.open_producer() as producer:
            for n in range(2):
                await ctx.track_send(producer, "w0", "tiny", ctx.value("w0", n), partition=0)
            await producer.flush()

    try:
        assert get_workload("test-tiny").topics == {"tiny": 1}
        r = run_seed("test-tiny", 0, rates={}).result
        assert r.ok and r.ops["ok"] == 2
    finally:
        del WORKLOADS["test-tiny"]


def test_a_false_failure_in_the_history_is_caught() -> None:
    @register("test-liar", topics={"liar": 1})
    async def liar(ctx: SimContext) -> None:
        async with ctx.open_producer() as producer:
            await (await producer.send("liar", b"written", partition=0))
        # The record is in the log, and the history says it failed.
        from trio_kafka.sim.history import Produce

        op = ctx.history.invoke(Produce("w0", "liar", 0, b"written"))
        ctx.history.complete(op, Fail("Lie"))

    try:
        r = run_seed("test-liar", 0, rates={}).result
        assert r.failure_class == "failed-but-written", r.violations
    finally:
        del WORKLOADS["test-liar"]


def test_running_out_of_virtual_time_is_a_liveness_violation() -> None:
    @register("test-hang", topics={"hang": 1})
    async def hang(ctx: SimContext) -> None:
        async with ctx.open_producer() as producer:
            await ctx.track_send(producer, "w0", "hang", b"v", partition=0)
            await trio.sleep_forever()

    try:
        r = run_seed("test-hang", 0, rates={}).result
        assert "pending" in r.classes
        assert any("budget" in v for v in r.violations)
    finally:
        del WORKLOADS["test-hang"]


def test_an_exception_in_a_workload_fails_the_seed() -> None:
    @register("test-raise", topics={"raise": 1})
    async def boom(ctx: SimContext) -> None:
        raise RuntimeError("workload bug")

    try:
        r = run_seed("test-raise", 0, rates={}).result
        assert r.failure_class == EXCEPTION
        assert "workload bug" in r.violations[0]
    finally:
        del WORKLOADS["test-raise"]
