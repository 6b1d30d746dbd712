"""A transactional bulk load (a topic without CAS) killed with SIGKILL and run again ends
with exactly its input, as confluent-kafka's read_committed consumer sees it.

As tests/integration/test_cas_sigkill.py: the mock broker lives in this test's process,
`trio-kafka load` runs in a subprocess, killed when its progress lines pass a seeded
point, then run again to completion. Five points of a 500,000-row load (many
transactions, each 512 KiB of rows); the seed is printed. The killed run leaves a
transaction open (its rows are in the log, uncommitted):
the next run's InitProducerId fences it and the coordinator aborts it.

The same on Apache Kafka 4.4 (the module's `kafka` node): two points of a 200,000-row
load, for time.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import trio

from tests.integration._helpers import consume_all, create_topic
from tests.integration.test_cas_sigkill import _run_until, load_command, write_rows
from trio_kafka.broker import open_cluster
from trio_kafka.testing import KafkaNode

ROWS = 500_000
POINTS = 5
KAFKA_ROWS = 200_000
KAFKA_POINTS = 2
SEED = int(os.environ.get("TRIO_KAFKA_SIGKILL_SEED", "20261124"))


async def test_a_transactional_load_killed_at_random_points_resumes_exactly(
    tmp_path: Path,
) -> None:
    print(f"SIGKILL test seed {SEED} (set TRIO_KAFKA_SIGKILL_SEED to replay)")
    rng = random.Random(SEED)
    data, expected = write_rows(tmp_path, ROWS)
    async with open_cluster() as cluster:
        for point in range(POINTS):
            topic = f"load-{point}"
            cluster.create_topic(topic, 1)  # no CAS: the transactional backend
            await kill_and_resume(rng, data, expected, topic, cluster.bootstrap, point)


@pytest.mark.kafka
async def test_a_transactional_load_on_kafka_killed_at_random_points_resumes_exactly(
    tmp_path: Path, kafka: KafkaNode
) -> None:
    print(f"SIGKILL test seed {SEED} (set TRIO_KAFKA_SIGKILL_SEED to replay)")
    rng = random.Random(SEED)
    data, expected = write_rows(tmp_path, KAFKA_ROWS)
    for point in range(KAFKA_POINTS):
        topic = f"load-kafka-{point}"
        await create_topic(kafka.bootstrap, topic, 1)
        await kill_and_resume(rng, data, expected, topic, kafka.bootstrap, point)


async def kill_and_resume(
    rng: random.Random, data: Path, expected: list[bytes], topic: str, bootstrap: str, point: int
) -> None:
    """Kill the load at a seeded row, run it again to the end, check the partition."""
    rows = len(expected)
    kill_at = rng.randrange(rows // 20, rows * 4 // 5)
    command = load_command(data, topic, bootstrap)
    reported, _ = await _run_until(command, kill_at)
    print(f"point {point}: kill at {kill_at}, reported {reported}")
    assert reported < rows, "the loader finished before it could be killed"
    _, log = await _run_until(command, None)
    assert "guarantee transactional" in log
    skipped = int(log.split(" already there")[0].rsplit(", ", 1)[1].split()[0])
    # Every reported row had committed; rows of the killed open transaction had not.
    assert skipped >= reported > 0
    final = await trio.to_thread.run_sync(consume_all, bootstrap, topic, 1, "read_committed")
    assert len(final) == rows
    assert final == expected, "the partition differs from the input"
