"""One Spark session for all the Spark tests (startup costs 10-20 s here), and helpers.

`local[2,4]`: two task slots, and a failed task is retried up to 4 times (plain
`local[2]` never retries). Python workers run this interpreter (`PYSPARK_PYTHON`), the UI
is off, shuffles use 4 partitions, logs are quiet.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from trio_kafka.broker import CAS_CONFIG, ThreadedCluster, run_in_thread
from trio_kafka.client._reader import PartitionReader
from trio_kafka.net import open_selector
from trio_kafka.records import Record


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # pyspark warns that pandas 3 is not fully supported yet (we only use Arrow).
    for item in items:
        if "tests/spark/" in str(item.fspath):
            item.add_marker(pytest.mark.filterwarnings("ignore:PySpark does not yet fully"))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from trio_kafka.spark import KafkaDataSource, spark_session

    session = spark_session(
        "local[2,4]",
        "trio-kafka tests",
        **{
            "spark.sql.shuffle.partitions": "4",
            "spark.default.parallelism": "4",
            "spark.driver.memory": "1g",
            "spark.python.worker.reuse": "true",
            "spark.sql.execution.pyspark.udf.faulthandler.enabled": "true",
        },
    )
    session.dataSource.register(KafkaDataSource)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def broker() -> Iterator[ThreadedCluster]:
    """A mock broker in a background thread, reached by the executors over TCP."""
    with run_in_thread(1) as cluster:
        yield cluster


def create_topic(cluster: ThreadedCluster, name: str, partitions: int, *, cas: bool) -> None:
    configs = {CAS_CONFIG: "true"} if cas else {}
    cluster.call(cluster.cluster.create_topic, name, partitions, configs)


def read_topic(
    bootstrap: str, topic: str, partitions: int, *, isolation: str = "read_uncommitted"
) -> dict[int, list[Record]]:
    async def read() -> dict[int, list[Record]]:
        async with open_selector(bootstrap) as selector:
            reader = PartitionReader(selector, isolation=isolation, max_wait=0.05)
            return {p: await reader.read_all(topic, p) for p in range(partitions)}

    return trio.run(read)
