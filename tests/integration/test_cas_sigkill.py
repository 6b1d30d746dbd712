"""A bulk load killed with SIGKILL and run again ends with exactly its input.

The mock broker runs in this test's process (it outlives the loader); the loader is
`trio-kafka load` in a subprocess, killed when its progress lines pass a seeded random
point, then run again to completion. Five points; the seed is printed.
"""

from __future__ import annotations

import os
import random
import signal
import sys
from pathlib import Path

import trio

from trio_kafka.broker import open_cluster
from trio_kafka.testing import log_values

ROWS = 200_000
POINTS = 5
SEED = int(os.environ.get("TRIO_KAFKA_SIGKILL_SEED", "20240611"))
LOAD = [sys.executable, "-c", "from trio_kafka.cli import main; main()", "load"]


def write_rows(tmp_path: Path, rows: int) -> tuple[Path, list[bytes]]:
    """A JSON-lines input of `rows` rows (of varying length); its path and its rows."""
    data = tmp_path / "rows.jsonl"
    expected = [b'{"row":%d,"pad":"%s"}' % (i, b"x" * (i % 40)) for i in range(rows)]
    data.write_bytes(b"\n".join(expected) + b"\n")
    return data, expected


def load_command(data: Path, topic: str, bootstrap: str) -> list[str]:
    """`trio-kafka load` of `data` into `topic`, 64 KiB batches (many progress lines)."""
    return [*LOAD, str(data), "--topic", topic, "--bootstrap", bootstrap, "--batch-bytes", "65536"]


async def _run_until(command: list[str], kill_at: int | None) -> tuple[int, str]:
    """Run `command`; with `kill_at`, SIGKILL it once it reports that many records
    loaded. Returns (records it last reported, its stderr)."""
    reported = 0
    output: list[str] = []
    async with trio.open_nursery() as nursery:
        process = await nursery.start(
            lambda task_status: trio.run_process(  # type: ignore[misc]
                command, stderr=__import__("subprocess").PIPE, check=False, task_status=task_status
            )
        )
        buffer = b""
        assert process.stderr is not None
        async for chunk in process.stderr:
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                text = line.decode()
                output.append(text)
                if text.startswith("progress: loaded "):
                    reported = int(text.split()[2])
                    if kill_at is not None and reported >= kill_at and process.returncode is None:
                        process.send_signal(signal.SIGKILL)
        await process.wait()
        if kill_at is None:
            assert process.returncode == 0, "\n".join(output)
    return reported, "\n".join(output)


async def test_a_load_killed_at_random_points_resumes_to_exactly_its_input(
    tmp_path: Path,
) -> None:
    print(f"SIGKILL test seed {SEED} (set TRIO_KAFKA_SIGKILL_SEED to replay)")
    rng = random.Random(SEED)
    data, expected = write_rows(tmp_path, ROWS)
    async with open_cluster() as cluster:
        for point in range(POINTS):
            topic = f"load-{point}"
            cluster.create_topic(topic, 1, {"expected.offset.check.enable": "true"})
            kill_at = rng.randrange(ROWS // 20, ROWS * 4 // 5)
            command = load_command(data, topic, cluster.bootstrap)
            reported, _ = await _run_until(command, kill_at)
            # The killed loader's last requests may still be unread in its sockets: the
            # broker serves them (they may append) before it sees the connections end.
            with trio.fail_after(30):
                while cluster.connection_count:
                    await trio.sleep(0.01)
            landed = len(log_values(cluster, topic, 0))
            print(f"point {point}: kill at {kill_at}, reported {reported}, in the log {landed}")
            assert reported < ROWS, "the loader finished before it could be killed"
            _, log = await _run_until(command, None)
            final = log_values(cluster, topic, 0)
            assert len(final) == ROWS
            assert final == expected, "the partition differs from the input"
            skipped = int(log.split(" already there")[0].rsplit(", ", 1)[1].split()[0])
            assert skipped == landed >= reported > 0
