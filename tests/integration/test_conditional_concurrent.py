"""Concurrent appends on one ConditionalWriter (issue 35): pipelined on CAS, committed
in groups on transactions; each append keeps its own guarantee (mock broker)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import anyio
import pytest

from tests.integration._backends import mock_cluster
from trio_kafka.broker import DROP, Cluster, HookCall
from trio_kafka.client import (
    ConditionalWriter,
    open_conditional_writer,
    open_producer,
    writer_of,
)
from trio_kafka.core import Acknowledged
from trio_kafka.errors import ConcurrentWriteError, KafkaError, WriterFencedError
from trio_kafka.protocol.messages.end_txn import EndTxnRequest
from trio_kafka.protocol.messages.fetch import FetchRequest
from trio_kafka.protocol.messages.produce import ProduceRequest
from trio_kafka.records import Record

#: Each test runs on trio, then on asyncio (issue 16; tests/conftest.py).
pytestmark = pytest.mark.anyio

CAS = {"expected.offset.check.enable": "true"}
APPENDERS = 16


def committed(cluster: Cluster) -> list[Record]:
    """The log's records whose transaction committed (all of them on a CAS topic)."""
    records: list[Record] = []
    open_txn: dict[int, list[Record]] = {}
    for batch in cluster.decoded("log", 0):
        if batch.is_control:
            held = open_txn.pop(batch.producer_id, [])
            if batch.records and batch.records[0].key == b"\x00\x00\x00\x01":  # COMMIT
                records.extend(held)
        elif batch.is_transactional:
            open_txn.setdefault(batch.producer_id, []).extend(batch.records)
        else:
            records.extend(batch.records)
    return sorted(records, key=lambda r: r.offset)


class _Hold:
    """Holds the `nth` request of `kind` at the broker, before it is applied, until
    `go` is set (`reached` once it is held); `count` counts every request of `kind`."""

    def __init__(self, cluster: Cluster, kind: type, nth: int) -> None:
        self.reached, self.go = anyio.Event(), anyio.Event()
        self.nth, self.count = nth, 0
        cluster.add_hook(kind, self._hook)

    async def _hook(self, call: HookCall) -> None:
        self.count += 1
        if self.count == self.nth:
            self.reached.set()
            await self.go.wait()


@contextlib.asynccontextmanager
async def _read_writer(cluster: Cluster, **options: object) -> AsyncIterator[ConditionalWriter]:
    """A writer of "log"-0 on `cluster`, read to its end (ready to append)."""
    async with open_conditional_writer(
        "log",
        0,
        bootstrap=cluster.bootstrap,
        **options,  # type: ignore[arg-type]
    ) as log:
        async for _ in log.read_to_end():
            pass
        yield log


async def _appends_at_once(log: object, count: int) -> dict[int, int]:
    """`count` tasks append b"<n>" at once, task n calling append n-th; n -> offset."""
    acks: dict[int, int] = {}

    async def append(n: int) -> None:
        acks[n] = (await log.append(b"%d" % n)).offset  # type: ignore[attr-defined]

    async with anyio.create_task_group() as tasks:
        for n in range(count):
            tasks.start_soon(append, n)
            await anyio.sleep(0) if n == 0 else None  # the first one leads (transactions)
    return acks


async def _offsets_in_call_order(log: object, count: int) -> list[int]:
    """`count` tasks append b"<n>" at once; the offsets in the order the calls were made
    (each task records its call before any checkpoint)."""
    called: list[int] = []
    acks: dict[int, int] = {}

    async def append(n: int) -> None:
        called.append(n)  # no checkpoint before the call: its order
        acks[n] = (await log.append(b"%d" % n)).offset  # type: ignore[attr-defined]

    async with anyio.create_task_group() as tasks:
        for n in range(count):
            tasks.start_soon(append, n)
    return [acks[n] for n in called]


@pytest.mark.parametrize("cas", [True, False], ids=["cas", "transactional"])
async def test_concurrent_appends_are_each_acknowledged_once_at_their_own_offset(
    cas: bool,
) -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1, CAS if cas else None)
        async with open_conditional_writer(
            "log", 0, bootstrap=cluster.bootstrap, guarantee="auto", writer_ids=lambda: "A"
        ) as log:
            assert log.guarantee == ("exactly_once_cas" if cas else "transactional")
            async for _ in log.read_to_end():
                pass
            acks = await _appends_at_once(log, APPENDERS)
            assert log.last_read_end == log.next_offset == max(acks.values()) + 1
        records = committed(cluster)
    assert {r.offset: int(r.value or b"") for r in records} == {o: n for n, o in acks.items()}
    assert len(records) == APPENDERS


async def test_concurrent_cas_appends_share_produce_round_trips() -> None:
    """Pipelined: 16 appends need fewer Produce requests than appends (one at a time
    took 16), and land in the order they were called."""
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1, CAS)
        produces = _Hold(cluster, ProduceRequest, 0)
        async with _read_writer(cluster) as log:
            offsets = await _offsets_in_call_order(log, APPENDERS)
            # A long-lived writer keeps nothing per acknowledged append (97abd6d kept
            # every one until the next read).
            assert not log._chain.links
    assert offsets == list(range(APPENDERS))
    assert produces.count < APPENDERS


async def test_cas_appends_made_at_once_ride_one_produce_request() -> None:
    """16 appends called in one go enter the producer back to back (no checkpoint
    between them) and go out as one batch, expecting the first one's offset."""
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1, CAS)
        async with _read_writer(cluster) as log:
            await log.append(b"first")  # the producer id and connection, before counting
            produces = _Hold(cluster, ProduceRequest, 0)
            offsets = await _offsets_in_call_order(log, APPENDERS)
        batches = [len(batch.records) for batch in cluster.decoded("log", 0)]
    assert produces.count == 1, batches
    assert offsets == list(range(1, APPENDERS + 1))


@pytest.mark.parametrize("anyio_backend", ["trio"])  # the hook waits on the test's event
async def test_cas_appends_made_while_a_request_is_out_ride_the_next_one_together() -> None:
    """One append is held at the broker; the 15 made meanwhile wait in one batch and go
    out together when it is answered, each at its own offset in call order."""
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1, CAS)
        async with _read_writer(cluster) as log:
            await log.append(b"first")
            held = _Hold(cluster, ProduceRequest, 1)
            called: list[int] = []
            acks: dict[int, int] = {}

            async def append(n: int) -> None:
                called.append(n)
                acks[n] = (await log.append(b"%d" % n)).offset

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(append, 0)
                await held.reached.wait()
                for n in range(1, APPENDERS):
                    tasks.start_soon(append, n)
                await anyio.sleep(0.05)
                held.go.set()
        records = committed(cluster)
        batches = [len(batch.records) for batch in cluster.decoded("log", 0)]
    assert held.count == 2, batches
    assert batches == [1, 1, APPENDERS - 1]
    assert [acks[n] for n in called] == list(range(1, APPENDERS + 1))
    assert [r.value for r in records[1:]] == [b"%d" % n for n in called]


async def test_concurrent_transactional_appends_are_committed_in_groups() -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1)
        commits = _Hold(cluster, EndTxnRequest, 0)
        async with open_conditional_writer(
            "log", 0, bootstrap=cluster.bootstrap, guarantee="transactional"
        ) as log:
            async for _ in log.read_to_end():
                pass
            acks = await _appends_at_once(log, APPENDERS)
    assert sorted(acks.values()) == sorted(set(acks.values()))
    assert commits.count <= 2  # all in one, or the first alone and the others behind it


async def test_appenders_that_append_again_at_once_join_one_group() -> None:
    """16 tasks append 4 times each, the next as soon as the last returned: each
    group's appenders, woken together, are committed together in the next one (4
    commits), not the first of them alone and the rest behind it (groups of 1 and 15)."""
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1)
        commits = _Hold(cluster, EndTxnRequest, 0)
        async with open_conditional_writer(
            "log", 0, bootstrap=cluster.bootstrap, guarantee="transactional"
        ) as log:
            async for _ in log.read_to_end():
                pass

            async def appender(n: int) -> None:
                for i in range(4):
                    await log.append(b"%d-%d" % (n, i))

            async with anyio.create_task_group() as tasks:
                for n in range(APPENDERS):
                    tasks.start_soon(appender, n)
        assert len(committed(cluster)) == 4 * APPENDERS
    assert commits.count == 4


async def test_a_group_is_bounded_by_max_group() -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1)
        commits = _Hold(cluster, EndTxnRequest, 0)
        async with open_conditional_writer(
            "log", 0, bootstrap=cluster.bootstrap, guarantee="transactional", max_group=4
        ) as log:
            async for _ in log.read_to_end():
                pass
            await _appends_at_once(log, APPENDERS)
    assert commits.count >= APPENDERS // 4


async def test_a_group_whose_commit_answer_was_lost_is_settled_by_reading_back() -> None:
    """The second group's EndTxn answer is lost: each of its appends is acknowledged at
    its offset once, from the log, none retried into a second copy."""
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1)
        calls = [0]

        def lose_second(call: HookCall) -> object:
            calls[0] += 1
            return DROP if calls[0] == 2 else None

        cluster.add_hook(EndTxnRequest, lose_second, after=True)
        async with open_conditional_writer(
            "log", 0, bootstrap=cluster.bootstrap, guarantee="transactional", request_timeout=1
        ) as log:
            async for _ in log.read_to_end():
                pass
            first = await log.append(b"-1")  # the first group, alone
            acks = await _appends_at_once(log, 8)
            assert log.ambiguous >= 1
        records = committed(cluster)
    acks[-1] = first.offset
    assert {r.offset: int(r.value or b"") for r in records} == {o: n for n, o in acks.items()}


async def test_a_fence_mid_group_fails_every_append_of_the_group() -> None:
    """A newer writer takes the log while a group of 4 is committing: all 4 raise
    WriterFencedError and none of them is in the committed log."""
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1)
        held = _Hold(cluster, EndTxnRequest, 2)
        outcomes: dict[int, object] = {}
        async with open_conditional_writer(
            "log", 0, bootstrap=cluster.bootstrap, guarantee="transactional"
        ) as log:
            async for _ in log.read_to_end():
                pass

            async def append(n: int) -> None:
                try:
                    outcomes[n] = (await log.append(b"%d" % n)).offset
                except WriterFencedError as exc:
                    outcomes[n] = exc

            await append(0)  # the first group, alone
            async with anyio.create_task_group() as tasks:
                for n in range(1, 5):
                    tasks.start_soon(append, n)
                await held.reached.wait()  # the group of 1-4 is at its EndTxn
                async with open_conditional_writer(
                    "log", 0, bootstrap=cluster.bootstrap, guarantee="transactional"
                ):
                    held.go.set()
        records = committed(cluster)
    assert outcomes[0] == 0
    assert all(isinstance(outcomes[n], WriterFencedError) for n in range(1, 5))
    assert [r.value for r in records] == [b"0"]


async def test_a_waiting_append_cancelled_before_its_group_is_never_written() -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1)
        held = _Hold(cluster, EndTxnRequest, 1)
        acks: dict[int, int] = {}
        async with open_conditional_writer(
            "log", 0, bootstrap=cluster.bootstrap, guarantee="transactional"
        ) as log:
            async for _ in log.read_to_end():
                pass

            async def append(n: int, scope: anyio.CancelScope | None = None) -> None:
                with scope or anyio.CancelScope():
                    acks[n] = (await log.append(b"%d" % n)).offset

            cancelled = anyio.CancelScope()
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(append, 0)
                await held.reached.wait()  # 0 is committing; 1-3 queue behind it
                tasks.start_soon(append, 1)
                tasks.start_soon(append, 2, cancelled)
                tasks.start_soon(append, 3)
                await anyio.sleep(0.05)
                cancelled.cancel()
                await anyio.sleep(0.05)
                held.go.set()
        records = committed(cluster)
    assert sorted(acks) == [0, 1, 3]
    assert sorted(r.value for r in records) == [b"0", b"1", b"3"]


async def test_a_foreign_write_fails_the_cas_appends_queued_behind_it() -> None:
    """Another writer took the offset the first of 8 concurrent appends expected: all 8
    raise ConcurrentWriteError and none of them is written."""
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1, CAS)
        async with (
            open_conditional_writer("log", 0, bootstrap=cluster.bootstrap) as log,
            open_producer(cluster.bootstrap, linger=0) as other,
        ):
            async for _ in log.read_to_end():
                pass
            await (await other.send("log", b"theirs", partition=0, expected_offset=0))
            failed: list[int] = []

            async def append(n: int) -> None:
                try:
                    await log.append(b"%d" % n)
                except ConcurrentWriteError:
                    failed.append(n)

            async with anyio.create_task_group() as tasks:
                for n in range(8):
                    tasks.start_soon(append, n)
            assert log.next_offset is None  # stale: read again before appending
        records = committed(cluster)
    assert sorted(failed) == list(range(8))
    assert [r.value for r in records] == [b"theirs"]
    assert all(writer_of(r)[0] is None for r in records)


# trio only: the hook holds the request on an event of the test's (under asyncio the
# broker runs in a thread of its own); the rule it checks is in the sans-IO core.
@pytest.mark.parametrize("anyio_backend", ["trio"])
@pytest.mark.parametrize("idempotent", [True, False], ids=["own-producer", "not-idempotent"])
async def test_cas_appends_behind_a_failed_one_never_land_when_another_writer_filled_its_batch(
    idempotent: bool,
) -> None:
    """A's first append (expecting offset 0) is held at the broker while B appends one
    record at offset 0, exactly as many as A's held batch: the log end is then where
    A's next appends (1-3, expecting offsets 1-3) expect it. They must fail with the
    held one, never land after a record A never read: on A's own (idempotent) producer
    the batch behind the failed one is never resent; on a shared producer without
    idempotence (5 requests in flight) they are not sent before the held one's answer."""
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1, CAS)
        held = _Hold(cluster, ProduceRequest, 1)
        outcomes: dict[int, object] = {}
        async with contextlib.AsyncExitStack() as stack:
            options: dict[str, object] = {"bootstrap": cluster.bootstrap}
            if not idempotent:
                options = {
                    "producer": await stack.enter_async_context(
                        open_producer(
                            cluster.bootstrap, linger=0, enable_idempotence=False, max_in_flight=5
                        )
                    )
                }
            a = await stack.enter_async_context(
                open_conditional_writer("log", 0, writer_ids=lambda: "A", **options)  # type: ignore[arg-type]
            )
            b = await stack.enter_async_context(
                open_conditional_writer(
                    "log", 0, bootstrap=cluster.bootstrap, writer_ids=lambda: "B"
                )
            )
            for log in (a, b):
                async for _ in log.read_to_end():
                    pass

            async def append(n: int) -> None:
                try:
                    outcomes[n] = (await a.append(b"a%d" % n)).offset
                except ConcurrentWriteError as exc:
                    outcomes[n] = exc

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(append, 0)
                await held.reached.wait()  # A's append 0 is at the broker, not appended yet
                for n in range(1, 4):
                    tasks.start_soon(append, n)
                assert (await b.append(b"theirs")).offset == 0
                held.go.set()
            assert a.next_offset is None  # stale: read again before appending
        records = committed(cluster)
    assert [r.value for r in records] == [b"theirs"]
    assert all(isinstance(outcomes[n], ConcurrentWriteError) for n in range(4)), outcomes


@pytest.mark.parametrize("anyio_backend", ["trio"])  # the hook waits on the test's event
async def test_a_cas_append_made_while_one_before_it_is_read_back_is_never_sent() -> None:
    """Another writer took offset 0: A's append 0 meets a mismatch and reads offset 0
    back to learn whose record is there. A's append 1, made during that read, expects
    offset 1, where the log end is: sent, it would land after a record A never read.
    It fails unsent with append 0."""
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1, CAS)
        outcomes: dict[int, object] = {}
        async with (
            open_conditional_writer("log", 0, bootstrap=cluster.bootstrap) as log,
            open_producer(cluster.bootstrap, linger=0) as other,
        ):
            async for _ in log.read_to_end():
                pass
            await (await other.send("log", b"theirs", partition=0, expected_offset=0))
            held = _Hold(cluster, FetchRequest, 1)  # the read of offset 0

            async def append(n: int) -> None:
                try:
                    outcomes[n] = (await log.append(b"%d" % n)).offset
                except ConcurrentWriteError as exc:
                    outcomes[n] = exc

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(append, 0)
                await held.reached.wait()
                tasks.start_soon(append, 1)
                await anyio.sleep(0.05)
                held.go.set()
        records = committed(cluster)
    assert [r.value for r in records] == [b"theirs"]
    assert all(isinstance(outcomes[n], ConcurrentWriteError) for n in range(2)), outcomes


@pytest.mark.parametrize("anyio_backend", ["trio"])  # the hook waits on the test's event
async def test_a_cas_append_cancelled_while_queued_is_never_sent_nor_those_behind_it() -> None:
    """Append 0 is held at the broker and fills the producer's buffer, so append 1's
    hand-over waits for room and appends 2 and 3 queue behind it. 2 is cancelled while
    it waits: it is never sent, 3 (which expected the offset after 2's) fails unsent
    with ConcurrentWriteError, and 0 and 1 land."""
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1, CAS)
        outcomes: dict[int, object] = {}
        async with _read_writer(cluster, buffer_memory=300) as log:
            held = _Hold(cluster, ProduceRequest, 1)
            scopes = {n: anyio.CancelScope() for n in range(4)}

            async def append(n: int) -> None:
                with scopes[n]:
                    try:
                        outcomes[n] = (await log.append(b"%d" % n * 200)).offset
                    except ConcurrentWriteError as exc:
                        outcomes[n] = exc
                    return
                outcomes[n] = "cancelled"

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(append, 0)
                await held.reached.wait()
                for n in (1, 2, 3):
                    tasks.start_soon(append, n)
                    await anyio.sleep(0.01)
                assert len(log._outbox) == 2  # 1 waits for room; 2 and 3 are queued
                scopes[2].cancel()
                await anyio.sleep(0.01)
                held.go.set()
        records = committed(cluster)
    assert outcomes[0] == 0 and outcomes[1] == 1 and outcomes[2] == "cancelled"
    assert isinstance(outcomes[3], ConcurrentWriteError), outcomes
    assert [r.value for r in records] == [b"0" * 200, b"1" * 200]


@pytest.mark.parametrize("anyio_backend", ["trio"])  # the hook waits on the test's event
async def test_a_queued_cas_append_cancelled_while_its_answer_is_out_fails_the_next_append() -> (
    None
):
    """Append 0 is held at the broker and fills the producer's buffer, so append 1's
    hand-over waits for room and append 2 queues behind it; both are handed over once
    room is free, in one request, which is held in turn. 2 is cancelled meanwhile: its
    task no longer learns the answer, so whether it landed is unknown to the writer, and
    the next append (expecting the offset after 2's) fails unsent with
    ConcurrentWriteError. The writer is stale until it reads the log again, where 2 is."""
    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1, CAS)
        outcomes: dict[int, object] = {}
        async with _read_writer(cluster, buffer_memory=300) as log:
            first = _Hold(cluster, ProduceRequest, 1)
            second = _Hold(cluster, ProduceRequest, 2)  # appends 1 and 2
            scopes = {n: anyio.CancelScope() for n in range(3)}

            async def append(n: int, size: int) -> None:
                with scopes[n]:
                    outcomes[n] = (await log.append(b"%d" % n * size)).offset
                    return
                outcomes[n] = "cancelled"

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(append, 0, 200)
                await first.reached.wait()
                for n in (1, 2):
                    tasks.start_soon(append, n, 10)
                    await anyio.sleep(0.01)
                assert len(log._outbox) == 1  # 1 waits for room; 2 is queued
                first.go.set()
                await second.reached.wait()
                scopes[2].cancel()
                await anyio.sleep(0.01)
                second.go.set()
            with pytest.raises(ConcurrentWriteError):
                await log.append(b"3")
            assert log.next_offset is None  # stale: read again before appending
            values = [record.value async for record in log.read_to_end()]
            assert (await log.append(b"3")).offset == 3
        records = committed(cluster)
    assert outcomes == {0: 0, 1: 1, 2: "cancelled"}
    assert values == [b"0" * 200, b"1" * 10, b"2" * 10]
    assert [r.value for r in records] == [*values, b"3"]


async def test_an_append_the_broker_refuses_fails_alone_and_names_why() -> None:
    # Concurrent appends share a CAS batch; the broker refuses the batch for the keyless
    # append of a compacted log. Before, the append ahead of it failed with the broker's
    # "One or more records have been rejected", and the keyless one was told that "the
    # append before it ended without an answer".
    outcomes: dict[str, object] = {}

    async def append(writer: ConditionalWriter, name: str, key: bytes | None) -> None:
        try:
            outcomes[name] = await writer.append(name.encode(), key=key)
        except KafkaError as exc:
            outcomes[name] = exc

    async with mock_cluster() as cluster:
        cluster.create_topic("log", 1, {**CAS, "cleanup.policy": "compact"})
        async with open_conditional_writer("log", 0, bootstrap=cluster.bootstrap) as writer:
            for round_ in range(5):
                async for _ in writer.read_to_end():
                    pass
                async with anyio.create_task_group() as group:
                    for name, key in (("ahead", b"a"), ("keyless", None), ("behind", b"b")):
                        group.start_soon(append, writer, f"{name}-{round_}", key)
        log = {r.offset: r.value for r in committed(cluster)}
    acked: dict[int, bytes] = {}
    for name, outcome in outcomes.items():
        if name.startswith("keyless"):
            assert "Compacted topic cannot accept message without key" in str(outcome)
        elif isinstance(outcome, Acknowledged):
            acked[outcome.offset] = name.encode()
        else:  # behind the refused append: told so, never given its refusal
            assert isinstance(outcome, ConcurrentWriteError), (name, outcome)
            assert "the broker refused the append before it" in str(outcome)
    assert acked  # (a round whose keyless append came first acknowledges none)
    assert log == acked
