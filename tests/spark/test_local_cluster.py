"""A load on Spark's `local-cluster` master: the executors are JVM processes of their
own, which start their own Python workers, as on a real cluster (nothing is shared with
the driver's process but the options and the manifest on the control topic).

The driver runs as a process of its own (`cluster_driver.py`: one SparkContext a
process, and the other tests' session is `local[2,4]`); the mock broker runs in this
process, reached by the executors over TCP.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark.conftest import create_topic, read_topic
from trio_kafka.broker import ThreadedCluster
from trio_kafka.core._load import ROW_HEADER, header_of, partition_of

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 4
ROWS = 4000


@pytest.mark.timeout(1900)  # the driver's own timeout (1800 s), then the checks
def test_a_keyed_load_on_local_cluster_lands_every_row_once_in_its_partition(
    broker: ThreadedCluster,
) -> None:
    topic = "local-cluster"
    create_topic(broker, topic, PARTITIONS, cas=True)
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    command = ["tests.spark.cluster_driver", broker.bootstrap, topic, "lc-1", str(ROWS)]
    driver = subprocess.run(
        [sys.executable, "-m", *command],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        timeout=1800,  # a shared machine: ~11 minutes seen at load average 30
        check=False,
    )
    assert driver.returncode == 0, driver.stderr.decode()[-3000:]
    result = json.loads(driver.stdout.decode().strip().splitlines()[-1])
    assert result == {
        "executors": 2,
        "guarantee": "exactly_once_cas",
        "loaded": ROWS,
        "skipped": 0,
    }
    records = read_topic(broker.bootstrap, topic, PARTITIONS)
    seen = []
    for partition, found in records.items():
        rows = [int(r.value[1:]) for r in found]  # value "v<row>"
        assert rows == sorted(rows), f"partition {partition} out of row order"
        for row, record in zip(rows, found, strict=True):
            assert record.key == b"k%d" % (row % 997)
            assert partition_of(row, record.key, PARTITIONS) == partition
        assert header_of(found[-1], ROW_HEADER) == b"%d" % rows[-1]  # the checkpoint
        seen += rows
    assert sorted(seen) == list(range(ROWS))
