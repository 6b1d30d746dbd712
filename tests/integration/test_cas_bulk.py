"""BulkLoader against the mock broker over TCP: exactly once, resumable, races."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

from tests.integration._backends import mock_cluster
from tests.integration._helpers import rows
from trio_kafka.broker import DROP, HookCall
from trio_kafka.client import BulkLoader, create_topic, open_bulk_loader, open_producer, row_of
from trio_kafka.errors import (
    CasNotSupportedError,
    ConcurrentWriteError,
    ConfigError,
    RecordTooLargeError,
)
from trio_kafka.net import open_selector
from trio_kafka.protocol.messages.produce import ProduceRequest
from trio_kafka.testing import log_values

#: Each test runs on trio, then on asyncio (issue 16; tests/conftest.py).
pytestmark = pytest.mark.anyio

CAS = {"expected.offset.check.enable": "true"}


async def test_a_load_writes_every_row_once_in_order() -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("t", 1, CAS)
        async with open_bulk_loader(
            "t", "L1", bootstrap=cluster.bootstrap, batch_bytes=4096
        ) as loader:
            result = await loader.run(rows(5000))
        assert (result.loaded, result.skipped, result.guarantee) == (5000, 0, "exactly_once_cas")
        assert log_values(cluster, "t", 0) == rows(5000)


async def test_rows_spread_over_partitions_by_row_or_key() -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("t", 3, CAS)
        data = [(b"k%d" % (i % 17), b"v%d" % i) for i in range(3000)]
        async with open_bulk_loader(
            "t", "L", bootstrap=cluster.bootstrap, batch_bytes=2048
        ) as loader:
            result = await loader.run(data)
        assert result.loaded == 3000
        from trio_kafka.core._partitioner import partition_for_key

        for p in range(3):
            expected = [v for k, v in data if partition_for_key(k, 3) == p]
            assert log_values(cluster, "t", p) == expected


async def test_running_the_same_load_again_skips_everything() -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("t", 2, CAS)
        async with open_selector(cluster.bootstrap) as selector:
            first = await BulkLoader(selector, "t", "L", batch_bytes=1024).run(rows(2000))
            again = await BulkLoader(selector, "t", "L", batch_bytes=1024).run(rows(2000))
        assert (first.loaded, again.loaded, again.skipped) == (2000, 0, 2000)
        assert (
            log_values(cluster, "t", 0) + log_values(cluster, "t", 1)
            == rows(2000)[0::2] + rows(2000)[1::2]
        )


async def test_a_partial_load_resumes_after_its_last_batch() -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("t", 1, CAS)
        async with open_selector(cluster.bootstrap) as selector:
            await BulkLoader(selector, "t", "L", batch_bytes=1024).run(rows(700))
            result = await BulkLoader(selector, "t", "L", batch_bytes=1024).run(rows(2000))
        assert (result.loaded, result.skipped) == (1300, 700)
        assert result.partitions[0].resumed_after_row == 699
        assert log_values(cluster, "t", 0) == rows(2000)


async def test_lost_answers_are_resent_and_deduplicated() -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("t", 1, CAS)
        seen = [0]

        def drop_some(call: HookCall) -> object:
            seen[0] += 1
            return DROP if seen[0] in (3, 9, 10) else None

        cluster.add_hook(ProduceRequest, drop_some, after=True)
        async with open_bulk_loader(
            "t", "L", bootstrap=cluster.bootstrap, batch_bytes=1024
        ) as loader:
            result = await loader.run(rows(3000))
        assert result.loaded == 3000
        assert log_values(cluster, "t", 0) == rows(3000)


async def test_two_loaders_racing_one_fails_cleanly_never_interleaved() -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("t", 1, CAS)
        outcomes: dict[str, object] = {}
        a = [b"A-%05d" % i for i in range(20000)]
        b = [b"B-%05d" % i for i in range(20000)]
        async with open_selector(cluster.bootstrap) as s1, open_selector(cluster.bootstrap) as s2:

            async def run(name: str, selector: object, data: list[bytes]) -> None:
                loader = BulkLoader(selector, "t", name, batch_bytes=2048)  # type: ignore[arg-type]
                try:
                    outcomes[name] = await loader.run(data)
                except ConcurrentWriteError as exc:
                    outcomes[name] = exc

            async with anyio.create_task_group() as nursery:
                nursery.start_soon(run, "A", s1, a)
                nursery.start_soon(run, "B", s2, b)
        failed = [n for n, o in outcomes.items() if isinstance(o, ConcurrentWriteError)]
        assert len(failed) >= 1
        log = log_values(cluster, "t", 0)
        # The log is a prefix of one load followed by (a prefix of) the other, never mixed.
        first = log[0][:1] if log else b""
        switch = next((i for i, v in enumerate(log) if not v.startswith(first)), len(log))
        assert all(not v.startswith(first) for v in log[switch:])
        head = list(log[:switch])
        tail = list(log[switch:])
        source = {b"A": a, b"B": b}
        assert head == source[first][: len(head)]
        if tail:
            other = tail[0][:1]
            # The later one resumed at the log end: its own rows from the start.
            assert tail == source[other][: len(tail)]


@pytest.mark.parametrize("guarantee", ["exactly_once_cas", "transactional"])
async def test_a_load_failing_as_its_caller_is_cancelled_raises_the_error_not_a_group(
    guarantee: str,
) -> None:
    # An enclosing scope cancelled (a deadline, a crash) at the moment the load fails:
    # its other tasks end Cancelled beside the error, and run() used to raise the lot as
    # a group (the chaos suite's Tansu bulk runs 102 and 109: a fenced partition). Here
    # the failure is the resume's: another writer appended after the load's last row.
    async with mock_cluster() as cluster:
        cluster.create_topic("t", 2, CAS)
        async with open_selector(cluster.bootstrap) as selector:
            loader = BulkLoader(selector, "t", "L", guarantee=guarantee, batch_bytes=1024)
            await loader.run(rows(10))
            async with open_producer(selector=selector) as producer:
                await producer.send_and_wait("t", b"foreign", partition=0)

            def more(scope: anyio.CancelScope) -> Iterator[bytes]:
                yield from rows(10)
                scope.cancel()  # the rows after this one fail the load: no checkpoint between
                yield from rows(20)[10:]

            with anyio.CancelScope() as scope:
                with pytest.raises(ConcurrentWriteError, match="other writers"):
                    again = BulkLoader(selector, "t", "L", guarantee=guarantee, batch_bytes=1024)
                    await again.run(more(scope))
        assert log_values(cluster, "t", 0)[-1] == b"foreign"  # nothing appended after it


async def test_a_topic_without_the_check_is_refused_when_cas_is_forced() -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("plain", 1)
        async with open_bulk_loader(
            "plain", "L", bootstrap=cluster.bootstrap, guarantee="exactly_once_cas"
        ) as loader:
            with pytest.raises(CasNotSupportedError, match=r"expected\.offset\.check\.enable=true"):
                await loader.run(rows(10))
        assert log_values(cluster, "plain", 0) == []


def test_row_of_reads_the_manifest_headers() -> None:
    from trio_kafka.records import Record

    record = Record(5, 0, None, b"v", (("tk.load", b"L"), ("tk.row", b"42")))
    assert row_of(record, b"L") == 42
    assert row_of(record, b"other") is None


@pytest.mark.parametrize("rows_given", [b"row", "row", 5])
async def test_rows_that_are_not_an_iterable_of_rows_are_refused_naming_the_type(
    rows_given: object,
) -> None:
    # bytes were taken as rows of ints ("the value of row 0 is a int"), an int gave
    # "'int' object is not iterable".
    async with mock_cluster() as cluster:
        cluster.create_topic("t", 1, CAS)
        async with open_bulk_loader("t", "L", bootstrap=cluster.bootstrap) as loader:
            with pytest.raises(TypeError, match=f"not a {type(rows_given).__name__}: for one"):
                await loader.run(rows_given)  # type: ignore[arg-type]
        assert log_values(cluster, "t", 0) == []


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("batch_bytes", "1", "batch_bytes='1' is not allowed: it must be an int, not str"),
        ("retry_timeout", "60", "retry_timeout='60' is not allowed: it must be a number of"),
    ],
)
async def test_a_loader_option_of_the_wrong_type_is_refused_naming_it(
    option: str, value: object, message: str
) -> None:
    # A str reached a comparison: "'<' not supported between instances of 'str' and 'int'".
    async with mock_cluster() as cluster:
        with pytest.raises(ConfigError, match=message):
            async with open_bulk_loader("t", "L", bootstrap=cluster.bootstrap, **{option: value}):
                pass


@pytest.mark.parametrize(
    ("partitions", "kind", "message"),
    [
        ("2", TypeError, r"partitions must be an int, not str \('2'\)"),
        (0, ValueError, "at least 1"),
    ],
)
async def test_create_topic_refuses_partitions_that_are_not_a_count_before_any_request(
    partitions: object, kind: type[Exception], message: str
) -> None:
    # A str failed in the encoder ("required argument is not an integer").
    async with mock_cluster() as cluster, open_selector(cluster.bootstrap) as selector:
        with pytest.raises(kind, match=message):
            await create_topic(selector, "t", partitions)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("batch_bytes", "named"),
    [
        (8192, r"lower batch_bytes \(now 8192\) below the topic's max.message.bytes"),
        (1, r"row 20, about \d+ bytes.*that row alone is larger"),
    ],
)
async def test_a_batch_the_broker_finds_too_large_names_its_rows_and_the_rows_before_stay(
    batch_bytes: int, named: str
) -> None:
    # A CAS load never splits a batch: MESSAGE_TOO_LARGE stops it with a
    # RecordTooLargeError naming the rows and what to change, and what came before is
    # loaded (a rerun resumes after it).
    async with mock_cluster() as cluster:
        cluster.create_topic("t", 1, {**CAS, "max.message.bytes": "2000"})
        data = [b"v%d" % i for i in range(20)] + [b"x" * 3000] + [b"w"] * 10
        async with open_bulk_loader(
            "t", "L", bootstrap=cluster.bootstrap, batch_bytes=batch_bytes
        ) as loader:
            with pytest.raises(RecordTooLargeError, match=r"t-0: the batch of .*" + named):
                await loader.run(data)
        loaded = log_values(cluster, "t", 0)
        assert loaded == data[: len(loaded)]
        if batch_bytes == 1:
            assert loaded == data[:20]
