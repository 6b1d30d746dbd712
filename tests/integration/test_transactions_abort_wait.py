"""`transaction()` after an abort that outlived `abort_timeout`: it waits for that abort
to end, then begins (it raised IllegalTransactionStateError, "cannot begin a transaction
in state ABORTING", when two ConditionalWriters raced on Apache Kafka 4.4)."""

from __future__ import annotations

import pytest

from tests.integration._backends import mock_cluster
from trio_kafka.broker import Delay, HookCall
from trio_kafka.client import open_producer
from trio_kafka.protocol.messages.end_txn import EndTxnRequest
from trio_kafka.testing import log_values

#: Each test runs on trio, then on asyncio (issue 16; tests/conftest.py).
pytestmark = pytest.mark.anyio


def _slow_abort(call: HookCall) -> object:
    return None if call.request.committed else Delay(1.5)


async def test_a_transaction_after_an_abort_cut_short_waits_for_it_and_commits() -> None:
    async with mock_cluster(topics={"t": 1}) as cluster:
        cluster.add_hook(EndTxnRequest, _slow_abort)
        async with open_producer(
            cluster.bootstrap, transactional_id="abort-wait", request_timeout=0.5, linger=0
        ) as producer:
            await producer.init_transactions()
            with pytest.raises(RuntimeError, match="abort it"):
                async with producer.transaction():
                    await producer.send_and_wait("t", b"aborted", partition=0)
                    raise RuntimeError("abort it")  # the abort outlives 0.5 s
            async with producer.transaction():
                await producer.send("t", b"committed", partition=0)
        assert log_values(cluster, "t", 0) == [b"aborted", b"committed"]
