"""A user's own workload, as docs/simulator.md tells them to write it: run from the CLI
(`--import`, `--workload module:function`), within a time budget, and refused loudly
when it checks nothing (it recorded no operation, or its topic holds records no
operation explains). And the checker catches an application that resends a value after
an ambiguous outcome."""

from __future__ import annotations

import json
import os
import shlex
import sys
import textwrap
from pathlib import Path

import attrs
import pytest
import trio
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings

from trio_kafka._cli import simulate_workers
from trio_kafka._cli.simulate_options import default_jobs, parse_duration
from trio_kafka.cli import main
from trio_kafka.sim.runner import NO_OPERATIONS, UNEXPLAINED_RECORDS, run_seed
from trio_kafka.sim.search import PlanCase, plan_cases, search
from trio_kafka.sim.workloads import SimContext, Workload

USER_MODULE = textwrap.dedent(
    '''
    """A user's workloads (written from docs/simulator.md)."""
    from __future__ import annotations

    import contextlib

    import trio

    from trio_kafka.errors import KafkaError
    from trio_kafka.core import Ambiguous
    from trio_kafka.sim.history import Produce, outcome_from_delivery
    from trio_kafka.sim.workloads import SimContext, register


    @register("user-orders", topics={"orders": 2}, description="a user's write path")
    async def orders(ctx: SimContext) -> None:
        async with ctx.open_producer("p0") as producer:
            n = 0
            # trio's clock, as ctx.fault_phase_end is (ctx.wall_clock() is epoch seconds).
            while trio.current_time() < ctx.fault_phase_end:
                await ctx.track_send(producer, "w0", "orders", ctx.value("w0", n))
                n += 1
                await trio.sleep(0.5)
            await producer.flush()


    def helper() -> None:
        """Not a workload."""


    async def _settle(producer, value):
        handle = await producer.send("orders", value, partition=0)
        with contextlib.suppress(KafkaError):
            await handle
        return handle.outcome


    @register("user-resend", topics={"orders": 1}, description="resends after ambiguity")
    async def resend(ctx: SimContext) -> None:
        """The application bug: an Ambiguous send is sent again, blindly."""
        async with ctx.open_producer("p0", request_timeout=0.5, delivery_timeout=1.2) as p:
            n = 0
            while trio.current_time() < ctx.fault_phase_end:
                value = ctx.value("w0", n)
                op = ctx.history.invoke(
                    Produce("w0", "orders", 0, value), time=trio.current_time()
                )
                outcome = await _settle(p, value)
                if isinstance(outcome, Ambiguous):
                    outcome = await _settle(p, value)
                ctx.history.complete(op, outcome_from_delivery(outcome), time=trio.current_time())
                n += 1
    '''
)


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "user_orders_wl.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "user_orders_wl"


# -- loud failures ---------------------------------------------------------------------


async def _wrong_clock(ctx: SimContext) -> None:
    """The loop a user wrote from the old docs: wall clock (epoch seconds, ~1.7e9) against
    the fault phase's end (trio's virtual clock, ~30): it never sends."""
    async with ctx.open_producer("p0") as producer:
        n = 0
        while ctx.wall_clock() < ctx.fault_phase_end:
            await ctx.track_send(producer, "w0", "orders", ctx.value("w0", n))
            n += 1


async def _unrecorded(ctx: SimContext) -> None:
    """Records one op on one topic, writes another topic without recording."""
    async with ctx.open_producer("p0") as producer:
        await ctx.track_send(producer, "w0", "audit", ctx.value("w0", 0))
        for n in range(5):
            await producer.send("orders", ctx.value("hidden", n))
        await producer.flush()


def test_a_workload_that_recorded_no_operation_fails() -> None:
    spec = Workload("wrong-clock", _wrong_clock, {"orders": 1})
    result = run_seed(spec, 1).result
    assert result.failure_class == NO_OPERATIONS
    assert "trio.current_time()" in result.violations[-1]
    assert sum(result.ops.values()) == 0


def test_records_that_no_operation_explains_fail() -> None:
    spec = Workload("unrecorded", _unrecorded, {"orders": 1, "audit": 1})
    result = run_seed(spec, 1).result
    assert result.failure_class == UNEXPLAINED_RECORDS
    assert "orders-0 holds 5 record(s)" in " ".join(result.violations)


async def _right_clock(ctx: SimContext) -> None:
    async with ctx.open_producer("p0") as producer:
        n = 0
        while trio.current_time() < ctx.fault_phase_end:
            await ctx.track_send(producer, "w0", "orders", ctx.value("w0", n))
            n += 1
            await trio.sleep(0.5)
        await producer.flush()


def test_the_documented_loop_sends_through_the_fault_phase_and_passes() -> None:
    spec = Workload("right-clock", _right_clock, {"orders": 1})
    result = run_seed(spec, 1).result
    assert result.ok, result.violations
    assert result.ops["ok"] + result.ops["info"] + result.ops["fail"] >= 20


def test_the_checker_catches_a_resend_after_an_ambiguous_outcome(user_module: str) -> None:
    __import__(user_module)
    classes = {s: run_seed("user-resend", s).result.failure_class for s in range(8)}
    caught = {s: c for s, c in classes.items() if c is not None}
    assert caught, f"no seed of 0-7 caught the blind resend: {classes}"
    # A resent value that had landed is a duplicate, or, when the resend then fails,
    # a record reported failed that is in the log.
    assert set(caught.values()) <= {"duplicate", "failed-but-written"}, caught
    assert "duplicate" in caught.values(), caught


def test_a_property_over_a_users_workload_and_a_search_for_its_bug(user_module: str) -> None:
    """docs/simulator.md's Hypothesis property over a user's workload, and `search`
    finding the blind resend with plans Hypothesis draws."""
    __import__(user_module)

    @settings(
        max_examples=5,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=plan_cases("lite"))
    def test_orders_survive_every_fault_plan(case: PlanCase) -> None:
        result = case.run("user-orders").result
        assert result.ok, (case.replay_command("user-orders", "lite"), result.violations[:3])

    test_orders_survive_every_fault_plan()
    found = search("user-resend", examples=100, max_shrink_runs=15, minimize=False)
    assert found.found and found.shrunk_result is not None
    assert found.shrunk_result.failure_class in {"duplicate", "failed-but-written"}


# -- the command line ------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--import", "user_orders_wl", "--workload", "user-orders"],
        ["--workload", "user_orders_wl:orders"],
    ],
)
def test_simulate_runs_a_users_workload(user_module: str, args: list[str]) -> None:
    result = CliRunner().invoke(main, ["simulate", *args, "--seeds", "2", "--jobs", "1"])
    assert result.exit_code == 0, result.output
    assert "user-orders" in result.output


@pytest.mark.parametrize("form", ["import", "module:function"])
def test_simulate_finds_a_users_module_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    """As `python -m` would: run from the project, `--import my_module` finds
    my_module.py there (the console script's own path does not have it)."""
    name = f"cwd_orders_{form.replace(':', '_')}"
    (tmp_path / f"{name}.py").write_text(USER_MODULE.replace('"user-', f'"{name}-'))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    args = (
        ["--import", name, "--workload", f"{name}-orders"]
        if form == "import"
        else ["--workload", f"{name}:orders"]
    )
    result = CliRunner().invoke(main, ["simulate", *args, "--seeds", "2", "--jobs", "1"])
    assert result.exit_code == 0, result.output
    assert f"{name}-orders" in result.output


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ("user_orders_wl:nothing", "user_orders_wl has no 'nothing'"),
        ("user_orders_wl:helper", "is not a registered workload"),
        ("no_such_module_here:orders", "cannot import 'no_such_module_here'"),
    ],
)
def test_simulate_names_a_wrong_workload(user_module: str, workload: str, message: str) -> None:
    result = CliRunner().invoke(main, ["simulate", "--workload", workload, "--jobs", "1"])
    assert result.exit_code == 2
    assert message in result.output


def test_simulate_runs_seeds_until_the_budget_is_spent(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    result = CliRunner().invoke(
        main,
        ["simulate", "--budget", "1s", "--jobs", "1", "--seeds", "3", "--json", str(report)],
    )
    assert result.exit_code == 0, result.output
    assert "idempotent/lite for 1 s" in result.output
    # --seeds caps a budget: at least one seed, at most 3, from seed 0 on.
    seeds = [r["seed"] for r in json.loads(report.read_text())["results"]]
    assert seeds == list(range(len(seeds))) and 1 <= len(seeds) <= 3


@pytest.mark.parametrize("text", ["soon", "-5s", "0", "5x", ""])
def test_a_wrong_budget_is_named(text: str) -> None:
    result = CliRunner().invoke(main, ["simulate", "--budget", text, "--jobs", "1"])
    assert result.exit_code == 2
    assert "--budget" in result.output


def test_durations() -> None:
    assert parse_duration("90") == 90
    assert parse_duration("90s") == 90
    assert parse_duration("15m") == 900
    assert parse_duration("1h30m") == 5400
    with pytest.raises(ValueError, match="expected a duration"):
        parse_duration("1d")


def test_jobs_default_to_the_cores_we_may_run_on() -> None:
    assert default_jobs() == len(os.sched_getaffinity(0))


def test_a_failing_seed_is_said_at_once_with_a_replay_that_imports_its_module(
    user_module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep's failure is printed when it happens (not only in the summary at the end),
    and its replay command imports the user's module: without `--import` the CLI does
    not know the workload. Output that is not a terminal (CliRunner's, like a log file's)
    gets progress lines (here after every seed). Four seeds: the first failure is seed 3,
    and each failing seed is minimized (~40 s apiece), so eight seeds cost two minutes."""
    monkeypatch.setattr(simulate_workers._Heartbeat, "due", lambda self, elapsed: True)
    result = CliRunner().invoke(
        main,
        ["simulate", "--workload", f"{user_module}:resend", "--seeds", "4", "--jobs", "1"],
    )
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    summary = next(i for i, line in enumerate(lines) if "trio-kafka simulate: user-resend" in line)
    said = [i for i, line in enumerate(lines) if " failed: " in line and "; replay: " in line]
    assert said and max(said) < summary, result.output
    progress = [line for line in lines if line.startswith("user-resend/lite: ")]
    assert progress[0].startswith("user-resend/lite: 1 seed (0-0), ")
    assert progress[-1].startswith("user-resend/lite: 4 seeds (0-3), ")
    replays = [line.split("replay: ", 1)[1] for line in lines if "replay: " in line]
    assert replays and all(f"--import {user_module} " in r for r in replays), replays
    failed_seed = lines[said[0]].split()[1]
    # The printed command, as a user pastes it, replays the failure (the minimized one too;
    # the seed's replay is told not to minimize again: that would be 40 s more, the same).
    for command, extra in ((replays[0], ["--no-minimize"]), (replays[-1], [])):
        assert f"--seed {failed_seed}" in command or "--faults" in command
        again = CliRunner().invoke(main, shlex.split(command)[1:] + extra)
        assert again.exit_code == 1, (command, again.output)
        assert "[I1 duplicate]" in again.output or "failed-but-written" in again.output


def test_progress_lines_each_minute_then_each_ten_minutes() -> None:
    heartbeat = simulate_workers._Heartbeat()
    due = [t for t in range(0, 3601, 5) if heartbeat.due(float(t))]
    assert due == [60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 2400, 3000, 3600]
    assert heartbeat.due(5000.0) and not heartbeat.due(5399.0) and heartbeat.due(5400.0)


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_sweep_keeps_a_passing_seed_without_the_faults_it_fired(jobs: int) -> None:
    """A worker sends a passing seed's result back without `fired`, the fault
    identities (~2 KB of a lite seed's ~3 KB, tens of KB of a standard cas-txn seed's,
    pickled and sent for nothing), which only a failing seed's minimizing and replay use
    (the failing seed's test above replays from a sweep's result; the run then keeps
    only a failing seed's result: tests/sim/test_tally.py)."""
    full = run_seed("idempotent", 3, profile="lite").result
    assert full.ok and full.fired
    kept, _ = simulate_workers.run_many("idempotent", [3, 4], "lite", jobs)
    assert kept.fired == ()
    assert kept == attrs.evolve(full, fired=(), wall_time=kept.wall_time)
    failing = attrs.evolve(full, failure_class="duplicate")
    assert failing.for_sweep() is failing
