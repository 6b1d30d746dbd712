"""BulkLoader on a topic without CAS: the transactional backend (mock broker, and
confluent-kafka as the read_committed reader)."""

from __future__ import annotations

import anyio
import pytest

from tests.integration._backends import mock_cluster
from tests.integration._helpers import consume_all, rows
from trio_kafka.broker import DROP, HookCall
from trio_kafka.client import BulkLoader, open_bulk_loader
from trio_kafka.errors import ConfigError
from trio_kafka.net import open_selector
from trio_kafka.producer import partition_for_key
from trio_kafka.producer._rows import RECORD_OVERHEAD
from trio_kafka.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from trio_kafka.protocol.messages.end_txn import EndTxnRequest
from trio_kafka.protocol.messages.produce import ProduceRequest
from trio_kafka.testing import log_values

#: Each test runs on trio, then on asyncio (issue 16; tests/conftest.py).
pytestmark = pytest.mark.anyio


async def test_auto_loads_a_topic_without_cas_in_transactions() -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("plain", 3)
        data = [(b"k%d" % (i % 13) if i % 2 else None, b"v%05d" % i) for i in range(6000)]
        async with open_bulk_loader(
            "plain", "L", bootstrap=cluster.bootstrap, batch_bytes=2048
        ) as loader:
            result = await loader.run(data)
        assert (result.guarantee, result.loaded, result.skipped) == ("transactional", 6000, 0)
        seen = await anyio.to_thread.run_sync(
            consume_all, cluster.bootstrap, "plain", 3, "read_committed"
        )
        assert sorted(seen) == sorted(v for _, v in data)
        for p in range(3):
            expected = [
                v
                for i, (k, v) in enumerate(data)
                if (partition_for_key(k, 3) if k is not None else i % 3) == p
            ]
            # Nothing was aborted: the log is each partition's rows in row order.
            assert log_values(cluster, "plain", p) == expected


async def test_a_transactional_load_run_again_skips_what_committed() -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("plain", 2)
        async with open_selector(cluster.bootstrap) as selector:
            first = await BulkLoader(selector, "plain", "L", batch_bytes=512).run(rows(700))
            second = await BulkLoader(selector, "plain", "L", batch_bytes=512).run(rows(2000))
        assert (first.loaded, second.loaded, second.skipped) == (700, 1300, 700)
        assert [p.resumed_after_row for p in second.partitions] == [698, 699]
        seen = await anyio.to_thread.run_sync(
            consume_all, cluster.bootstrap, "plain", 2, "read_committed"
        )
        assert sorted(seen) == rows(2000)


async def test_a_transaction_whose_commit_answer_is_lost_is_not_loaded_twice() -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("plain", 1)
        calls = [0]

        def drop_second_commit(call: HookCall) -> object:
            calls[0] += 1
            return DROP if calls[0] == 2 else None

        cluster.add_hook(EndTxnRequest, drop_second_commit, after=True)
        async with open_selector(cluster.bootstrap) as selector:
            loader = BulkLoader(
                selector,
                "plain",
                "L",
                guarantee="transactional",
                batch_bytes=256,
                request_timeout=2,
            )
            result = await loader.run(rows(300))  # settled by reading the checkpoint back
            again = await BulkLoader(selector, "plain", "L", batch_bytes=256).run(rows(300))
        assert calls[0] > 2, "the commit answer was never lost"
        assert (result.loaded, again.loaded, again.skipped) == (300, 0, 300)
        seen = await anyio.to_thread.run_sync(
            consume_all, cluster.bootstrap, "plain", 1, "read_committed"
        )
        assert seen == rows(300)


async def test_the_transactional_guarantee_is_used_even_where_cas_is_possible() -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("t", 1, {"expected.offset.check.enable": "true"})
        async with open_bulk_loader(
            "t", "L", bootstrap=cluster.bootstrap, guarantee="transactional"
        ) as loader:
            result = await loader.run(rows(100))
        assert result.guarantee == "transactional"


async def test_an_unknown_guarantee_is_refused_by_name() -> None:
    async with mock_cluster() as cluster, open_selector(cluster.bootstrap) as selector:
        with pytest.raises(ConfigError, match="guarantee='exactly_once'"):
            BulkLoader(selector, "t", "L", guarantee="exactly_once")


async def test_a_transaction_writes_its_chunk_in_full_batches() -> None:
    # Per transaction: one AddPartitionsToTxn, the chunk in batches filled to the
    # producer's batch_size (not many half-filled ones), one EndTxn.
    batch_bytes = 64 * 1024
    async with mock_cluster() as cluster:
        cluster.create_topic("plain", 2)
        requests: dict[str, list[str]] = {}
        produced: list[int] = []

        def trace(call: HookCall) -> None:
            request = call.request
            if isinstance(request, ProduceRequest):
                if request.transactional_id is None:
                    return
                name = "produce"
                (topic,) = request.topic_data
                produced.extend(len(p.records or b"") for p in topic.partition_data)
                transactional_id = request.transactional_id
            elif isinstance(request, AddPartitionsToTxnRequest):
                name, transactional_id = "add", request.v3_and_below_transactional_id
            else:
                name, transactional_id = "end", request.transactional_id
            requests.setdefault(transactional_id, []).append(name)

        for api in (ProduceRequest, AddPartitionsToTxnRequest, EndTxnRequest):
            cluster.add_hook(api, trace)
        async with open_selector(cluster.bootstrap) as selector:
            loader = BulkLoader(selector, "plain", "L", batch_bytes=batch_bytes)
            result = await loader.run([b"%0100d" % i for i in range(40_000)])
        assert result.loaded == 40_000
        per_transaction = 8 * batch_bytes // (100 + RECORD_OVERHEAD)
        for names in requests.values():
            transactions = " ".join(names).split("end")[:-1]
            assert len(transactions) == -(-20_000 // per_transaction)
            for transaction in transactions:
                shape = transaction.split()
                assert shape[0] == "add" and shape.count("add") == 1, names
                assert shape.count("produce") <= 9, names  # 8 full batches, or 9 cut
        full = [size for size in produced if size > batch_bytes * 3 // 4]
        assert len(full) >= len(produced) * 3 // 4, produced


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("text", "the value of row 3 is a str: a row is bytes, None, or a (key, value) pair"),
        ((b"k", b"v", b"x"), "row 3 is a tuple of 3 items: a keyed row is a (key, value) pair"),
        ((7, b"v"), "the key of row 3 is a int"),
    ],
)
async def test_a_row_that_is_not_bytes_or_a_pair_is_refused_by_its_number(
    bad: object, message: str
) -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("plain", 2)
        async with open_bulk_loader("plain", "L", bootstrap=cluster.bootstrap) as loader:
            with pytest.raises(TypeError, match=message.replace("(", r"\(").replace(")", r"\)")):
                await loader.run([b"a", b"b", (b"k", b"c"), bad, b"e"])


async def test_bytes_like_rows_are_loaded_as_bytes() -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("plain", 2)
        rows = [bytearray(b"a"), (memoryview(b"k"), b"b"), b"c", (None, bytearray(b"d"))]
        async with open_bulk_loader("plain", "L", bootstrap=cluster.bootstrap) as loader:
            result = await loader.run(rows)  # type: ignore[arg-type]
        assert result.loaded == 4
        assert sorted(log_values(cluster, "plain", 0) + log_values(cluster, "plain", 1)) == [
            b"a",
            b"b",
            b"c",
            b"d",
        ]
