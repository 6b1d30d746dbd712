"""The CLI as a new user meets it: what `tail` prints, and `load` refusing bad input
before it writes anything."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from trio_kafka.broker import ThreadedCluster, run_in_thread
from trio_kafka.cli import main


@pytest.fixture
def cluster() -> ThreadedCluster:  # type: ignore[misc]
    with run_in_thread(1) as running:
        yield running


def _load_keyed(rows: Path, cluster: ThreadedCluster, key_field: str) -> Result:
    """`trio-kafka load ROWS --topic t --key-field KEY_FIELD` into the cluster."""
    return CliRunner().invoke(
        main,
        [
            *("load", str(rows), "--topic", "t", "--bootstrap", cluster.bootstrap),
            *("--key-field", key_field, "--quiet"),
        ],
    )


def test_tail_separates_fields_with_tabs(tmp_path: Path, cluster: ThreadedCluster) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"id": "a", "n": 1}\n{"id": "b", "n": 2}\n')
    loaded = _load_keyed(rows, cluster, "id")
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
    result = _load_keyed(rows, cluster, "nope")
    assert result.exit_code != 0
    assert "--key-field 'nope'" in result.output and names in result.output
    assert cluster.call(lambda: cluster.cluster.state.topics.get("t")) is None  # nothing written


def test_load_refuses_a_row_without_the_key_field_naming_the_line(
    tmp_path: Path, cluster: ThreadedCluster
) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"id": "a"}\n{"other": 1}\n')
    result = _load_keyed(rows, cluster, "id")
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


@pytest.mark.parametrize(
    ("content", "message"),
    [("id,n\na,1\nb\n", ":3: 1 fields, the header has 2"), ("id,n\na,1,x\n", ":2: 3 fields")],
)
def test_load_refuses_a_csv_row_that_does_not_match_its_header_before_writing(
    tmp_path: Path, cluster: ThreadedCluster, content: str, message: str
) -> None:
    # It loaded {"id": "b", "n": null}, or the extra field under a key "null".
    rows = tmp_path / "rows.csv"
    rows.write_text(content)
    result = CliRunner().invoke(
        main, ["load", str(rows), "--topic", "t", "--bootstrap", cluster.bootstrap, "--quiet"]
    )
    assert result.exit_code == 1, result.output
    assert f"{rows}{message}" in result.output
    assert cluster.call(lambda: cluster.cluster.state.topics.get("t")) is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["load", "ROWS", "--topic", "t", "--partitions", "0"], "'--partitions': 0 is not in"),
        (["load", "ROWS", "--topic", "t", "--batch-bytes", "0"], "'--batch-bytes': 0 is not in"),
        (["tail", "--topic", "t", "-n", "-1"], "-1 is not in the range x>=0"),
        (["tail", "--topic", "t", "--partition", "-1"], "-1 is not in the range x>=0"),
        (["broker", "--port", "70000"], "70000 is not in the range 0<=x<=65535"),
        (["broker", "--brokers", "0"], "'--brokers': 0 is not in"),
        (["broker", "--port", "65535", "--brokers", "2"], "would need ports up to 65536"),
        (["demo", "--seeds", "-1"], "'--seeds': -1 is not in the range x>=1"),
        (["demo", "--jobs", "0"], "'--jobs' / '-j': 0 is not in the range x>=1"),
    ],
)
def test_a_number_out_of_range_is_refused_by_the_option(
    tmp_path: Path, args: list[str], message: str
) -> None:
    # --port 70000 listened on 4464, --brokers 0 was a traceback, tail -n -1 printed
    # nothing, --partitions 0 got as far as the broker's INVALID_PARTITIONS.
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"id": "a"}\n')
    args = [str(rows) if a == "ROWS" else a for a in args]
    result = CliRunner().invoke(main, [*args])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_broker_on_a_port_in_use_says_so(cluster: ThreadedCluster) -> None:
    # It was a traceback through the cluster's nursery.
    port = cluster.bootstrap.rpartition(":")[2]
    result = CliRunner().invoke(main, ["broker", "--port", port])
    assert result.exit_code == 1, result.output
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in result.output


def test_load_refuses_a_csv_that_is_not_utf8_before_writing(
    tmp_path: Path, cluster: ThreadedCluster
) -> None:
    # It was a UnicodeDecodeError traceback.
    rows = tmp_path / "rows.csv"
    rows.write_bytes(b"id,n\n\xff\xfe,1\n")
    result = CliRunner().invoke(
        main, ["load", str(rows), "--topic", "t", "--bootstrap", cluster.bootstrap, "--quiet"]
    )
    assert result.exit_code == 1, result.output
    assert f"{rows} is not UTF-8" in result.output
    assert cluster.call(lambda: cluster.cluster.state.topics.get("t")) is None


def test_load_takes_a_csv_key_column_behind_a_byte_order_mark(
    tmp_path: Path, cluster: ThreadedCluster
) -> None:
    # A spreadsheet's UTF-8 BOM made the first column '\ufeffid', so --key-field id failed.
    rows = tmp_path / "rows.csv"
    rows.write_bytes(b"\xef\xbb\xbfid,n\nx,1\n")
    args = ["load", str(rows), "--topic", "t", "--key-field", "id", "--quiet"]
    result = CliRunner().invoke(main, [*args, "--bootstrap", cluster.bootstrap])
    assert result.exit_code == 0, result.output
    tail = CliRunner().invoke(main, ["tail", "--topic", "t", "--bootstrap", cluster.bootstrap])
    assert '0:0\tx\t{"id":"x","n":"1"}' in tail.output
