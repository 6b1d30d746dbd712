"""Hypothesis over fault plans (`sim/search.py`): the strategies, drawn plans of every
workload checking clean, a planted bug found, its plan shrunk and its faults minimized,
the replay reproducing it, and `trio-kafka simulate --search` / `--rates`."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings

from trio_kafka.cli import main
from trio_kafka.sim.faults import LITE, STANDARD, FaultKind
from trio_kafka.sim.minimize import format_rates, parse_rates, resolve_fault_ids
from trio_kafka.sim.mutants import planted
from trio_kafka.sim.runner import run_seed
from trio_kafka.sim.search import PlanCase, fault_rates, plan_cases, search
from trio_kafka.sim.workloads import WORKLOADS

#: Runs of the simulator under Hypothesis: the same examples every time, no database.
SIMULATED = settings(
    max_examples=8,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)

BUG = "timeout-not-written"
BUG_CLASSES = {"duplicate", "failed-but-written"}


@settings(max_examples=200, derandomize=True, database=None)
@given(rates=fault_rates("standard"))
def test_drawn_rates_stay_within_the_profile(rates: dict[FaultKind, float]) -> None:
    assert set(rates) == set(FaultKind)
    for kind, rate in rates.items():
        if kind is FaultKind.BUGGIFY:
            assert rate in (0.0, 1.0)
        else:
            assert 0.0 <= rate <= STANDARD.max_rates[kind], (kind, rate)


@settings(max_examples=50, derandomize=True, database=None)
@given(rates=fault_rates("lite", kinds=frozenset({FaultKind.CLOG, FaultKind.LATENCY})))
def test_drawn_rates_keep_to_the_kinds_asked_for(rates: dict[FaultKind, float]) -> None:
    assert {k for k, r in rates.items() if r > 0} <= {FaultKind.CLOG, FaultKind.LATENCY}


@settings(max_examples=300, derandomize=True, database=None)
@given(rates=fault_rates("lite"))
def test_rates_read_back_exactly_as_written(rates: dict[FaultKind, float]) -> None:
    assert parse_rates(format_rates(rates)) == rates


def test_every_kind_can_be_off_or_on() -> None:
    seen_off: set[FaultKind] = set()
    seen_on: set[FaultKind] = set()

    @settings(max_examples=300, derandomize=True, database=None)
    @given(rates=fault_rates("lite"))
    def draw(rates: dict[FaultKind, float]) -> None:
        seen_off.update(k for k, r in rates.items() if r == 0.0)
        seen_on.update(k for k, r in rates.items() if r > 0.0)

    draw()
    assert seen_off == set(FaultKind)
    assert seen_on == {k for k in FaultKind if LITE.max_rates.get(k, 0.0) > 0.0}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bugify=1", "did you mean 'buggify'"),
        ("clog=2", "a probability in [0, 1]"),
        ("clog=-0.1", "a probability in [0, 1]"),
        ("clog=x", "'x' is not a number"),
        ("clog", "is not KIND=RATE"),
        ("warp=0.1", "no fault kind 'warp'"),
    ],
)
def test_bad_rates_are_named(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_rates(text)
    assert message in str(info.value)


def test_no_rates_is_every_kind_off() -> None:
    assert parse_rates("none") == dict.fromkeys(FaultKind, 0.0)
    assert format_rates(dict.fromkeys(FaultKind, 0.0)) == "none"


@pytest.mark.parametrize("workload", sorted(w for w in WORKLOADS if not w.startswith("user")))
def test_drawn_plans_of_every_workload_check_clean(workload: str) -> None:
    @SIMULATED
    @given(case=plan_cases("lite"))
    def property_(case: PlanCase) -> None:
        result = case.run(workload).result
        assert result.ok, (case.replay_command(workload, "lite"), result.violations[:3])

    property_()


def test_search_finds_a_planted_bug_shrinks_its_plan_and_minimizes_its_faults() -> None:
    found = search("idempotent", mutant=BUG, examples=200)
    assert found.found, "200 plans did not catch the planted bug"
    assert found.first is not None and found.shrunk is not None
    assert found.first_result is not None and found.shrunk_result is not None
    # The bug resends a batch that may have been written: a duplicate, or a record
    # reported failed that is in the log. The shrink keeps the class it found first.
    wanted = found.first_result.failure_class
    assert wanted in BUG_CLASSES
    assert wanted in found.shrunk_result.classes
    # The shrunk plan is no bigger than the first: kinds on, seed.
    assert len(found.shrunk.kinds_on) <= len(found.first.kinds_on)
    assert found.shrunk.seed <= found.first.seed
    assert 1 <= len(found.minimized) <= len(found.shrunk_result.fired)
    # The minimized faults under the shrunk plan fail with the bug, and pass without it.
    fired = found.shrunk_result.fired_identities()
    faults = resolve_fault_ids(found.minimized, fired)
    again = run_seed(
        "idempotent",
        found.shrunk.seed,
        rates=found.shrunk.rates,
        faults=faults,
        rules=planted(BUG),
    )
    assert wanted in again.result.classes
    clean = run_seed("idempotent", found.shrunk.seed, rates=found.shrunk.rates, faults=faults)
    assert clean.result.ok, clean.result.violations
    # The printed command replays it.
    assert found.replay is not None
    args = [*shlex.split(found.replay)[1:], "--mutant", BUG]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1 and "FAILED (" in result.output, result.output
    assert wanted in result.output


SEARCH = (
    "import json; from trio_kafka.sim.search import search; "
    f"print(json.dumps(search('idempotent', mutant={BUG!r}, examples=50, search_seed=3, "
    "max_shrink_runs=20, max_replays=5).to_json(), sort_keys=True))"
)


def test_a_search_is_the_same_every_time_and_in_any_process() -> None:
    """In this process (the package and the tests loaded) and in a fresh interpreter
    (Hypothesis's integers would take constants from loaded modules' source)."""
    one = search(
        "idempotent", mutant=BUG, examples=50, search_seed=3, max_shrink_runs=20, max_replays=5
    )
    two = search(
        "idempotent", mutant=BUG, examples=50, search_seed=3, max_shrink_runs=20, max_replays=5
    )
    assert one.found and one.to_json() == two.to_json()
    fresh = subprocess.run(
        [sys.executable, "-c", SEARCH], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(fresh) == one.to_json()


def test_a_search_without_a_failure_runs_every_plan() -> None:
    found = search("bulk", examples=4)
    assert not found.found and found.examples <= found.drawn == 4 and found.replay is None
    assert found.to_json()["found"] is False


def test_a_search_refuses_wrong_arguments_before_running() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        search("idempotent", examples=0)
    with pytest.raises(KeyError, match="nope"):
        search("nope", examples=1)
    with pytest.raises(KeyError, match="unknown mutant 'nope'"):
        search("idempotent", examples=1, mutant="nope")


# -- the command line ------------------------------------------------------------------


def test_simulate_search_reports_no_failure() -> None:
    result = CliRunner().invoke(main, ["simulate", "-w", "cas", "--search", "3"])
    assert result.exit_code == 0, result.output
    assert "distinct fault plans of cas" in result.output
    assert "Hypothesis drew 3)" in result.output


def test_simulate_search_finds_a_planted_bug_and_its_report_replays(tmp_path: Path) -> None:
    report = tmp_path / "search.json"
    result = CliRunner().invoke(
        main,
        ["simulate", "--search", "100", "--mutant", BUG, "--json", str(report)],
        env={"COLUMNS": "400"},
    )
    assert result.exit_code == 1, result.output
    assert "shrunk in" in result.output
    data = json.loads(report.read_text())
    wanted = data["first"]["failure_class"]
    assert wanted in BUG_CLASSES and f"FAILED ({wanted})" in result.output
    assert data["found"] and data["mutant"] == BUG and data["shrunk"]["rates"]
    assert data["replay"].endswith(f"--mutant {BUG}")
    replayed = CliRunner().invoke(main, ["simulate", "--replay", str(report)])
    assert replayed.exit_code == 1 and f"FAILED {wanted}" in replayed.output, replayed.output


def test_rates_replay_a_drawn_plan_from_the_command_line() -> None:
    rates = {FaultKind.CLOG: 0.25, FaultKind.BUGGIFY: 1.0}
    direct = run_seed("idempotent", 5, rates=rates).result
    result = CliRunner().invoke(
        main, ["simulate", "--seed", "5", "--rates", format_rates(rates), "--faults", "none"]
    )
    assert result.exit_code == 0, result.output
    assert "rates clog=0.25,buggify=1.0" in result.output
    full = CliRunner().invoke(main, ["simulate", "--seed", "5", "--rates", "clog=0.25,buggify=1"])
    assert full.exit_code == (0 if direct.ok else 1), full.output


def test_simulate_mutants_hunts_with_the_search(tmp_path: Path) -> None:
    report = tmp_path / "hunt.json"
    result = CliRunner().invoke(
        main,
        ["simulate", "--mutants", "--search", "60", "--mutant", BUG, "--json", str(report)],
        env={"COLUMNS": "400"},
    )
    assert result.exit_code == 0, result.output
    assert "at most 60 Hypothesis draws each" in result.output
    assert f"--mutant {BUG}" in result.output and "--rates" in result.output
    data = json.loads(report.read_text())
    assert data["by"] == "search" and data["killed"] == 1
    (hunt,) = data["hunts"]
    assert hunt["killed"] and hunt["replay"].endswith(f"--mutant {BUG}")


@pytest.mark.parametrize(
    ("text", "name", "message"),
    [
        ("print('not json')", "junk.json", "Expecting value"),
        ('{"a": 1}', "other.json", "no workload or seed in it"),
        ("[1, 2]", "list.json", "no workload or seed in it"),
        ("a = [", "broken.toml", "Invalid value"),
    ],
)
def test_simulate_replay_names_a_file_it_cannot_replay(
    tmp_path: Path, text: str, name: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    result = CliRunner().invoke(main, ["simulate", "--replay", str(path)], env={"COLUMNS": "400"})
    assert result.exit_code == 2, result.output
    assert "is not a JSON report of trio-kafka simulate" in result.output
    assert message in result.output, result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--search", "3", "--faults", "none"], "--search draws its own plans"),
        (["--search", "3", "--jobs", "2", "--seeds", "4"], "not with --seeds, --jobs"),
        (["--rates", "clog=0.1"], "give --seed"),
        (["--seed", "1", "--rates", "clog=3"], "a probability in [0, 1]"),
        (["--seed", "1", "--mutant", "nope"], "unknown mutant 'nope'"),
        (["--search", "2", "--mutant", "nope"], "unknown mutant 'nope'"),
        (["--search", "0"], "0"),
        (["--seed", "1", "--mutant", BUG, "--mutant", "reorder-retries"], "one bug at a time"),
        (["--search", "2", "--mutant", BUG, "--mutant", "reorder-retries"], "one bug at a time"),
        (["--seed", "1", "--seeds", "3", "--faults", "none"], "a replay runs one seed"),
        (["--search", "3", "--json", "/nonexistent/dir/r.json"], "does not exist"),
        (["--seeds", "3", "--ledger", "/nonexistent/dir/l.csv"], "does not exist"),
    ],
)
def test_simulate_names_wrong_search_and_replay_options(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["simulate", *args], env={"COLUMNS": "400"})
    assert result.exit_code == 2, result.output
    assert message in result.output, result.output


def test_simulate_replay_of_an_unregistered_workload_asks_for_its_module(tmp_path: Path) -> None:
    # A report of a user's own workload replayed without --import was a raw KeyError.
    path = tmp_path / "report.json"
    path.write_text(
        json.dumps({"workload": "user-orders", "profile": "lite", "failures": [{"seed": 3}]})
    )
    result = CliRunner().invoke(main, ["simulate", "--replay", str(path)], env={"COLUMNS": "400"})
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "workload 'user-orders', which is not registered" in result.output, result.output
    assert "--import MODULE" in result.output, result.output
