"""The simulation ledger: `trio-kafka simulate --ledger FILE` and `--ledger-summary FILE`."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import REPO
from trio_kafka._cli.simulate_ledger import (
    COLUMNS,
    LedgerError,
    LedgerRow,
    append,
    markdown,
    next_seed,
    read,
    totals,
)
from trio_kafka.cli import main


def _row(workload: str, first: int, count: int, failed: int | None = 0) -> LedgerRow:
    return LedgerRow("2026-11-25", "abc", workload, "lite", first, count, failed, 10 * count)


def test_rows_append_under_one_header_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "ledger.csv"
    first, second = _row("idempotent", 0, 100), _row("cas", 5, 3, failed=None)
    append(path, first)
    append(path, second)
    assert path.read_text().splitlines()[0] == ",".join(COLUMNS)
    assert read(path) == [first, second]


def test_distinct_seeds_count_a_rerun_once_and_overlaps_by_their_union() -> None:
    rows = [
        _row("idempotent", 0, 100),
        _row("idempotent", 0, 100, failed=2),  # the same seeds again
        _row("idempotent", 50, 100),  # 50..149: 50 new seeds
        _row("idempotent", 1000, 10),
        _row("transactional", 0, 7, failed=None),
    ]
    by_workload = {t.workload: t for t in totals(rows)}
    idem = by_workload["idempotent"]
    assert (idem.distinct_seeds, idem.seed_runs, idem.runs, idem.failed) == (160, 310, 4, 2)
    assert by_workload["transactional"].rows_without_failed == 1
    table = markdown(totals(rows))
    assert "| idempotent | lite | 160 | 310 | 4 | 2 | 3,100 |" in table
    assert "| transactional | lite | 7 | 7 | 1 | not recorded | 70 |" in table


def test_a_file_that_is_not_a_ledger_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "other.csv"
    path.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(LedgerError, match=r"other\.csv is not a simulation ledger"):
        append(path, _row("idempotent", 0, 1))
    assert path.read_text() == "a,b,c\n1,2,3\n"  # nothing appended


def test_a_bad_row_is_refused_naming_its_line(tmp_path: Path) -> None:
    path = tmp_path / "ledger.csv"
    append(path, _row("idempotent", 0, 1))
    with path.open("a") as f:
        f.write("2026-11-25,abc,idempotent,lite,zero,1,0,0,\n")
    with pytest.raises(LedgerError, match=r"ledger.csv:3: .*zero"):
        read(path)


def test_simulate_appends_its_run_and_the_summary_counts_it(tmp_path: Path) -> None:
    path = tmp_path / "ledger.csv"
    args = ["simulate", "-w", "idempotent", "--seed", "7", "--seeds", "3", "-j", "1"]
    for _ in range(2):  # the same seeds twice: two runs, three distinct seeds
        result = CliRunner().invoke(main, [*args, "--ledger", str(path)])
        assert result.exit_code == 0, result.output
    rows = read(path)
    assert [(r.workload, r.profile, r.first_seed, r.count, r.failed) for r in rows] == [
        ("idempotent", "lite", 7, 3, 0)
    ] * 2
    assert all(r.ops and r.ops > 0 and r.commit for r in rows)
    summary = CliRunner().invoke(main, ["simulate", "--ledger-summary", str(path)])
    assert summary.exit_code == 0, summary.output
    assert f"| idempotent | lite | 3 | 6 | 2 | 0 | {rows[0].ops * 2:,} |" in summary.output


def test_next_seed_is_after_the_highest_seed_of_the_same_workload_and_profile() -> None:
    rows = [_row("idempotent", 0, 100), _row("idempotent", 5000, 10), _row("cas", 9000, 5)]
    rows.append(LedgerRow("d", "c", "idempotent", "standard", 20000, 7, 0, 0))
    assert next_seed(rows, "idempotent", "lite") == 5010
    assert next_seed(rows, "idempotent", "standard") == 20007
    assert next_seed(rows, "bulk", "lite") == 0  # never run: from 0


def test_seed_next_continues_where_the_ledger_stops(tmp_path: Path) -> None:
    path = tmp_path / "ledger.csv"  # (missing: the first run starts at 0)
    args = ["simulate", "-w", "cas", "--seed", "next", "--seeds", "2", "-j", "1"]
    for _ in range(2):
        result = CliRunner().invoke(main, [*args, "--ledger", str(path)])
        assert result.exit_code == 0, result.output
    assert [(r.first_seed, r.count) for r in read(path)] == [(0, 2), (2, 2)]
    assert "--seed next: 2 (after the runs of cas/lite in" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seed", "next"], "--seed next starts after the seeds a ledger recorded"),
        (["--seed", "nxt"], "expected a seed number or 'next', got 'nxt'"),
        (["--seed", "-3"], "a seed is not negative, got -3"),
        (["-n", "0"], "'--seeds' / '-n': 0 is not in the range x>=1"),
        (["--seeds", "-1"], "'--seeds' / '-n': -1 is not in the range x>=1"),
    ],
)
def test_a_wrong_seed_is_refused_naming_it(args: list[str], message: str) -> None:
    """(A count of no seeds, once a run of nothing that passed, is refused too.)"""
    result = CliRunner().invoke(main, ["simulate", "-n", "1", *args])
    assert result.exit_code == 2 and message in result.output, result.output


def test_ledger_is_refused_with_a_replay_or_the_mutant_hunt(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["simulate", "--mutants", "--ledger", str(tmp_path / "l.csv")]
    )
    assert result.exit_code != 0
    assert "--ledger records runs of seeds" in result.output


def test_the_projects_ledger_reads_and_its_totals_are_in_the_docs() -> None:
    table = markdown(totals(read(REPO / "simulations" / "ledger.csv")))
    assert table in (REPO / "docs" / "simulator.md").read_text()
