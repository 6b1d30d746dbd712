"""The partition rule over Arrow columns (spark/_arrow.py) is `partition_of`, bit for bit."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from trio_kafka.core._load import partition_of
from trio_kafka.errors import ConfigError
from trio_kafka.spark._arrow import partitions_of
from trio_kafka.spark._task import chunks_of

SEED = 20261128


def random_keys(rng: random.Random, count: int) -> list[bytes | None]:
    return [
        None if rng.random() < 0.1 else rng.randbytes(rng.randrange(0, 41)) for _ in range(count)
    ]


@pytest.mark.parametrize("partitions", [1, 6, 7, 1000])
def test_partitions_of_arrow_columns_match_partition_of(partitions: int) -> None:
    rng = random.Random(SEED)
    keys = random_keys(rng, 5000)
    rows = list(range(3, 5003))
    want = [partition_of(r, k, partitions) for r, k in zip(rows, keys, strict=True)]
    got = partitions_of(pa.array(rows, pa.int64()), pa.array(keys, pa.binary()), partitions)
    assert got.tolist() == want, f"seed {SEED}"
    # A slice of an array starts at an offset into its buffers.
    sliced = partitions_of(pa.array(rows[100:]), pa.array(keys, pa.binary()).slice(100), partitions)
    assert sliced.tolist() == want[100:], f"seed {SEED}"


def test_partitions_of_string_keys_and_no_keys() -> None:
    keys = ["é", "user-1", None]
    want = [partition_of(r, None if k is None else k.encode(), 6) for r, k in enumerate(keys)]
    assert partitions_of(pa.array([0, 1, 2]), pa.array(keys), 6).tolist() == want
    assert partitions_of(pa.array([0, 1, 7]), None, 6).tolist() == [0, 1, 1]


def test_an_arrow_row_in_the_wrong_partition_is_refused_before_loading() -> None:
    key = b"k"
    right = partition_of(0, key, 6)
    batch = pa.RecordBatch.from_pydict(
        {
            "partition": pa.array([right, (right + 1) % 6], pa.int32()),
            "row": pa.array([0, 1], pa.int64()),
            "key": pa.array([key, key], pa.binary()),
            "value": pa.array([b"a", b"b"]),
        }
    )
    with pytest.raises(ConfigError, match=f"row 1 belongs to partition {right} "):
        list(chunks_of(batch, 6))
    first = dict(chunks_of(batch.slice(0, 1), 6))
    assert first[right].routed and list(first[right].keys or []) == [key]
