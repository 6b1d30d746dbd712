"""The accumulator stepped with an explicit `now`: linger, full batches, buffer memory,
expiry, partitioners (keyed, sticky, adaptive, leader-aware, custom), append_many, CAS."""

from __future__ import annotations

import random
from typing import Any

import pytest

from trio_kafka.core import (
    Ambiguous,
    ClusterView,
    DeliveryHandle,
    Failed,
    ProducerBatch,
    ProducerConfig,
    ProducerCore,
    ProducerRecord,
)
from trio_kafka.core._core import PartitionResponse
from trio_kafka.core._partitioner import StickyState, partition_for_key
from trio_kafka.errors import (
    AmbiguousDeliveryTimeoutError,
    DeliveryTimeoutError,
    InvalidPartitionError,
    RecordTooLargeError,
    RequestTimeoutError,
    UnknownTopicError,
)
from trio_kafka.records import decode_batches

VALUE = b"v" * 100  # 116 bytes with the per-record overhead estimate


def make_core(leaders: dict[str, list[int]] | None = None, **options: Any) -> ProducerCore:
    config = ProducerConfig(**options)  # times in virtual seconds: no unit warnings
    core = ProducerCore(
        config,
        random.Random(7),
        cluster=ClusterView.from_leaders(leaders or {"t": [1, 2, 1]}),
    )
    if config.enable_idempotence:
        core.set_producer_id(1000, 0, 0.0)
    return core


def ack_all(core: ProducerCore, drained: dict[int, list[Any]], now: float) -> None:
    for node, batches in drained.items():
        answers = {(b.topic, b.partition): PartitionResponse(base_offset=0) for b in batches}
        core.handle_response(node, batches, answers, now)


def test_batch_is_not_ready_before_linger_and_is_ready_at_linger() -> None:
    core = make_core(linger=0.01)
    handle = core.append("t", VALUE, partition=0, now=0.0)
    assert handle is not None
    nodes, delay, unknown = core.ready(0.004)
    assert nodes == set() and delay == pytest.approx(0.006) and unknown == set()
    nodes, _, _ = core.ready(0.01)
    assert nodes == {1}


def test_a_full_batch_is_ready_at_once() -> None:
    core = make_core(linger=5.0, batch_size=1000)
    for _ in range(9):  # 8 records of 116 bytes fill 1000; the 9th opens a second batch
        core.append("t", VALUE, partition=0, now=0.0)
    assert core.ready(0.0).ready_nodes == {1}
    drained = core.drain(0.0, [1])
    assert [len(b.records) for b in drained[1]] == [8]


def test_buffer_memory_is_reserved_on_append_and_released_on_completion() -> None:
    core = make_core(linger=5.0, buffer_memory=1000, batch_size=16384)
    handles = [core.append("t", VALUE, partition=0, now=0.0) for _ in range(8)]
    assert all(h is not None for h in handles)
    assert core.accumulator.buffer_used == 8 * 116
    assert core.append("t", VALUE, partition=0, now=0.0) is None  # no room: driver waits
    assert core.accumulator.exhausted
    # An exhausted buffer makes everything sendable, lingering or not (as Java does).
    assert core.ready(0.0).ready_nodes == {1}
    ack_all(core, core.drain(0.0, [1]), 0.001)
    assert core.accumulator.buffer_used == 0 and not core.accumulator.exhausted
    assert core.append("t", VALUE, partition=0, now=0.002) is not None
    assert core.metrics_snapshot().buffer_in_use == 116


def test_a_record_larger_than_the_buffer_is_refused_at_once() -> None:
    core = make_core(buffer_memory=500)
    with pytest.raises(RecordTooLargeError, match="buffer_memory=500"):
        core.append("t", b"x" * 600, partition=0, now=0.0)


def test_a_record_larger_than_max_request_size_is_refused() -> None:
    core = make_core(max_request_size=1000)
    with pytest.raises(RecordTooLargeError, match="max_request_size=1000"):
        core.append("t", b"x" * 2000, partition=0, now=0.0)


def test_unknown_topic_asks_the_driver_for_metadata() -> None:
    core = make_core()
    with pytest.raises(UnknownTopicError) as info:
        core.append("nope", VALUE, now=0.0)
    assert info.value.topic == "nope"


def test_a_never_sent_batch_expires_as_failed_with_delivery_timeout() -> None:
    core = make_core(leaders={"t": [-1]})  # no leader: it can never be sent
    handle = core.append("t", VALUE, partition=0, now=0.0)
    assert handle is not None
    assert core.ready(1.0).unknown_leader_topics == {"t"}
    assert core.expire(119.9) == []
    assert len(core.expire(120.0)) == 1
    outcome = handle.outcome
    assert isinstance(outcome, Failed) and isinstance(outcome.error, DeliveryTimeoutError)
    assert core.accumulator.buffer_used == 0


def test_an_in_flight_batch_expires_only_when_its_request_returns_and_then_is_ambiguous() -> None:
    core = make_core()
    handle = core.append("t", VALUE, partition=0, now=0.0)
    assert handle is not None
    drained = core.drain(0.01, core.ready(0.01).ready_nodes)
    assert core.expire(500.0) == []  # still in flight: not expired, not settled
    assert not handle.done()
    core.handle_request_failure(1, drained[1], RequestTimeoutError("timed out"), 500.0)
    outcome = handle.outcome
    assert isinstance(outcome, Ambiguous)
    assert isinstance(outcome.error, AmbiguousDeliveryTimeoutError)


def test_a_queued_retry_of_a_maybe_written_batch_expires_as_ambiguous() -> None:
    core = make_core()
    handle = core.append("t", VALUE, partition=0, now=0.0)
    drained = core.drain(0.01, core.ready(0.01).ready_nodes)
    core.handle_request_failure(1, drained[1], RequestTimeoutError("lost"), 1.0)
    assert handle is not None and not handle.done()  # retried with the same sequence
    core.accumulator.cluster = ClusterView.from_leaders({"t": [-1, 2, 1]})  # cannot resend
    core.expire(120.0)
    outcome = handle.outcome
    assert isinstance(outcome, Ambiguous)
    assert isinstance(outcome.error, AmbiguousDeliveryTimeoutError)


def test_keyed_records_land_where_java_puts_them() -> None:
    core = make_core(leaders={"t": [1] * 12})
    for i in range(200):
        key = b"key-%d" % i
        handle = core.append("t", VALUE, key, now=0.0)
        assert handle is not None and handle.batch.partition == partition_for_key(key, 12)


def test_ignore_keys_sends_keyed_records_through_the_sticky_partitioner() -> None:
    core = make_core(leaders={"t": [1] * 12}, partitioner_ignore_keys=True)
    partitions = {core.append("t", VALUE, b"k%d" % i, now=0.0).batch.partition for i in range(20)}  # type: ignore[union-attr]
    assert len(partitions) == 1


def test_sticky_partitioner_sticks_for_a_batch_worth_of_bytes_then_switches() -> None:
    core = make_core(leaders={"t": [1, 2, 3, 4]}, batch_size=1000, linger=10.0)
    sticky_bytes: list[int] = []  # bytes sent to each sticky choice, in order
    last = None
    for _ in range(300):
        handle = core.append("t", VALUE, now=0.0)
        assert handle is not None
        sticky = core.accumulator._sticky["t"]
        if last is None or sticky.produced < last:  # a new sticky choice was made
            sticky_bytes.append(0)
            assert handle.batch.partition == sticky.partition
        sticky_bytes[-1] += 116
        last = sticky.produced
    assert len(sticky_bytes) > 10
    partitions_used = {p for (t, p) in core.accumulator.queues}
    assert partitions_used == {0, 1, 2, 3}
    for produced in sticky_bytes[:-1]:
        # Java: switch after between batch_size and 2 * batch_size bytes (KIP-794).
        assert 1000 <= produced <= 2 * 1000 + 116


def test_sticky_partitioner_skips_partitions_without_a_leader() -> None:
    core = make_core(leaders={"t": [1, -1, 2]}, batch_size=200, linger=10.0)
    chosen = {core.append("t", VALUE, now=0.0).batch.partition for _ in range(300)}  # type: ignore[union-attr]
    assert chosen == {0, 2}


class _Picks:
    """A random source that returns given draws (for the adaptive table)."""

    def __init__(self, picks: list[int]) -> None:
        self.picks = picks

    def random(self) -> float:
        return 0.5

    def randrange(self, stop: int, /) -> int:
        return self.picks.pop(0) % stop


def test_adaptive_partitioning_weights_partitions_by_short_queues() -> None:
    # Java's own example: queue sizes 0 3 1 -> frequencies 4 1 3 -> table 4 5 8.
    sticky = StickyState()
    sticky.update_load_stats([0, 3, 1], [0, 1, 2], 3)
    assert sticky.cumulative == [4, 5, 8]
    cluster = ClusterView.from_leaders({"t": [1, 2, 3]})
    rng = _Picks(list(range(8)))
    assert [sticky.next_partition("t", cluster, rng) for _ in range(8)] == [0, 0, 0, 0, 1, 2, 2, 2]


def test_adaptive_partitioning_is_uniform_when_queues_are_equal() -> None:
    sticky = StickyState()
    sticky.update_load_stats([2, 2, 2], [0, 1, 2], 3)
    assert sticky.cumulative is None


def test_ready_builds_load_stats_that_steer_away_from_a_slow_leader() -> None:
    core = make_core(leaders={"t": [1, 2, 3]}, batch_size=200, linger=0.0)
    # Node 1 never gets drained (slow); nodes 2 and 3 do.
    for step in range(60):
        now = step * 0.01
        for _ in range(3):
            core.append("t", VALUE, now=now)
        ready = core.ready(now)
        ack_all(core, core.drain(now, ready.ready_nodes - {1}), now)
    queue0 = core.accumulator.queues.get(("t", 0))
    assert queue0 is not None and len(queue0) >= 3
    sticky = core.accumulator._sticky["t"]
    assert sticky.cumulative is not None
    weights = [sticky.cumulative[0]] + [
        b - a for a, b in zip(sticky.cumulative, sticky.cumulative[1:])
    ]
    assert weights[0] < weights[1] and weights[0] < weights[2]


def test_availability_timeout_marks_a_leader_that_is_not_drained() -> None:
    core = make_core(
        leaders={"t": [1, 2, 3]}, batch_size=200, linger=0.0, partitioner_availability_timeout=0.05
    )
    for step in range(40):
        now = step * 0.01
        core.append("t", VALUE, now=now)
        ready = core.ready(now)
        ack_all(core, core.drain(now, ready.ready_nodes - {1}), now)
    assert 1 in core.cluster.unavailable_nodes
    assert 0 not in core.cluster.available_partitions("t")


def test_leader_aware_partitioner_sends_every_unkeyed_record_to_one_leader() -> None:
    leaders = {"a": [1, 2, 3, 1, 2, 3], "b": [3, 1, 2, 3], "c": [2, 3, 1]}
    core = make_core(leaders=leaders, partitioner="leader_aware", batch_size=300)
    cluster = core.cluster
    nodes = set()
    for i in range(300):
        topic = "abc"[i % 3]
        handle = core.append(topic, VALUE, now=i * 0.01)  # 3 s in all
        assert handle is not None
        nodes.add(cluster.leader(topic, handle.batch.partition))
    assert len(nodes) == 1
    first = nodes.pop()
    assert core.accumulator.leader_node == first
    # After leader_switch_interval (30 s) it moves to another broker, again one only.
    later = set()
    for i in range(100):
        topic = "abc"[i % 3]
        handle = core.append(topic, VALUE, now=31.0 + i * 0.01)
        assert handle is not None
        later.add(cluster.leader(topic, handle.batch.partition))
    assert len(later) == 1 and later != {first}


def test_leader_aware_partitioner_falls_back_for_a_topic_without_a_partition_there() -> None:
    core = make_core(leaders={"a": [1, 2], "b": [1, 1]}, partitioner="leader_aware")
    handle = core.append("b", VALUE, now=0.0)
    assert handle is not None and core.accumulator.leader_node == 1  # covers both
    handle = core.append("a", VALUE, now=0.0)
    assert handle is not None and handle.batch.partition == 0
    core.update_metadata(ClusterView.from_leaders({"a": [2, 2], "b": [1, 1], "c": [1, 1]}))
    handle = core.append("a", VALUE, now=0.1)
    assert handle is not None and core.cluster.leader("a", handle.batch.partition) == 2


def test_a_custom_partitioner_sees_the_record_and_the_leaders() -> None:
    seen: list[tuple[ProducerRecord, tuple[int, ...]]] = []

    def to_leader_2(record: ProducerRecord, cluster: ClusterView) -> int:
        seen.append((record, cluster.leaders[record.topic]))
        return cluster.leaders[record.topic].index(2)

    core = make_core(partitioner=to_leader_2)
    handle = core.append("t", VALUE, b"k", now=0.0)
    assert handle is not None and handle.batch.partition == 1
    assert seen[0][0].key == b"k" and seen[0][1] == (1, 2, 1)


def test_a_custom_partitioner_choosing_a_partition_the_topic_lacks_is_refused_by_name() -> None:
    core = make_core(partitioner=lambda record, cluster: 7)
    with pytest.raises(InvalidPartitionError, match="chose partition 7 of topic 't', which has 3"):
        core.append("t", VALUE, now=0.0)
    assert core.accumulator.buffer_used == 0


def test_a_leader_aware_node_that_leaves_the_cluster_is_replaced_at_the_next_append() -> None:
    core = make_core(leaders={"t": [1, 2, 1, 2]}, partitioner="leader_aware")
    handle = core.append("t", VALUE, now=0.0)
    assert handle is not None
    first = core.accumulator.leader_node
    other = 2 if first == 1 else 1
    core.update_metadata(ClusterView.from_leaders({"t": [other] * 4}))
    handle = core.append("t", VALUE, now=0.1)  # long before leader_switch_interval
    assert handle is not None and core.accumulator.leader_node == other


def test_a_request_settles_only_its_batches_still_in_flight_and_frees_the_node() -> None:
    core = make_core(linger=0.0)
    core.append("t", VALUE, partition=0, now=0.0)
    core.append("t", VALUE, partition=2, now=0.0)
    ((node, batches),) = core.drain(0.0, [1]).items()
    assert len(batches) == 2 and core.accumulator.node_in_flight == {1: 1}
    answers = {(b.topic, b.partition): PartitionResponse(base_offset=0) for b in batches}
    settled = core.handle_response(node, batches, answers, 0.0)
    assert (settled.completed, settled.retried, settled.refresh_metadata) == (2, 0, False)
    assert core.accumulator.node_in_flight == {}
    core.append("t", VALUE, partition=0, now=0.0)
    assert list(core.drain(0.0, [1])) == [1]
    assert core.accumulator.node_in_flight == {1: 1}
    again = core.handle_response(node, batches, answers, 0.0)  # a late duplicate: no-op
    assert (again.completed, again.retried) == (0, 0)
    assert core.accumulator.node_in_flight == {1: 1}  # the later request still counts


def test_append_many_fills_batches_in_one_call() -> None:
    core = make_core(leaders={"t": [1, 2]}, batch_size=1000, linger=10.0)
    spans, taken = core.append_many("t", [VALUE] * 50, 0.0)
    assert taken == 50
    assert sum(span.record_count for span in spans) == 50
    handles = [h for span in spans for h in span.handles()]
    assert len(handles) == 50
    assert core.accumulator.buffer_used == 50 * 116
    ack_all(core, core.drain(1.0, [1, 2]), 1.0)
    # Draining takes one batch per partition per request; the rest follows.
    while core.accumulator.has_undrained:
        ack_all(core, core.drain(1.0, [1, 2]), 1.0)
    assert all(h.done() for h in handles)


def test_append_many_stops_when_the_buffer_is_full() -> None:
    core = make_core(leaders={"t": [1]}, buffer_memory=1160)
    spans, taken = core.append_many("t", [VALUE] * 50, 0.0)
    assert taken == 10 and sum(s.record_count for s in spans) == 10
    assert core.accumulator.exhausted


def test_append_many_to_a_partition_fills_each_batch_before_opening_the_next() -> None:
    core = make_core(leaders={"t": [1, 2]}, batch_size=1000, linger=10.0)
    values = [b"%0100d" % i for i in range(50)]
    spans, taken = core.append_many("t", values, 0.0, partition=1)
    assert taken == 50
    # 116 bytes a record: 8 fit a batch of 1000 bytes, the rest open new batches.
    assert [s.record_count for s in spans] == [8, 8, 8, 8, 8, 8, 2]
    assert all(s.batch.partition == 1 for s in spans)
    assert core.accumulator.buffer_used == 50 * 116
    assert [v for s in spans for v in s.batch.values] == values  # in order
    # The same cut as one append(partition=) per record.
    one_by_one = make_core(leaders={"t": [1, 2]}, batch_size=1000, linger=10.0)
    handles = [one_by_one.append("t", v, partition=1, now=0.0) for v in values]
    assert [len(b.values) for b in one_by_one.accumulator.queues[("t", 1)]] == [
        s.record_count for s in spans
    ]
    assert all(h is not None for h in handles)


def test_append_many_to_a_partition_continues_its_open_batch() -> None:
    core = make_core(leaders={"t": [1]}, batch_size=1000, linger=10.0)
    first = core.append("t", VALUE, partition=0, now=0.0)
    assert first is not None
    spans, taken = core.append_many("t", [VALUE] * 9, 0.0, partition=0)
    assert taken == 9
    assert spans[0].batch is first.batch and (spans[0].start, spans[0].stop) == (1, 8)
    assert [s.record_count for s in spans] == [7, 2]


def test_append_many_to_a_partition_keeps_keys_and_none_values() -> None:
    core = make_core(leaders={"t": [1, 1]}, batch_size=1000, linger=0.0)
    values = [b"a", None, b"c"]
    keys = [b"k1", b"k2", None]
    spans, taken = core.append_many("t", values, 0.0, partition=1, keys=keys)
    assert taken == 3 and len(spans) == 1
    assert core.accumulator.buffer_used == 3 * 16 + 1 + 1 + 4
    (batch,) = core.drain(1.0, [1])[1]
    (decoded,) = decode_batches(batch.encode())
    assert [(r.key, r.value) for r in decoded.records] == list(zip(keys, values, strict=True))


def test_append_many_to_a_partition_refuses_a_partition_the_topic_lacks() -> None:
    core = make_core(leaders={"t": [1, 1]})
    with pytest.raises(InvalidPartitionError, match="partition 2 of topic 't'"):
        core.append_many("t", [VALUE], 0.0, partition=2)
    core.append("t", VALUE, partition=1, now=0.0)  # an open batch does not bypass the check
    core.update_metadata(ClusterView.from_leaders({"t": [1]}))
    with pytest.raises(InvalidPartitionError, match="partition 1 of topic 't'"):
        core.append_many("t", [VALUE], 0.0, partition=1)


def test_append_many_to_a_partition_stops_when_the_buffer_is_full() -> None:
    core = make_core(leaders={"t": [1]}, buffer_memory=1160, batch_size=500)
    spans, taken = core.append_many("t", [VALUE] * 50, 0.0, partition=0)
    assert taken == 10 and sum(s.record_count for s in spans) == 10
    assert core.accumulator.exhausted and core.accumulator.buffer_used == 1160


def test_append_many_with_keys_but_no_partition_is_refused() -> None:
    core = make_core(leaders={"t": [1]})
    with pytest.raises(ValueError, match="keys= needs partition="):
        core.append_many("t", [VALUE], 0.0, keys=[b"k"])


def test_records_with_an_expected_offset_share_a_batch_only_when_contiguous() -> None:
    core = make_core(leaders={"t": [1]})
    h1 = core.append("t", VALUE, partition=0, now=0.0, expected_offset=10)
    h2 = core.append("t", VALUE, partition=0, now=0.0, expected_offset=11)
    h3 = core.append("t", VALUE, partition=0, now=0.0, expected_offset=20)
    h4 = core.append("t", VALUE, partition=0, now=0.0)
    assert h1 is not None and h2 is not None and h3 is not None and h4 is not None
    assert h1.batch is h2.batch and h3.batch is not h2.batch and h4.batch is not h3.batch
    assert h1.batch.expected_offset == 10 and h3.batch.expected_offset == 20
    assert h4.batch.expected_offset == -1


@pytest.mark.parametrize("plain", [1, 5])
def test_a_record_with_an_expected_offset_never_joins_a_batch_without_one(plain: int) -> None:
    """A plain batch's `expected_offset` is -1, so with n records in it, -1 + n equals
    the offset a CAS record expecting n - 1 would need: it joined the plain batch, was
    sent without an expectation and acknowledged wherever it landed (expecting 4, it
    was acknowledged at 6 on the mock broker). It opens a CAS batch of its own."""
    core = make_core(leaders={"t": [1]}, linger=5.0)
    for _ in range(plain):
        core.append("t", VALUE, partition=0, now=0.0)
    handle = core.append("t", VALUE, partition=0, now=0.0, expected_offset=plain - 1)
    assert handle is not None
    assert handle.batch.expected_offset == plain - 1 and handle.index == 0
    # The next contiguous CAS record joins it, and a plain record does not.
    after = core.append("t", VALUE, partition=0, now=0.0, expected_offset=plain)
    assert after is not None and after.batch is handle.batch and after.index == 1
    last = core.append("t", VALUE, partition=0, now=0.0)
    assert last is not None and last.batch.expected_offset == -1 and last.index == 0


def test_drain_keeps_a_request_under_max_request_size() -> None:
    core = make_core(leaders={"t": [1, 1, 1, 1]}, batch_size=1000, linger=0.0)
    for p in range(4):
        for _ in range(8):
            core.append("t", VALUE, partition=p, now=0.0)
    drained = core.drain(0.0, [1], max_request_size=2000)
    assert len(drained[1]) == 2  # two 928-byte batches fit, a third would not
    ack_all(core, drained, 0.0)
    drained = core.drain(0.0, [1], max_request_size=2000)
    assert {b.partition for b in drained[1]} == {2, 3}  # round robin: the others next


def test_one_unknown_topic_error_for_the_core_and_the_network_layer() -> None:
    from trio_kafka import errors

    core = make_core()
    with pytest.raises(errors.UnknownTopicError) as info:
        core.append("nope", VALUE, now=0.0)
    assert UnknownTopicError is errors.UnknownTopicError
    assert isinstance(info.value, errors.RetriableError)
    assert "'nope'" in str(info.value)
    late = errors.UnknownTopicError("not there after 5 s", topic="t")  # the net layer's form
    assert (str(late), late.topic) == ("not there after 5 s", "t")


def test_records_with_and_without_keys_headers_and_timestamps_encode_as_sent() -> None:
    class Handle(DeliveryHandle, frozen=True, gc=False):
        pass

    config = ProducerConfig.from_kwargs(linger=0.0)
    core = ProducerCore(
        config,
        random.Random(7),
        cluster=ClusterView.from_leaders({"t": [1]}),
        wall_offset=1_000.0,
        handle_class=Handle,
    )
    core.set_producer_id(1000, 0, 0.0)
    sent: list[dict[str, Any]] = [
        {"value": b"plain"},
        {"value": None},
        {"value": b"keyed", "key": b"k"},
        {"value": b"with headers", "headers": [("h", b"1"), ("n", None)]},
        {"value": b"stamped", "timestamp_ms": 42},
        {"value": b"plain again"},
    ]
    handles = [core.append("t", now=0.5 + i / 1000, partition=0, **r) for i, r in enumerate(sent)]
    assert all(type(h) is Handle for h in handles)
    drained = core.drain(1.0, [1])
    [batch] = drained[1]
    assert batch.records[2] == (
        int((0.502 + core.accumulator.wall_offset) * 1000),
        b"k",
        b"keyed",
        None,
    )
    assert [r[2] for r in batch.records] == [r["value"] for r in sent]
    [decoded] = decode_batches(core.encode(batch))
    assert [(r.key, r.value, r.headers) for r in decoded.records] == [
        (r.get("key"), r["value"], tuple(r.get("headers", ()))) for r in sent
    ]
    assert [r.timestamp for r in decoded.records] == [
        1_000_500,
        1_000_501,
        1_000_502,
        1_000_503,
        42,
        1_000_505,
    ]
    ack_all(core, drained, 1.0)
    assert [h.result().timestamp for h in handles if h is not None] == [
        r.timestamp for r in decoded.records
    ]


def test_explicit_partition_out_of_range_is_refused_even_with_open_batches() -> None:
    """Appends with `partition=` take a fast path into the partition's open batch; it
    must still check the partition against the known count, name the bad partition,
    and leave the records already taken (and the next good append) untouched."""
    core = make_core({"t": [1, 2, 1]})
    good = [core.append("t", VALUE, partition=p, now=0.0) for p in (0, 1, 2, 2, 1, 0)]
    assert [h.batch.partition for h in good if h is not None] == [0, 1, 2, 2, 1, 0]
    used = core.accumulator.buffer_used
    for bad in (3, 7, -1):
        with pytest.raises(InvalidPartitionError) as info:
            core.append("t", VALUE, partition=bad, now=0.0)
        assert f"partition {bad} of topic 't'" in str(info.value)
        assert "it has 3" in str(info.value)
    assert core.accumulator.buffer_used == used  # nothing reserved for a refused record
    # Metadata now says the topic has 2 partitions (deleted and recreated): partition 2
    # still has an open batch, but an append to it is refused, by name.
    core.accumulator.update_cluster(ClusterView.from_leaders({"t": [1, 2]}))
    with pytest.raises(InvalidPartitionError, match=r"partition 2 of topic 't'.*it has 2"):
        core.append("t", VALUE, partition=2, now=0.0)
    # An unknown topic still asks for metadata.
    with pytest.raises(UnknownTopicError):
        core.append("other", VALUE, partition=0, now=0.0)
    # A good append lands in the open batch of its partition, after the earlier records.
    after = core.append("t", VALUE, partition=1, now=0.0)
    assert after is not None and after.batch is good[1].batch and after.index == 2  # type: ignore[union-attr]
    assert [len(h.batch.values) for h in good[:3] if h is not None] == [2, 3, 2]


@pytest.mark.parametrize("runs", [1, 3, 40])
def test_a_batch_encodes_each_records_own_append_time(runs: int) -> None:
    # Bulk appends share one `now` per run; the encoder converts each distinct time once.
    core = make_core(leaders={"t": [1]}, batch_size=100_000, linger=0.0)
    nows = [1.0 + run * 0.25 for run in range(runs) for _ in range(40 // runs)]
    for now in nows:
        core.append("t", b"v", partition=0, now=now)
    (batch,) = core.drain(100.0, [1])[1]
    (decoded,) = decode_batches(batch.encode())
    assert [r.timestamp for r in decoded.records] == [int(now * 1000) for now in nows]


def test_a_batch_with_some_keyed_or_headed_records_encodes_every_record() -> None:
    core = make_core(leaders={"t": [1]}, batch_size=100_000, linger=0.0)
    expected = []
    for i in range(30):
        key = b"k%d" % i if i % 7 == 3 else None
        headers = [("h", b"%d" % i)] if i % 11 == 5 else None
        timestamp = 5_000 + i if i % 13 == 12 else None
        core.append("t", b"v%d" % i, key, headers, 0, timestamp, now=2.0)
        expected.append((key, b"v%d" % i, tuple(headers or ()), timestamp or 2000))
    core.append_many("t", [b"tail"] * 3, 3.0, partition=0)
    expected += [(None, b"tail", (), 3000)] * 3
    (batch,) = core.drain(100.0, [1])[1]
    (decoded,) = decode_batches(batch.encode())
    assert [(r.key, r.value, tuple(r.headers), r.timestamp) for r in decoded.records] == expected


def test_bulk_keys_stay_with_their_records_through_a_split() -> None:
    core = make_core(leaders={"t": [1]}, batch_size=100_000, linger=0.0)
    keys = [b"k%d" % i if i % 4 else None for i in range(10)]
    core.append("t", b"first", b"k-first", partition=0, now=0.0)
    core.append_many("t", [b"v%d" % i for i in range(10)], 0.0, partition=0, keys=keys)
    core.append("t", b"last", partition=0, now=0.0)  # after the bulk keys: no key
    (batch,) = core.accumulator.queues[("t", 0)]
    expected = [b"k-first", *keys, None]
    assert [batch.record(i)[1] for i in range(12)] == expected
    pieces = batch.split([5], [batch.size // 2, batch.size - batch.size // 2])
    assert [p.record(i)[1] for p in pieces for i in range(p.record_count)] == expected
    for piece in pieces:
        (decoded,) = decode_batches(piece.encode())
        assert [r.key for r in decoded.records] == [
            piece.record(i)[1] for i in range(piece.record_count)
        ]


def test_a_key_alone_goes_to_the_batchs_key_list_not_a_tuple_per_record() -> None:
    """A keyed producer's records (a key, no headers or timestamp) cost no tuple each:
    `extras` stays None. Mixed with a record that has headers (its key in `extras`), each
    record keeps its own key through a split and the encoding."""
    core = make_core(leaders={"t": [1]}, batch_size=100_000, linger=0.0)
    for i in range(6):
        core.append("t", b"v%d" % i, b"k%d" % i, partition=0, now=0.0)
    (batch,) = core.accumulator.queues[("t", 0)]
    assert batch.extras is None and batch.keys == [b"k%d" % i for i in range(6)]
    core.append("t", b"headed", b"kh", [("h", b"1")], 0, None, now=0.0)
    core.append("t", b"plain", partition=0, now=0.0)
    core.append("t", b"last", b"k9", partition=0, now=0.0)
    expected = [*(b"k%d" % i for i in range(6)), b"kh", None, b"k9"]
    assert [batch.record(i)[1] for i in range(9)] == expected
    assert batch.extras == {6: (None, b"kh", [("h", b"1")])}
    third = batch.size // 3
    pieces = batch.split([4, 7], [third, third, batch.size - 2 * third])
    assert [p.record(i)[1] for p in pieces for i in range(p.record_count)] == expected
    decoded = [r for piece in pieces for b in decode_batches(piece.encode()) for r in b.records]
    assert [r.key for r in decoded] == expected
    assert [tuple(r.headers) for r in decoded][6] == (("h", b"1"),)


@pytest.mark.parametrize("seed", range(20))
def test_create_times_kept_as_runs_are_exactly_the_per_record_timestamps(seed: int) -> None:
    # Appends stamp only when `now` reaches the batch's tick; every record's create
    # time must still be int((now + wall_offset) * 1000) of its own append, also at
    # clock readings just below and at a millisecond boundary.
    rng = random.Random(seed)
    offset = rng.choice([0.0, 1_700_000_000.123456, rng.uniform(0, 2e9)])
    batch = ProducerBatch("t", 0, 1_000_000, 0.0, wall_offset=offset)
    # (a clock near 0 beside a wall offset of decades: the case where stepping by the
    # clock's own ulp would take forever)
    now = rng.choice([rng.uniform(0, 1e6), rng.uniform(0, 1e-6), 0.0])
    expected: list[int] = []
    for index in range(3_000):
        step = rng.choice([0.0, 1e-7, 1e-4, 0.001, rng.uniform(0, 0.003)])
        if rng.random() < 0.05 and batch.tick != float("inf"):
            now = max(now, batch.tick - rng.choice([0.0, 1e-12]))  # at or just below
        now += step
        batch.values.append(b"v")
        if now >= batch.tick:
            batch.stamp(index, now)
        expected.append(int((now + offset) * 1000))
    assert batch.create_times() == expected, f"seed {seed}"
    assert [batch.create_time(i) for i in range(len(expected))] == expected


def test_a_batch_without_expected_offset_has_base_offset_0_for_a_broker_without_cas() -> None:
    # Apache Kafka 4.4 refuses a produced batch whose base offset is not 0
    # (InvalidRecordException): every write of ours failed there with -1.
    core = ProducerCore(
        ProducerConfig.from_kwargs(linger=0.0),
        random.Random(7),
        cluster=ClusterView.from_leaders({"t": [1]}),
    )
    core.set_producer_id(1000, 0, 0.0)
    core.append("t", now=0.5, partition=0, value=b"v")
    [batch] = core.drain(1.0, [1])[1]
    [plain] = decode_batches(core.encode(batch, cas_broker=False))
    [cas] = decode_batches(core.encode(batch, cas_broker=True))
    assert (plain.base_offset, cas.base_offset) == (0, -1)
