"""BulkLoader on a topic without CAS: the transactional backend (mock broker, and
confluent-kafka as the read_committed reader)."""

from __future__ import annotations

import anyio
import pytest

from tests.integration._backends import mock_cluster
from tests.integration._helpers import consume_all, rows
from tests.integration.test_producer_faults import answer_with
from trio_kafka.broker import DROP, HookCall
from trio_kafka.client import BulkLoader, open_bulk_loader
from trio_kafka.client._bulk import TxnPartition
from trio_kafka.core import partition_for_key
from trio_kafka.core._load import RECORD_OVERHEAD, Backend
from trio_kafka.errors import ConfigError, ErrorCode, KafkaError
from trio_kafka.net import open_selector
from trio_kafka.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from trio_kafka.protocol.messages.end_txn import EndTxnRequest
from trio_kafka.protocol.messages.produce import (
    ProduceRequest,
)
from trio_kafka.testing import log_values

#: A Produce hook answering TRANSACTION_ABORTABLE for every partition (not applied).
abortable = answer_with(ErrorCode.TRANSACTION_ABORTABLE)

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


async def test_rows_the_broker_refuses_stop_the_load_at_once_saying_why() -> None:
    # It retried the aborted chunk until retry_timeout, then said "run the load again to
    # resume", which would meet the same rows (a compacted topic takes no keyless row).
    async with mock_cluster() as cluster:
        cluster.create_topic("compacted", 1, {"cleanup.policy": "compact"})
        with anyio.fail_after(20):
            async with open_bulk_loader(
                "compacted", "L", bootstrap=cluster.bootstrap, batch_bytes=2048
            ) as loader:
                with pytest.raises(KafkaError) as refused:
                    await loader.run([b"v%05d" % i for i in range(500)])
        message = str(refused.value)
        assert "compacted-0: the broker refuses rows of the chunk from row 0" in message
        assert "Compacted topic cannot accept message without key" in message
        assert log_values(cluster, "compacted", 0) == []


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


async def test_a_chunk_aborted_mid_stream_is_written_again_whole() -> None:
    # The third transactional Produce of partition 0 fails (TRANSACTION_ABORTABLE):
    # its transaction aborts with the chunk half streamed, and the chunk goes again
    # from its first row in a new one; read_committed sees every row once, in order.
    async with mock_cluster() as cluster:
        cluster.create_topic("plain", 2)
        produced = [0]
        ends: list[bool] = []

        def fail_third(call: HookCall) -> object:
            request: ProduceRequest = call.request
            (topic,) = request.topic_data
            if request.transactional_id is None or topic.partition_data[0].index != 0:
                return None
            produced[0] += 1
            return abortable(call) if produced[0] == 3 else None

        def end(call: HookCall) -> None:
            ends.append(call.request.committed)

        cluster.add_hook(ProduceRequest, fail_third)
        cluster.add_hook(EndTxnRequest, end)
        async with open_selector(cluster.bootstrap) as selector:
            loader = BulkLoader(selector, "plain", "L", batch_bytes=4096)
            result = await loader.run(rows(3000))
        assert result.loaded == 3000
        assert ends.count(False) == 1, ends  # the one aborted transaction
        seen = await anyio.to_thread.run_sync(
            consume_all, cluster.bootstrap, "plain", 2, "read_committed"
        )
        assert seen == [r for i, r in enumerate(rows(3000)) if i % 2 == 0] + [
            r for i, r in enumerate(rows(3000)) if i % 2 == 1
        ]


async def test_a_chunk_whose_rows_come_slowly_is_committed_with_the_rows_it_has() -> None:
    # Rows of an unsealed chunk stream into its open transaction; when no more come for
    # a quarter of the transaction timeout, the chunk is sealed at its last row and
    # committed, before the coordinator would abort it for its age.
    async with mock_cluster() as cluster:
        cluster.create_topic("plain", 1)
        async with open_selector(cluster.bootstrap) as selector:
            loader = BulkLoader(
                selector, "plain", "L", transaction_timeout=0.4, chunk_bytes=1 << 20
            )
            async with loader.transactional_producer("tk-load-L-plain-0") as producer:
                await producer.init_transactions()
                pipe = loader._pipeline(Backend.TRANSACTIONS, 0, (0, -1, False))
                part = TxnPartition(loader, pipe, producer)
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(part.run)
                    values = rows(10)
                    pipe.add_run(range(5), None, values[:5], 0)
                    await part.fed(0)
                    with anyio.fail_after(20):
                        while pipe.checkpoint < 4:
                            await anyio.sleep(0.05)
                    assert pipe.loaded == 5  # committed without more rows
                    pipe.add_run(range(5, 10), None, values[5:], 0)
                    await part.fed(1 if pipe.finish(0) else 0)
                    await part.close_input()
        assert log_values(cluster, "plain", 0) == values
