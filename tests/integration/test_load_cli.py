"""`trio-kafka load` run again: with other routing options it is refused, naming them;
finished, it is known from the checkpoints without reading the file again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from trio_kafka._cli import load as load_command
from trio_kafka.broker import ThreadedCluster, run_in_thread
from trio_kafka.cli import main


@pytest.fixture
def cluster() -> Iterator[ThreadedCluster]:
    with run_in_thread(1) as running:
        yield running


@pytest.fixture
def rows(tmp_path: Path) -> Path:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(f'{{"user": "u{i % 7}", "n": {i}}}\n' for i in range(500)))
    return path


def load(cluster: ThreadedCluster, path: Path, *options: str) -> Any:
    args = ["load", str(path), "--topic", "chg1", "--partitions", "3"]
    args += ["--bootstrap", cluster.bootstrap, "--quiet", "--batch-bytes", "2048", *options]
    return CliRunner().invoke(main, args)


def test_a_rerun_without_the_key_field_is_refused_naming_it(
    cluster: ThreadedCluster, rows: Path
) -> None:
    first = load(cluster, rows, "--key-field", "user")
    assert first.exit_code == 0, first.output
    again = load(cluster, rows)
    assert again.exit_code == 1, again.output
    assert "key_field: 'user' then, None now" in again.output
    assert "--load-id" in again.output  # how to start a fresh load instead


def test_a_rerun_of_the_same_path_and_size_with_other_content_is_refused(
    cluster: ThreadedCluster, rows: Path
) -> None:
    """The default load id comes from the path and size: a file rewritten with other
    rows of the same size (a corrected value, the next export of fixed-width rows) had
    the finished load's id, so the rerun said "done: 0 records loaded, 500 already
    there" and loaded none of the new rows (or, cut short, resumed by row numbers that
    now name other rows). The load records the file's SHA-256 with its routing."""
    assert load(cluster, rows).exit_code == 0
    before = rows.stat().st_size
    rows.write_text(rows.read_text().replace('"n": 7}', '"n": 8}'))
    assert rows.stat().st_size == before
    again = load(cluster, rows)
    assert again.exit_code == 1, again.output
    assert "input: 'sha256:" in again.output and "then, 'sha256:" in again.output
    assert "--load-id" in again.output  # how to load the new content instead
    fresh = load(cluster, rows, "--load-id", "rows-corrected")
    assert fresh.exit_code == 0, fresh.output
    assert "done: 500 records loaded" in fresh.output


def test_a_rerun_with_another_format_is_refused_naming_it(
    cluster: ThreadedCluster, rows: Path
) -> None:
    assert load(cluster, rows).exit_code == 0
    # The same lines read as CSV: other values, other rows.
    again = load(cluster, rows, "--format", "csv")
    assert again.exit_code == 1, again.output
    assert "format: 'jsonl' then, 'csv' now" in again.output


def test_a_rerun_of_a_finished_load_does_not_read_the_file_again(
    cluster: ThreadedCluster, rows: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert load(cluster, rows, "--key-field", "user").exit_code == 0
    read: list[str] = []

    def check_key_field(*args: Any) -> None:
        read.append("check_key_field")

    def read_rows(*args: Any) -> Iterator[Any]:
        read.append("read_rows")
        yield from ()

    monkeypatch.setattr(load_command, "read_rows", read_rows)
    monkeypatch.setattr(load_command, "check_key_field", check_key_field)
    again = load(cluster, rows, "--key-field", "user")
    assert again.exit_code == 0, again.output
    assert "done: 0 records loaded, 500 already there" in again.output
    assert read == []
