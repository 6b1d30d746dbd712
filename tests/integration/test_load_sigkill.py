"""A transactional bulk load (a topic without CAS) killed with SIGKILL and run again ends
with exactly its input, as confluent-kafka's read_committed consumer sees it.

As tests/integration/test_cas_sigkill.py: the mock broker lives in this test's process,
`trio-kafka load` runs in a subprocess, killed when its progress lines pass a seeded
point, then run again to completion. Five points of a 500,000-row load (many
transactions, each 512 KiB of rows); the seed is printed. The killed run leaves a
transaction open (its rows are in the log, uncommitted):
the next run's InitProducerId fences it and the coordinator aborts it.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import trio

from tests.integration._helpers import consume_all
from tests.integration.test_cas_sigkill import _run_until, load_command, write_rows
from trio_kafka.broker import open_cluster

ROWS = 500_000
POINTS = 5
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
            kill_at = rng.randrange(ROWS // 20, ROWS * 4 // 5)
            command = load_command(data, topic, cluster.bootstrap)
            reported, _ = await _run_until(command, kill_at)
            print(f"point {point}: kill at {kill_at}, reported {reported}")
            assert reported < ROWS, "the loader finished before it could be killed"
            _, log = await _run_until(command, None)
            assert "guarantee transactional" in log
            skipped = int(log.split(" already there")[0].rsplit(", ", 1)[1].split()[0])
            # Every reported row had committed; rows of the killed open transaction had not.
            assert skipped >= reported > 0
            final = await trio.to_thread.run_sync(
                consume_all, cluster.bootstrap, topic, 1, "read_committed"
            )
            assert len(final) == ROWS
            assert final == expected, "the partition differs from the input"
