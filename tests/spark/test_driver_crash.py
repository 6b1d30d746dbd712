"""Transactional loads: a driver killed between its EndTxns, then a rerun.

The driver writes the winning transactions to the manifest before the first EndTxn;
the rerun's `writer()` finds the load `committing`, commits the winners the dead
driver did not reach (and skips those it did), and read_committed readers (librdkafka
here) see every row exactly once.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.spark.conftest import create_topic, read_topic
from trio_kafka.broker import ThreadedCluster
from trio_kafka.net import open_selector
from trio_kafka.spark import LoadState, Manifest, read_manifest, write_dataframe

confluent_kafka = pytest.importorskip("confluent_kafka")

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 4
ROWS = 4000


def _manifest(bootstrap: str, load_id: str) -> Manifest:
    async def read() -> Manifest | None:
        async with open_selector(bootstrap) as selector:
            return await read_manifest(selector, load_id)

    found = trio.run(read)
    assert found is not None
    return found


def _read_committed_with_librdkafka(bootstrap: str, topic: str, expect: int) -> list[bytes]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "log_level": 0,
            "logger": lambda *a: None,
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    values: list[bytes] = []
    eof: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                if message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    eof.add(message.partition())
                    if len(eof) == PARTITIONS and len(values) >= expect:
                        break
                    continue
                raise AssertionError(message.error())
            values.append(message.value())
    finally:
        consumer.close()
    return values


def _frame(spark: Any) -> Any:
    return spark.range(ROWS).selectExpr("concat('k', id) AS key", "concat('v', id) AS value")


def test_driver_killed_between_end_txns_then_rerun_is_exact(
    spark: Any, broker: ThreadedCluster
) -> None:
    topic, load_id = "crash", "crash-1"
    create_topic(broker, topic, PARTITIONS, cas=False)
    command = ["tests.spark.crash_driver", broker.bootstrap, topic, load_id, str(ROWS), "2"]
    driver = subprocess.run(
        [sys.executable, "-m", *command],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        start_new_session=True,
        capture_output=True,
        timeout=600,
        check=False,
    )
    assert driver.returncode == -signal.SIGKILL, driver.stderr.decode()[-3000:]

    manifest = _manifest(broker.bootstrap, load_id)
    assert manifest.state is LoadState.COMMITTING
    assert [w.partition for w in manifest.winners] == list(range(PARTITIONS))
    committed = read_topic(broker.bootstrap, topic, PARTITIONS, isolation="read_committed")
    # The first two winners were committed, the other two are still open.
    assert [bool(committed[p]) for p in range(PARTITIONS)] == [True, True, False, False]

    write_dataframe(
        _frame(spark), topic=topic, key="key", load_id=load_id, bootstrap=broker.bootstrap
    )
    assert _manifest(broker.bootstrap, load_id).state is LoadState.COMPLETE
    values = collections.Counter(_read_committed_with_librdkafka(broker.bootstrap, topic, ROWS))
    assert set(values) == {f"v{i}".encode() for i in range(ROWS)}
    assert max(values.values()) == 1, "a row is visible twice"
    # Nothing was written again: the rerun only committed what the dead driver left.
    everything = read_topic(broker.bootstrap, topic, PARTITIONS)
    assert sum(1 for records in everything.values() for r in records if r.value) == ROWS
