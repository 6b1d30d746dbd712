"""`trio-kafka simulate`: the summary, the JSON report, replays by fault ids, scenario
and regression files."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
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


def test_simulate_spark_runs_the_seeds_through_sweep_on_spark(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import trio_kafka.spark

    calls: list[tuple[Any, ...]] = []

    def fake(workload: str, seeds: Any, profile: str, *, master: str | None = None) -> Any:
        seeds = list(seeds)
        calls.append((workload, seeds, profile, master))
        return (run_seed(workload, s, profile=profile).result for s in seeds)

    monkeypatch.setattr(trio_kafka.spark, "sweep_on_spark", fake)
    report = tmp_path / "r.json"
    args = ["simulate", "--seeds", "2", "--seed", "5", "--spark", "--json", str(report)]
    result = CliRunner().invoke(main, [*args, "--master", "spark://h:7077"])
    assert result.exit_code == 0, result.output
    assert calls == [("idempotent", [5, 6], "lite", "spark://h:7077")]
    assert [r["seed"] for r in json.loads(report.read_text())["results"]] == [5, 6]
    result = CliRunner().invoke(main, ["simulate", "--seeds", "1", "--master", "local[2]"])
    assert result.exit_code != 0 and "--spark" in result.output


def test_simulate_spark_without_pyspark_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pyspark", None)  # import pyspark raises ImportError
    result = CliRunner().invoke(main, ["simulate", "--seeds", "1", "--spark"])
    assert result.exit_code != 0
    assert "trio-kafka[spark]" in result.output
