"""The simulator on records kept until their topic's metadata comes (client/_unknown_topics.py):
the `test-new-topics` workload (tests/sim/new_topics_workload.py) over fresh seeds, every
idempotent invariant held, and the paths it is there for taken: records kept, placed,
failed alone (a partition the topic lacks), and failed with their topic (`max_block`)."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from tests.sim import new_topics_workload
from trio_kafka.cli import main
from trio_kafka.client import _unknown_topics
from trio_kafka.sim.runner import run_seed

SEEDS = range(70_000, 70_120)


def test_new_topics_seeds_pass_and_take_the_kept_record_paths(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = {"_keep": 0, "_place": 0, "_settle_waiting": 0, "_failed_alone": 0}
    for name in calls:
        original = getattr(_unknown_topics.UnknownTopics, name)

        def counted(*args: Any, _original: Any = original, _name: str = name) -> Any:
            calls[_name] += 1
            return _original(*args)

        monkeypatch.setattr(_unknown_topics.UnknownTopics, name, counted)
    for seed in SEEDS:
        result = run_seed("test-new-topics", seed, profile="lite").result
        assert result.ok, f"seed {seed}: {result.violations}"
    assert calls["_place"] >= len(SEEDS)  # several topics a seed learnt mid-run
    assert calls["_failed_alone"] >= len(SEEDS) // 2  # the partitions the topics lack
    assert calls["_settle_waiting"] >= 1  # kept records failed with their topic


def test_the_cli_runs_it_as_a_users_workload(tmp_path: Any) -> None:
    report = tmp_path / "report.json"
    result = CliRunner().invoke(
        main,
        [
            "simulate",
            "--import",
            new_topics_workload.__name__,
            "-w",
            "test-new-topics",
            "--seed",
            "71000",
            "--seeds",
            "20",
            "-j",
            "1",
            "--json",
            str(report),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "0 failed" in result.output.replace("\n", " "), result.output
