"""What a record costs the cyclic garbage collector: nothing. The records of a batch hold
no object it tracks, and a live handle is not tracked either.

CPython tracks every instance of a class defined in Python (tuple and int subclasses
too); a handle is a msgspec struct with `gc=False` (core/_batch.py, `DeliveryHandle`),
which the collector never sees. These tests keep both from regressing, before and after
acknowledgement, and check that a handle holds nothing but its batch and its index (a
cycle through an untracked handle would never be collected).
"""

from __future__ import annotations

import contextlib
import gc
import pickle
import random
import sys
from collections.abc import Iterator

import pytest

from trio_kafka.client._handles import RecordHandle
from trio_kafka.core import (
    Acknowledged,
    ClusterView,
    ProducerConfig,
    ProducerCore,
    ProducerRecord,
)

RECORDS = 1000
# Tracked objects a run of appends and one acknowledgement may add whatever the count
# (a batch, its lists, the acknowledgement's): far below one per record.
PER_BATCH_SLACK = 50


def make_core() -> ProducerCore:
    return ProducerCore(
        ProducerConfig(linger=0.0),
        random.Random(7),
        cluster=ClusterView.from_leaders({"t": [1]}),
        handle_class=RecordHandle,
    )


def tracked() -> int:
    gc.collect()
    return len(gc.get_objects())


@contextlib.contextmanager
def alone() -> Iterator[None]:
    """No other thread of the process runs meanwhile (a full run's worker has helper
    threads of earlier tests, whose objects would count too): the GIL is not handed
    over until the block ends."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def test_appended_and_acknowledged_records_hold_no_object_the_collector_tracks() -> None:
    core = make_core()
    first = core.append("t", b"v" * 100, now=0.0)
    assert first is not None
    with alone():
        before = tracked()
        for i in range(RECORDS):
            # (the handles are dropped: what is left is what the batch keeps per record;
            # one millisecond in ten starts a new create-time run)
            core.append("t", b"v" * 100, now=i / 10_000)
        first.batch.complete(0)
        added = tracked() - before
    assert first.batch.ack_times is not None
    assert added < PER_BATCH_SLACK


def test_live_handles_are_not_tracked_and_hold_only_their_batch_and_index() -> None:
    core = make_core()
    first = core.append("t", b"v" * 100, now=0.0)
    assert first is not None
    with alone():
        before = tracked()
        handles = [core.append("t", b"v" * 100, now=0.0) for _ in range(RECORDS)]
        added = tracked() - before
    assert added < PER_BATCH_SLACK
    handle = handles[-1]
    assert handle is not None
    assert type(handle) is RecordHandle
    assert not gc.is_tracked(handle)
    assert set(map(id, gc.get_referents(handle))) <= {
        id(type(handle)),
        id(first.batch),
        id(handle.index),
    }


def test_outcomes_of_an_acknowledged_batch_carry_each_records_own_timestamp() -> None:
    core = make_core()
    wall = 1_700_000_000.0
    core.accumulator.wall_offset = wall
    handles = [core.append("t", b"v", now=i / 1000) for i in range(5)]
    explicit = core.append("t", b"v", timestamp_ms=42, now=0.005)
    batch = explicit.batch  # type: ignore[union-attr]
    batch.complete(100)
    outcomes = [h.outcome for h in [*handles, explicit]]  # type: ignore[union-attr]
    assert outcomes == [
        Acknowledged("t", 0, 100 + i, int((i / 1000 + wall) * 1000)) for i in range(5)
    ] + [Acknowledged("t", 0, 105, 42)]


def test_outcomes_of_a_batch_with_log_append_time_carry_the_brokers_time() -> None:
    core = make_core()
    handles = [core.append("t", b"v", now=i / 1000) for i in range(3)]
    handles[0].batch.complete(7, log_append_time=99)  # type: ignore[union-attr]
    assert [h.outcome for h in handles] == [  # type: ignore[union-attr]
        Acknowledged("t", 0, 7 + i, 99) for i in range(3)
    ]


def test_a_done_callback_gets_an_equal_handle_and_the_batch_does_not_keep_this_one() -> None:
    core = make_core()
    handle = core.append("t", b"v", now=0.0)
    assert handle is not None
    seen: list[object] = []
    handle.add_done_callback(seen.append)
    # The batch's hooks must not refer to the (untracked) handle: batch -> hook ->
    # handle -> batch would be a cycle the collector cannot see.
    hooks = handle.batch.hooks
    assert hooks is not None
    reachable = gc.get_referents(*hooks)
    reachable += gc.get_referents(*reachable)
    assert all(obj is not handle for obj in reachable)
    handle.batch.complete(3)
    assert seen == [handle]
    assert seen[0] is not handle
    assert hash(seen[0]) == hash(handle)
    assert handle != core.append("t", b"v", now=0.0)


def test_a_producer_record_is_untracked_and_keeps_its_named_tuple_surface() -> None:
    record = ProducerRecord("t", b"v", partition=2)
    assert not gc.is_tracked(record)  # a list of them costs the collector nothing
    topic, value, key, headers, partition, timestamp = record
    assert (topic, value, key, headers, partition, timestamp) == ("t", b"v", None, (), 2, None)
    assert (len(record), record[1], record[-2], record[:2]) == (6, b"v", 2, ("t", b"v"))
    assert record._replace(partition=3) == ProducerRecord("t", b"v", partition=3)
    assert record._replace(partition=3) != record
    assert record._asdict() == dict(zip(ProducerRecord._fields, record, strict=True))
    assert hash(record) == hash(ProducerRecord("t", b"v", None, (), 2))
    assert pickle.loads(pickle.dumps(record)) == record  # (Spark ships them to workers)
    with pytest.raises(AttributeError):
        record.partition = 4  # type: ignore[misc]
