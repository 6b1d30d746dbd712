"""`trio-kafka simulate`: the summary, the JSON report, replays by fault ids, scenario
and regression files."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from tests.conftest import REPO
from trio_kafka.cli import main
from trio_kafka.sim.minimize import fault_id
from trio_kafka.sim.runner import run_seed


def test_simulate_prints_a_summary_and_writes_a_json_report(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    result = CliRunner().invoke(
        main, ["simulate", "--workload", "idempotent", "--seeds", "4", "--json", str(report)]
    )
    assert result.exit_code == 0, result.output
    assert "seeds per minute" in result.output and "faults fired" in result.output
    data = json.loads(report.read_text())
    assert data["seeds"] == 4 and data["failed"] == 0
    assert [r["seed"] for r in data["results"]] == [0, 1, 2, 3]
    assert set(data["faults"]) >= {"broker-crash", "buggify", "competing-instance"}


def test_simulate_with_two_jobs_gives_the_same_results(tmp_path: Path) -> None:
    one, two = tmp_path / "1.json", tmp_path / "2.json"
    for jobs, path in (("1", one), ("2", two)):
        result = CliRunner().invoke(
            main, ["simulate", "--seeds", "6", "--seed", "20", "--jobs", jobs, "--json", str(path)]
        )
        assert result.exit_code == 0, result.output
    digests = [
        [r["trace_digest"] for r in json.loads(p.read_text())["results"]] for p in (one, two)
    ]
    assert digests[0] == digests[1]


def test_simulate_replays_a_seed_with_chosen_fault_ids(tmp_path: Path) -> None:
    fired = run_seed("idempotent", 11).result.fired_identities()
    ids = ",".join(fault_id(f) for f in fired[:2])
    trace = tmp_path / "trace.txt"
    result = CliRunner().invoke(
        main, ["simulate", "--seed", "11", "--faults", ids, "--trace", str(trace)]
    )
    assert result.exit_code == 0, result.output
    assert "seed 11" in result.output and "# network" in trace.read_text()
    bad = CliRunner().invoke(main, ["simulate", "--seed", "11", "--faults", "clog.00000000"])
    assert bad.exit_code != 0 and "no fault fired" in bad.output


def test_simulate_runs_a_scenario_and_replays_a_regression_file() -> None:
    result = CliRunner().invoke(
        main,
        [
            "simulate",
            "--scenario",
            str(REPO / "simulations" / "idempotent-lite.toml"),
            "--seeds",
            "2",
            "--jobs",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    path = sorted((REPO / "simulations" / "regressions").glob("*.toml"))[0]
    replay = CliRunner().invoke(main, ["simulate", "--replay", str(path)])
    assert replay.exit_code == 0, replay.output
    assert "ok" in replay.output
