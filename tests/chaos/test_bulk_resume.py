"""The bulk-load chaos workload's finding on Tansu, scripted: the transactional bulk load
resumed from a checkpoint of an aborted chunk and never loaded that chunk's rows. Fixed:
the loader now judges a checkpoint by the transaction markers in the log
(`BulkLoader._committed_checkpoint`), not by the broker's read_committed answer.

The transactional backend (client/_bulk.py) commits each chunk of rows with its
checkpoint (the chunk's last row carries `tk.load` and `tk.row` headers) and, on a
rerun, resumes after the last checkpoint a read_committed read of the partition shows.
A crashed run leaves its chunk in an open transaction, which the next run's
InitProducerId aborts. Kafka (and our mock broker) hide the aborted chunk from
read_committed readers, so the rerun resumes after the last committed chunk. Tansu shows
aborted records to read_committed readers (its Fetch has no aborted-transactions list,
docs/compatibility.md): the rerun takes the aborted chunk's checkpoint for its own and
skips those rows. The chaos suite met it at random (tests/chaos/test_chaos.py, bulk on
Tansu); here it is every time (it failed every time on Tansu before the fix):

1. a load of rows 0-39 commits (its last checkpoint: row 39);
2. a "crashed run" writes rows 40-59 in a transaction of the load's own transactional
   id, the last with the checkpoint of row 59, and aborts it (as the rerun's
   InitProducerId would);
3. the load of rows 0-99 runs again and must resume after row 39.

The rows are then read with confluent-kafka (read_committed), the records of aborted
transactions (by the raw log's markers) left out: rows 0-99 exactly once, in order.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest
import trio

from tests.chaos._bulk import aborted_offsets, confluent_read_committed
from tests.chaos._harness import fetch_snapshot
from trio_kafka.broker import open_cluster
from trio_kafka.client import create_topic, open_bulk_loader, open_producer
from trio_kafka.client._bulk import transactional_id_for
from trio_kafka.core._load import checkpoint_headers
from trio_kafka.net import open_selector
from trio_kafka.sim.checker import snapshot_cluster
from trio_kafka.testing import free_port, tansu_broker

TOPIC = "resume"
LOAD_ID = "resume-load"
ROWS = [b"row-%04d" % i for i in range(100)]
COMMITTED, ABORTED = 40, 60


@contextlib.asynccontextmanager
async def _broker(name: str) -> AsyncIterator[tuple[str, object]]:
    """(bootstrap, the mock cluster or None) of a broker with topic TOPIC (1 partition,
    no CAS: the load runs in transactions)."""
    if name == "mock":
        async with open_cluster(1) as cluster:
            cluster.create_topic(TOPIC, 1)
            yield cluster.bootstrap, cluster
        return
    port = free_port()
    with tansu_broker(port=port) as tansu:
        async with open_selector(tansu.bootstrap) as selector:
            await create_topic(selector, TOPIC, 1, cas=False)
        yield tansu.bootstrap, None


async def _crashed_chunk(bootstrap: str) -> None:
    """Rows COMMITTED..ABORTED-1 in a transaction of the load's transactional id, the
    last with its checkpoint, aborted."""
    async with open_producer(
        bootstrap, transactional_id=transactional_id_for(LOAD_ID, TOPIC, 0), linger=0.0
    ) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        for row in range(COMMITTED, ABORTED):
            headers = checkpoint_headers(LOAD_ID.encode(), row) if row == ABORTED - 1 else ()
            await producer.send(TOPIC, ROWS[row], partition=0, headers=list(headers))
        await producer.flush()
        await producer.abort_transaction()


async def _scenario(name: str) -> tuple[list[bytes], int]:
    """The rows read_committed shows (aborted records left out), and how many aborted
    records it showed."""
    async with _broker(name) as (bootstrap, cluster):
        async with open_bulk_loader(
            TOPIC, LOAD_ID, bootstrap=bootstrap, guarantee="transactional"
        ) as loader:
            await loader.run(ROWS[:COMMITTED])
        await _crashed_chunk(bootstrap)
        async with open_bulk_loader(
            TOPIC, LOAD_ID, bootstrap=bootstrap, guarantee="transactional"
        ) as loader:
            await loader.run(ROWS)
        if cluster is not None:
            logs = snapshot_cluster(cluster, topics=[TOPIC])  # type: ignore[arg-type]
        else:
            logs = await fetch_snapshot(bootstrap, {TOPIC: 1})
        read = await trio.to_thread.run_sync(confluent_read_committed, bootstrap, TOPIC, 1)
    dead = aborted_offsets(logs).get(0, set())
    rows = [v for o, v in read[0] if o not in dead]
    return rows, len(read[0]) - len(rows)


def test_resume_after_an_aborted_chunk_on_the_mock_broker() -> None:
    rows, aborted_shown = trio.run(_scenario, "mock")
    assert aborted_shown == 0
    assert rows == ROWS


@pytest.mark.tansu
def test_resume_after_an_aborted_chunk_on_tansu() -> None:
    # Tansu still shows the aborted chunk to read_committed readers; the loader no
    # longer takes its checkpoint (it reads the markers itself).
    rows, aborted_shown = trio.run(_scenario, "tansu")
    assert aborted_shown == ABORTED - COMMITTED
    assert rows == ROWS
