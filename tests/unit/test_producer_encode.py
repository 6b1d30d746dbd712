"""`encode_with_extras`: a batch whose records carry keys, explicit timestamps or headers
encodes its plain runs in bulk and the rest one by one. Whatever the mix, the bytes must
be those of appending every record one at a time."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from trio_kafka.core._batch import encode_with_extras
from trio_kafka.core._record import Headers
from trio_kafka.records import BatchBuilder

Extra = tuple[int | None, bytes | None, Headers | None]


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[int], list[bytes | None], dict[int, Extra]]:
    count = draw(st.integers(1, 60))
    # create times as a producer stamps them: non-decreasing milliseconds, in runs
    start = draw(st.integers(0, 2**41))
    steps = draw(st.lists(st.sampled_from([0, 0, 0, 1, 2, 300]), min_size=count, max_size=count))
    stamps: list[int] = []
    now = start
    for step in steps:
        now += step
        stamps.append(now)
    size = draw(st.sampled_from([0, 5, 100, None]))  # None: mixed sizes and None values
    values: list[bytes | None] = [
        (b"v" * size if size is not None else draw(st.one_of(st.none(), st.binary(max_size=9))))
        for _ in range(count)
    ]
    extras: dict[int, Extra] = {}
    for index in draw(st.sets(st.integers(0, count - 1), max_size=count // 3 + 1)):
        extras[index] = (
            draw(st.one_of(st.none(), st.integers(0, 2**41))),
            draw(st.one_of(st.none(), st.binary(max_size=5))),
            draw(st.one_of(st.none(), st.just([("h", b"1")]))),
        )
    return stamps, values, extras


@settings(max_examples=300, deadline=None)
@given(batches())
def test_encode_with_extras_is_byte_identical_to_one_record_at_a_time(
    batch: tuple[list[int], list[bytes | None], dict[int, Extra]],
) -> None:
    stamps, values, extras = batch
    bulk = BatchBuilder()
    encode_with_extras(bulk, stamps, values, extras, None)
    one_by_one = BatchBuilder()
    for index, value in enumerate(values):
        ts, key, headers = extras.get(index, (None, None, None))
        one_by_one.append(stamps[index] if ts is None else ts, key, value, headers or ())
    assert bulk.build() == one_by_one.build()
