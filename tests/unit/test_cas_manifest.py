"""Pure parts of the CAS client: manifest and writer headers, row routing, CLI input."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from trio_kafka._cli.load import count_rows, default_load_id, read_rows
from trio_kafka.client import row_of, writer_of
from trio_kafka.client._bulk import partition_of
from trio_kafka.core import partition_for_key
from trio_kafka.core._load import encode_routing, routing_changes, unrecorded
from trio_kafka.records import Record


def record(*headers: tuple[str, bytes | None]) -> Record:
    return Record(0, 0, None, b"v", tuple(headers))


def test_row_of_needs_this_load_and_a_numeric_row() -> None:
    assert row_of(record(("tk.load", b"L"), ("tk.row", b"7")), b"L") == 7
    assert row_of(record(("tk.load", b"M"), ("tk.row", b"7")), b"L") is None
    assert row_of(record(("tk.load", b"L")), b"L") is None
    assert row_of(record(("tk.load", b"L"), ("tk.row", b"x")), b"L") is None
    assert row_of(record(), b"L") is None


def test_writer_of_reads_writer_and_sequence() -> None:
    assert writer_of(record(("tk.writer", b"w"), ("tk.seq", b"3"))) == (b"w", 3)
    assert writer_of(record(("other", b"x"))) == (None, None)
    assert writer_of(record(("tk.writer", b"w"), ("tk.seq", b"?"))) == (b"w", None)


@settings(max_examples=100)
@given(st.integers(0, 10**9), st.one_of(st.none(), st.binary(max_size=20)), st.integers(1, 64))
def test_a_row_always_goes_to_the_same_partition(row: int, key: bytes | None, count: int) -> None:
    partition = partition_of(row, key, count)
    assert 0 <= partition < count
    assert partition == partition_of(row, key, count)
    if key is not None:
        assert partition == partition_for_key(key, count)
    else:
        assert partition == row % count


def test_jsonl_rows_keep_the_line_and_take_the_key_field(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": 1, "k": "a"}\n\n{"id": 2, "k": 5}\n{"id": 3}\n')
    assert list(read_rows(path, "jsonl", None)) == [
        b'{"id": 1, "k": "a"}',
        b'{"id": 2, "k": 5}',
        b'{"id": 3}',
    ]
    assert [k for k, _ in read_rows(path, "jsonl", "k")] == [b"a", b"5", None]
    assert count_rows(path, "jsonl") == 3


def test_csv_rows_become_json_objects(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("id,name\n1,ann\n2,bob\n")
    rows = list(read_rows(path, "csv", "name"))
    assert [k for k, _ in rows] == [b"ann", b"bob"]
    assert json.loads(rows[0][1]) == {"id": "1", "name": "ann"}
    assert count_rows(path, "csv") == 2


def test_the_default_load_id_is_stable_for_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text("{}\n")
    assert default_load_id(path) == default_load_id(path)
    other = tmp_path / "other.jsonl"
    other.write_text("{}\n")
    assert default_load_id(path) != default_load_id(other)


def test_routing_changes_name_each_difference_and_take_none_for_unset() -> None:
    then = {"partitions": 6, "key_field": "user", "format": "jsonl"}
    now = {"partitions": 6, "key_field": None, "format": "csv"}
    assert routing_changes(then, now) == [
        "format: 'jsonl' then, 'csv' now",
        "key_field: 'user' then, None now",
    ]
    assert routing_changes({"partitions": 6}, {"partitions": 6, "key_field": None}) == []
    assert encode_routing({"b": 1, "a": None, "c": "x"}) == b'{"b":1,"c":"x"}'


def test_an_entry_recorded_since_is_not_compared_when_a_load_lacks_it() -> None:
    then = {"format": "jsonl"}
    now = {"format": "jsonl", "input": "sha256:ab"}
    assert routing_changes(then, now) == []
    assert unrecorded(then, now) == ["input"]
    assert routing_changes({**then, "input": "sha256:cd"}, now) == [
        "input: 'sha256:cd' then, 'sha256:ab' now"
    ]
    assert unrecorded({**then, "input": "sha256:cd"}, now) == []
    # Any other missing entry still means None.
    assert routing_changes(then, {**now, "key_field": "user"}) == [
        "key_field: None then, 'user' now"
    ]
