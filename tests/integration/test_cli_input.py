"""The CLI as a new user meets it: what `tail` prints, and `load` refusing bad input
before it writes anything."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from trio_kafka.broker import ThreadedCluster, run_in_thread
from trio_kafka.cli import main


@pytest.fixture
def cluster() -> ThreadedCluster:  # type: ignore[misc]
    with run_in_thread(1) as running:
        yield running


def test_tail_separates_fields_with_tabs(tmp_path: Path, cluster: ThreadedCluster) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"id": "a", "n": 1}\n{"id": "b", "n": 2}\n')
    loaded = CliRunner().invoke(
        main,
        [
            "load",
            str(rows),
            "--topic",
            "t",
            "--bootstrap",
            cluster.bootstrap,
            "--key-field",
            "id",
            "--quiet",
        ],
    )
    assert loaded.exit_code == 0, loaded.output
    result = CliRunner().invoke(main, ["tail", "--topic", "t", "--bootstrap", cluster.bootstrap])
    assert result.exit_code == 0, result.output
    assert "\\t" not in result.output
    lines = [line for line in result.output.splitlines() if line.startswith("0:")]
    assert lines[:2] == ['0:0\ta\t{"id": "a", "n": 1}', '0:1\tb\t{"id": "b", "n": 2}']


@pytest.mark.parametrize(
    ("name", "content", "names"),
    [
        ("rows.jsonl", '{"id": "a", "n": 1}\n{"id": "b", "n": 2}\n', "'id', 'n'"),
        ("rows.csv", "id,n\na,1\nb,2\n", "'id', 'n'"),
    ],
)
def test_load_refuses_a_key_field_that_does_not_exist_before_writing(
    tmp_path: Path, cluster: ThreadedCluster, name: str, content: str, names: str
) -> None:
    rows = tmp_path / name
    rows.write_text(content)
    result = CliRunner().invoke(
        main,
        [
            "load",
            str(rows),
            "--topic",
            "t",
            "--bootstrap",
            cluster.bootstrap,
            "--key-field",
            "nope",
            "--quiet",
        ],
    )
    assert result.exit_code != 0
    assert "--key-field 'nope'" in result.output and names in result.output
    assert cluster.call(lambda: cluster.cluster.state.topics.get("t")) is None  # nothing written


def test_load_refuses_a_row_without_the_key_field_naming_the_line(
    tmp_path: Path, cluster: ThreadedCluster
) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"id": "a"}\n{"other": 1}\n')
    result = CliRunner().invoke(
        main,
        [
            "load",
            str(rows),
            "--topic",
            "t",
            "--bootstrap",
            cluster.bootstrap,
            "--key-field",
            "id",
            "--quiet",
        ],
    )
    assert result.exit_code != 0
    assert f"{rows}:2" in result.output and "'other'" in result.output
    assert cluster.call(lambda: cluster.cluster.state.topics.get("t")) is None


def test_load_and_tail_refuse_an_invalid_topic_name_naming_it(
    tmp_path: Path, cluster: ThreadedCluster
) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"id": "a"}\n')
    for args in (
        ["load", str(rows), "--topic", "bad%topic", "--quiet"],
        ["tail", "--topic", "bad%topic"],
    ):
        result = CliRunner().invoke(main, [*args, "--bootstrap", cluster.bootstrap])
        assert result.exit_code == 1, result.output
        assert "InvalidTopicError: topic name 'bad%topic' is not a valid" in result.output
