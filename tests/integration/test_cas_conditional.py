"""ConditionalWriter and `send(..., expected_offset=)` against the mock broker over TCP."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from tests.integration._backends import mock_cluster
from trio_kafka.broker import DROP, Cluster, HookCall
from trio_kafka.client import (
    ConditionalWriter,
    PartitionReader,
    open_conditional_writer,
    open_producer,
    writer_of,
)
from trio_kafka.errors import (
    ConcurrentWriteError,
    ConfigError,
    ExpectedOffsetMismatchError,
    ProducerClosedError,
    RecordTooLargeError,
)
from trio_kafka.net import open_selector
from trio_kafka.protocol.messages.end_txn import EndTxnRequest
from trio_kafka.protocol.messages.produce import ProduceRequest

#: Each test runs on trio, then on asyncio (issue 16; tests/conftest.py).
pytestmark = pytest.mark.anyio

CAS = {"expected.offset.check.enable": "true"}


def ids(prefix: str) -> itertools.count[int] | object:
    counter = itertools.count()
    return lambda: f"{prefix}-{next(counter)}"


def log_of(
    cluster: Cluster, topic: str, partition: int = 0
) -> list[tuple[int, bytes | None, tuple[bytes | None, int | None]]]:
    return [
        (r.offset, r.value, writer_of(r))
        for b in cluster.decoded(topic, partition)
        if not b.is_control
        for r in b.records
    ]


@asynccontextmanager
async def _fresh_log(
    cluster: Cluster, transactional: bool, **options: Any
) -> AsyncIterator[ConditionalWriter]:
    """A writer of a new one-partition topic "log" (with CAS, or a transactional writer
    of a topic without it), read to its (empty) end; `options` are
    `open_conditional_writer`'s (`producer=` or, by default, the cluster's bootstrap)."""
    cluster.create_topic("log", 1, {} if transactional else CAS)
    if "producer" not in options:
        options["bootstrap"] = cluster.bootstrap
    guarantee = "transactional" if transactional else "exactly_once_cas"
    async with open_conditional_writer("log", 0, guarantee=guarantee, **options) as log:
        assert [r async for r in log.read_to_end()] == []
        yield log


async def test_send_with_expected_offset_lands_exactly_there() -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1, CAS)
        async with open_producer(cluster.bootstrap, linger=0) as producer:
            first = await (await producer.send("log", b"a", partition=0, expected_offset=0))
            second = await (await producer.send("log", b"b", partition=0, expected_offset=1))
            assert (first.offset, second.offset) == (0, 1)
            handle = await producer.send("log", b"c", partition=0, expected_offset=5)
            with pytest.raises(ExpectedOffsetMismatchError) as info:
                await handle
            assert info.value.log_end_offset == 2
            assert info.value.expected_offset == 5
        assert [v for _, v, _ in log_of(cluster, "log")] == [b"a", b"b"]


async def test_a_cas_send_behind_plain_records_of_its_partition_keeps_its_expectation() -> None:
    """Five plain records wait in their batch (linger), then a CAS send expects offset
    4: -1 (a plain batch's "no expectation") + 5 records made it join the plain batch,
    so it was sent without its expectation and acknowledged at offset 6. It is refused
    instead: the plain records take 1-5, so the log end is 6, not 4."""
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1, CAS)
        async with open_producer(cluster.bootstrap, linger=0.5) as producer:
            await (await producer.send("log", b"first", partition=0))
            plain = [await producer.send("log", b"p%d" % n, partition=0) for n in range(5)]
            handle = await producer.send("log", b"cas", partition=0, expected_offset=4)
            with pytest.raises(ExpectedOffsetMismatchError) as info:
                await handle
            assert (info.value.expected_offset, info.value.log_end_offset) == (4, 6)
            assert [(await h).offset for h in plain] == [1, 2, 3, 4, 5]
        assert b"cas" not in [v for _, v, _ in log_of(cluster, "log")]


async def test_send_with_expected_offset_needs_a_partition() -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1, CAS)
        async with open_producer(cluster.bootstrap) as producer:
            with pytest.raises(ConfigError, match="needs partition="):
                await producer.send("log", b"a", expected_offset=0)
            with pytest.raises(ConfigError, match="not an offset"):
                await producer.send("log", b"a", partition=0, expected_offset=-1)


async def test_a_writer_on_a_partition_that_is_not_an_int_is_refused_naming_it() -> None:
    # It was "'<=' not supported between instances of 'int' and 'str'".
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1, CAS)
        with pytest.raises(TypeError, match=r"partition must be an int, not str \('0'\)"):
            async with open_conditional_writer("log", "0", bootstrap=cluster.bootstrap):  # type: ignore[arg-type]
                pass


async def test_idempotent_retry_of_a_landed_cas_write_is_acknowledged() -> None:
    """Dedup before CAS: the first attempt landed, its answer was lost; the retry (same
    sequence) is answered with the original offset, not a mismatch."""
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1, CAS)
        cluster.add_hook(ProduceRequest, lambda call: DROP, after=True, times=1)
        async with open_producer(cluster.bootstrap, linger=0, retry_backoff=0.01) as producer:
            ack = await (await producer.send("log", b"a", partition=0, expected_offset=0))
            assert ack.offset == 0
        assert [v for _, v, _ in log_of(cluster, "log")] == [b"a"]


async def test_lost_response_without_idempotence_is_settled_by_reading_the_offset() -> None:
    """CAS without idempotence: the broker appended, the answer was lost; the retry meets
    a mismatch, the writer reads the offset, finds its own record: acknowledged."""
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1, CAS)
        dropped: list[int] = []

        def drop_first(call: HookCall) -> object:
            dropped.append(1)
            return DROP

        cluster.add_hook(ProduceRequest, drop_first, after=True, times=1)
        async with open_conditional_writer(
            "log",
            0,
            bootstrap=cluster.bootstrap,
            enable_idempotence=False,
            retry_backoff=0.01,
            writer_ids=lambda: "w1",
        ) as log:
            assert [r async for r in log.read_to_end()] == []
            ack = await log.append(b"state-1")
            assert ack.offset == 0
            assert log.ambiguous == 1  # the retry's mismatch came back as ambiguous
            ack = await log.append(b"state-2")
            assert ack.offset == 1
        assert dropped == [1]
        assert log_of(cluster, "log") == [(0, b"state-1", (b"w1", 0)), (1, b"state-2", (b"w1", 1))]


@pytest.mark.parametrize("transactional", [False, True], ids=["cas", "transactional"])
async def test_an_append_carrying_another_writers_headers_is_still_known_as_ours(
    transactional: bool,
) -> None:
    """An append whose headers came from another conditional log (a copy keeps its
    record's `tk.writer` and `tk.seq`): its answer is lost, and the writer settles it by
    reading the record back. The record's own headers come first; read last-wins, the
    copied pair made it someone else's, and the append failed (CAS:
    `ConcurrentWriteError` for the writer's own record; transactions: retried, written
    twice)."""
    copied = [("tk.writer", b"the-source-log-writer"), ("tk.seq", b"41"), ("kind", b"copy")]
    async with mock_cluster() as cluster:
        if transactional:
            cluster.add_hook(EndTxnRequest, lambda call: DROP, after=True, times=1)
        else:
            cluster.add_hook(ProduceRequest, lambda call: DROP, after=True, times=1)
        async with _fresh_log(
            cluster,
            transactional,
            enable_idempotence=transactional,  # (CAS: the read-back path, not dedup)
            retry_backoff=0.01,
            writer_ids=lambda: "copier",
        ) as log:
            ack = await log.append(b"copied", headers=copied)
            assert ack.offset == 0
            # (Transactional: the first append's COMMIT marker is offset 1.)
            assert (await log.append(b"next")).offset == (2 if transactional else 1)
        assert [(v, w) for _, v, w in log_of(cluster, "log")] == [
            (b"copied", (b"copier", 0)),
            (b"next", (b"copier", 1)),
        ]


@pytest.mark.parametrize("transactional", [False, True], ids=["cas", "transactional"])
async def test_a_bad_append_fails_alone_and_the_next_lands_where_it_would_have(
    transactional: bool,
) -> None:
    """Bad input to `append` (a header that cannot be sent, a record over
    `max_request_size`) raises what `send()` raises, naming it, before the append takes
    a sequence or an offset: nothing is written and the writer goes on. Before, on CAS
    the error came from the send after the append had claimed its offset, and broke the
    writer's chain: the next, good append failed with `ConcurrentWriteError` and every
    later one until a re-read. Headers may be a dict, as `send()` takes them."""
    async with mock_cluster() as cluster:
        async with _fresh_log(
            cluster, transactional, max_request_size=10_000, writer_ids=lambda: "w"
        ) as log:
            first = await log.append(b"one", headers={"kind": "text"})
            with pytest.raises(TypeError, match="header 'n' value must be bytes, str or None"):
                await log.append(b"bad", headers=[("n", 5)])  # type: ignore[list-item]
            with pytest.raises(TypeError, match="header 0 must be a"):
                await log.append(b"bad", headers=["kind"])  # type: ignore[list-item]
            with pytest.raises(TypeError, match="value must be bytes or None, not str"):
                await log.append("text")  # type: ignore[arg-type]
            with pytest.raises(RecordTooLargeError, match="max_request_size=10000"):
                await log.append(b"x" * 20_000)
            # Under the limit alone, over it with the writer's own two headers (a
            # record's estimate: 16 bytes, the value, and each header's bytes + 4).
            with pytest.raises(RecordTooLargeError, match="max_request_size=10000"):
                await log.append(b"x" * (10_000 - 16 - 10))
            second = await log.append(b"two")
            assert log.sequence == 2  # the refused appends took no sequence
        step = 2 if transactional else 1  # (a COMMIT marker after each transaction)
        assert (first.offset, second.offset) == (0, step)
        assert [(v, w) for _, v, w in log_of(cluster, "log")] == [
            (b"one", (b"w", 0)),
            (b"two", (b"w", 1)),
        ]


@pytest.mark.parametrize("transactional", [False, True], ids=["cas", "transactional"])
async def test_read_to_end_refuses_a_start_that_is_not_an_offset_and_the_writer_goes_on(
    transactional: bool,
) -> None:
    """`read_to_end(start=)` must be None or an int >= 0, on both backends alike, and
    refusing it leaves the writer as it was. Before, the transactional writer sent -1 to
    the broker (OFFSET_OUT_OF_RANGE) and a str to the Fetch encoder (`ProtocolError`),
    and both writers forgot their next offset first, so the next append asked for a
    re-read."""
    async with mock_cluster() as cluster, _fresh_log(cluster, transactional) as log:
        with pytest.raises(ValueError, match=r"start must be an offset \(>= 0\), not -1"):
            [r async for r in log.read_to_end(start=-1)]
        with pytest.raises(TypeError, match=r"start must be an offset .* not str"):
            [r async for r in log.read_to_end(start="0")]  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"start must be an offset .* not bool"):
            [r async for r in log.read_to_end(start=True)]
        assert (await log.append(b"goes on")).offset == 0


async def test_a_transactional_append_the_topic_refuses_fails_alone() -> None:
    """An append over the topic's `max.message.bytes` (under the client's
    `max_request_size`): the broker refuses its record, the transaction aborts, and the
    group was retried with it forever, a hot loop of aborts (7,301 epochs in 38 s) that
    held every other append and ignored cancellation (its commit is shielded). It fails
    alone with `RecordTooLargeError`; the appends beside it commit, and so does the
    next one."""
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1, {"max.message.bytes": "1000"})
        async with open_conditional_writer(
            "log", 0, bootstrap=cluster.bootstrap, guarantee="transactional"
        ) as log:
            assert [r async for r in log.read_to_end()] == []
            outcomes: dict[int, object] = {}

            async def append(n: int) -> None:
                try:
                    outcomes[n] = (await log.append(b"x" * (3000 if n == 5 else 50))).offset
                except RecordTooLargeError as exc:
                    outcomes[n] = exc

            with anyio.fail_after(20):
                async with anyio.create_task_group() as group:
                    for n in range(10):
                        group.start_soon(append, n)
                await log.append(b"after")
            assert isinstance(outcomes.pop(5), RecordTooLargeError)
            assert all(isinstance(offset, int) for offset in outcomes.values())
            with anyio.fail_after(20), pytest.raises(RecordTooLargeError):
                await log.append(b"y" * 3000)  # alone, as the only append of its group
        async with open_selector(cluster.bootstrap) as selector:
            reader = PartitionReader(selector, isolation="read_committed")
            committed = [r.value for r in await reader.read_all("log", 0)]
        assert sorted(committed) == sorted([b"x" * 50] * 9 + [b"after"])


async def test_concurrent_appends_to_a_topic_with_a_small_batch_limit_each_land() -> None:
    """Sixteen appends of 200 B at once on a topic with `max.message.bytes=1000`: each
    fits alone, but pipelined they joined one CAS batch of 4,358 bytes, which the broker
    refused and which is never split, so the first failed with `RecordTooLargeError` and
    the fifteen behind it with `ConcurrentWriteError`. The writer learns the topic's
    limit with its CAS config and cuts its batches below it."""
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1, {**CAS, "max.message.bytes": "1000"})
        async with open_conditional_writer("log", 0, bootstrap=cluster.bootstrap) as log:
            assert [r async for r in log.read_to_end()] == []
            offsets: list[int] = []

            async def append() -> None:
                offsets.append((await log.append(b"x" * 200)).offset)

            with anyio.fail_after(20):
                async with anyio.create_task_group() as group:
                    for _ in range(16):
                        group.start_soon(append)
            assert sorted(offsets) == list(range(16))
            with pytest.raises(RecordTooLargeError):
                await log.append(b"y" * 2000)  # alone over the limit: fails alone
            assert (await log.append(b"after")).offset == 16
        assert len(log_of(cluster, "log")) == 17


@pytest.mark.parametrize("transactional", [False, True], ids=["cas", "transactional"])
async def test_a_closed_writer_says_so(transactional: bool) -> None:
    """Used after its block ended, a writer failed deep in its producer ("Nursery is
    closed to new arrivals" from `read_to_end`; `ProducerClosedError` from `append`,
    after a warning that an abort could not run)."""
    async with mock_cluster() as cluster:
        async with _fresh_log(cluster, transactional) as log:
            await log.append(b"one")
        assert log.closed
        with pytest.raises(ProducerClosedError, match="append on a closed writer of log-0"):
            await log.append(b"late")
        with pytest.raises(ProducerClosedError, match="read_to_end on a closed writer"):
            [r async for r in log.read_to_end()]


@pytest.mark.parametrize(
    ("transactional", "idempotent"),
    [(False, True), (False, False), (True, True)],
    ids=["cas", "cas-not-idempotent", "transactional"],
)
async def test_an_append_its_producers_serializer_refuses_fails_alone(
    transactional: bool, idempotent: bool
) -> None:
    """A writer on a shared producer with a `value_serializer`: an append the serializer
    refuses fails with the serializer's error and hurts no other append. Before, on CAS
    it broke the chain (the next append: `ConcurrentWriteError`; still on a producer
    without idempotence, whose appends go one at a time), and on transactions every
    append committed with it failed with its error."""

    def serialize(value: object) -> bytes:
        if not isinstance(value, dict):
            raise TypeError(f"not a dict: {value!r}")
        return json.dumps(value, sort_keys=True).encode()

    async with mock_cluster() as cluster:
        async with (
            open_producer(
                cluster.bootstrap,
                linger=0,
                value_serializer=serialize,
                enable_idempotence=idempotent,
            ) as shared,
            _fresh_log(cluster, transactional, producer=shared) as log,
        ):
            with pytest.raises(TypeError, match="not a dict: 'bad'"):
                await log.append("bad")  # type: ignore[arg-type]
            assert (await log.append({"n": 1})).offset == 0  # type: ignore[arg-type]
            outcomes: dict[int, object] = {}

            async def append(n: int) -> None:
                value: object = "bad" if n == 3 else {"n": n}
                try:
                    outcomes[n] = (await log.append(value)).offset  # type: ignore[arg-type]
                except (TypeError, ConcurrentWriteError) as exc:
                    outcomes[n] = exc

            with anyio.fail_after(20):
                async with anyio.create_task_group() as group:
                    for n in range(2, 8):
                        group.start_soon(append, n)
            assert isinstance(outcomes.pop(3), TypeError)
            if transactional:
                assert all(isinstance(offset, int) for offset in outcomes.values())
            elif any(isinstance(o, ConcurrentWriteError) for o in outcomes.values()):
                # CAS: appends already claimed behind the refused one expected offsets
                # past it, and fail with it (as behind any failure): read, go on.
                async for _ in log.read_to_end(start=log.last_read_end):
                    pass
            assert (await log.append({"n": 9})).offset > 0  # type: ignore[arg-type]
        async with open_selector(cluster.bootstrap) as selector:
            reader = PartitionReader(selector, isolation="read_committed")
            values = [json.loads(r.value or b"") for r in await reader.read_all("log", 0)]
        assert values[0] == {"n": 1} and values[-1] == {"n": 9}
        assert "bad" not in values


async def test_a_foreign_write_is_reported_and_the_writer_must_reread() -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1, CAS)
        async with (
            open_conditional_writer(
                "log", 0, bootstrap=cluster.bootstrap, writer_ids=lambda: "mine"
            ) as log,
            open_producer(cluster.bootstrap, linger=0) as other,
        ):
            assert [r async for r in log.read_to_end()] == []
            await (await other.send("log", b"theirs", partition=0, expected_offset=0))
            with pytest.raises(ConcurrentWriteError) as info:
                await log.append(b"mine")
            assert info.value.offset == 0
            assert info.value.foreign_record.value == b"theirs"  # type: ignore[attr-defined]
            with pytest.raises(RuntimeError, match="read the partition"):
                await log.append(b"mine")
            seen = [r.value async for r in log.read_to_end()]
            assert seen == [b"theirs"]
            assert (await log.append(b"mine")).offset == 1


async def _race(log: ConditionalWriter, name: bytes, count: int, out: dict[str, list[int]]) -> None:
    async for _ in log.read_to_end():
        pass
    for index in range(count):
        value = b"%s-%d" % (name, index)
        try:
            ack = await log.append(value)
        except ConcurrentWriteError:
            out["rejected"].append(index)
            async for _ in log.read_to_end(start=log.last_read_end):
                pass
        else:
            out["acked"].append(index)
            out["offsets"].append(ack.offset)
        if index % 7 == 0:
            await anyio.sleep(0)


async def test_two_writers_race_for_a_thousand_appends_each() -> None:
    count = 1000
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1, CAS)
        results: dict[bytes, dict[str, list[int]]] = {}
        async with anyio.create_task_group() as nursery:
            for name in (b"A", b"B"):
                results[name] = {"acked": [], "rejected": [], "offsets": []}

                async def run(name: bytes = name) -> None:
                    async with open_conditional_writer(
                        "log", 0, bootstrap=cluster.bootstrap, writer_ids=name.decode
                    ) as log:
                        await _race(log, name, count, results[name])

                nursery.start_soon(run)
        log = log_of(cluster, "log")
        assert [offset for offset, _, _ in log] == list(range(len(log)))
        for name, result in results.items():
            mine = [(offset, value) for offset, value, (w, _) in log if w == name]
            # Every acknowledged append exactly once, at its reported offset, in order.
            assert [value for _, value in mine] == [b"%s-%d" % (name, i) for i in result["acked"]]
            assert [offset for offset, _ in mine] == result["offsets"]
            # Every append is accounted for: acknowledged or reported rejected.
            assert sorted(result["acked"] + result["rejected"]) == list(range(count))
        rejected = sum(len(r["rejected"]) for r in results.values())
        assert len(log) == 2 * count - rejected
        assert rejected > 0, "the writers never raced"
