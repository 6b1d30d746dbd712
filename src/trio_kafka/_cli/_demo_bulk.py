"""Demo step 2: a bulk load killed with SIGKILL, resumed, and read back exactly.

The loader is a child process (`_demo_load`), so killing it is a real crash: whatever
it had in flight is cut off mid-request. The broker (in the demo's process, or the one
at `--bootstrap`) keeps what landed. The second run finds in the partitions' own data
(the BulkLoader's manifest headers) where the first stopped, skips those rows, and loads
the rest. Reading every partition back then proves the result is the input exactly:
row i is in partition i % 6, each partition holds its rows in input order, once each,
with the right bytes.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys

import anyio
import attrs
from rich.console import Console

from trio_kafka._cli._demo_load import row_number, row_value
from trio_kafka._cli._demo_ui import Bar, Check

PARTITIONS = 6
_CHILD = [sys.executable, "-m", "trio_kafka._cli._demo_load"]


@attrs.define
class _Run:
    """What one loader run reported on its stdout."""

    acknowledged: int = 0  # records, from the progress lines
    nbytes: int = 0
    loaded: int = -1  # from the result line (-1: it never got there)
    skipped: int = -1
    killed: bool = False
    returncode: int | None = None
    stderr: str = ""


async def _run_child(command: list[str], bar: Bar, kill_at: int | None, offset: int = 0) -> _Run:
    """Run the loader; with `kill_at`, SIGKILL it once it has reported that many records
    acknowledged. `offset` is where the bar starts (records already there)."""
    run = _Run()
    process = await anyio.open_process(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    async with process, anyio.create_task_group() as nursery:
        errors: list[bytes] = []

        async def drain_stderr() -> None:
            assert process.stderr is not None
            async for chunk in process.stderr:
                errors.append(chunk)

        nursery.start_soon(drain_stderr)
        buffer = b""
        assert process.stdout is not None
        async for chunk in process.stdout:
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                match line.split():
                    case [b"progress", records, size]:
                        run.acknowledged += int(records)
                        run.nbytes += int(size)
                        bar.set(offset + run.acknowledged, run.nbytes)
                        if kill_at is not None and run.acknowledged >= kill_at and not run.killed:
                            process.send_signal(signal.SIGKILL)
                            run.killed = True
                    case [b"result", loaded, skipped]:
                        run.loaded, run.skipped = int(loaded), int(skipped)
                    case _:
                        pass
        await process.wait()
    run.returncode = process.returncode
    run.stderr = b"".join(errors).decode(errors="replace")
    return run


@attrs.define
class ReadBack:
    records: int = 0
    nbytes: int = 0
    duplicates: int = 0
    missing: int = 0
    out_of_order: int = 0
    wrong_partition: int = 0
    wrong_bytes: int = 0
    foreign: int = 0

    @property
    def exact(self) -> bool:
        return not (
            self.duplicates
            or self.missing
            or self.out_of_order
            or self.wrong_partition
            or self.wrong_bytes
            or self.foreign
        )


async def read_back(bootstrap: str, topic: str, count: int, bar: Bar) -> ReadBack:
    """Read every partition with `PartitionReader` and compare with the input."""
    from trio_kafka.client import IsolationLevel, PartitionReader
    from trio_kafka.net import open_selector

    result = ReadBack()
    seen = bytearray(count)
    async with open_selector(bootstrap) as selector:
        # Committed records only: on a broker without CAS the load runs in transactions,
        # and the killed run's open one is aborted by the rerun.
        reader = PartitionReader(
            selector, max_bytes=4 * 1024 * 1024, isolation=IsolationLevel.READ_COMMITTED
        )
        for partition in range(PARTITIONS):
            expected_row = partition
            batch_records = 0
            batch_bytes = 0
            async for record in reader.read(topic, partition, start=0):
                value = record.value
                row = row_number(value)
                batch_records += 1
                batch_bytes += len(value) if value else 0
                if not 0 <= row < count:
                    result.foreign += 1
                    continue
                if seen[row]:
                    result.duplicates += 1
                seen[row] = 1
                if row % PARTITIONS != partition:
                    result.wrong_partition += 1
                if row != expected_row:
                    result.out_of_order += 1
                expected_row = row + PARTITIONS
                if value != row_value(row):
                    result.wrong_bytes += 1
                if batch_records >= 4096:
                    result.records += batch_records
                    result.nbytes += batch_bytes
                    batch_records = batch_bytes = 0
                    bar.set(result.records, result.nbytes)
            result.records += batch_records
            result.nbytes += batch_bytes
            bar.set(result.records, result.nbytes)
    result.missing = count - sum(seen)
    return result


async def bulk_load_step(
    console: Console, bootstrap: str, count: int, seed: int, suffix: str
) -> list[Check]:
    from trio_kafka.client import create_topic
    from trio_kafka.net import open_selector

    topic = f"demo-load-{suffix}"
    load_id = f"demo-{suffix}"
    async with open_selector(bootstrap) as selector:
        # CAS where the broker has it; elsewhere (Apache Kafka) the loader's "auto"
        # guarantee loads in transactions.
        cas = (await selector.negotiated_versions()).supports_cas
        await create_topic(selector, topic, PARTITIONS, cas=cas)
    batch_bytes = 256 * 1024 if count >= 200_000 else 32 * 1024
    kill_at = random.Random(seed).randrange(count // 10, count * 7 // 10)
    how = "expected.offset.check.enable=true" if cas else "no CAS here: loaded in transactions"
    console.print(
        f"topic {topic}: {PARTITIONS} partitions, {how}; "
        f"{count:,} rows of ~100 bytes; the loader is killed with SIGKILL once it has "
        f"{kill_at:,} rows acknowledged (seed {seed}: `--seed {seed}` replays it)",
        highlight=False,
    )
    command = [*_CHILD, bootstrap, topic, load_id, str(count), str(batch_bytes)]
    with Bar(console, "load, run 1", count) as bar:
        first = await _run_child(command, bar, kill_at)
    how_first = (
        f"killed (SIGKILL) with {first.acknowledged:,} rows acknowledged"
        if first.killed
        else f"finished before the kill point (exit {first.returncode})"
    )
    console.print(f"run 1: {how_first}", highlight=False)
    with Bar(console, "load, run 2", count) as bar:
        bar.set(first.acknowledged)  # its MB/s counts this run's bytes only
        second = await _run_child(command, bar, None, offset=first.acknowledged)
    if second.returncode != 0:
        console.print(f"[red]run 2 failed (exit {second.returncode})[/]\n{second.stderr}")
    else:
        console.print(
            f"run 2: found {second.skipped:,} rows already in the partitions (skipped), "
            f"loaded {second.loaded:,}",
            highlight=False,
        )
    with Bar(console, "read back", count) as bar:
        back = await read_back(bootstrap, topic, count, bar)
    console.print(
        f"read back {back.records:,} records ({back.nbytes / 1e6:.1f} MB) at "
        f"{back.records / bar.elapsed:,.0f} records/s: {back.duplicates} duplicates, "
        f"{back.missing} missing, {back.out_of_order} out of order, "
        f"{back.wrong_bytes} with wrong bytes",
        highlight=False,
    )
    resumed_ok = (
        second.returncode == 0
        and second.loaded + second.skipped == count
        and second.skipped >= first.acknowledged
    )
    exact = back.exact and back.records == count
    return [
        Check(
            "bulk load survives a crash",
            f"BulkLoader child killed with SIGKILL at a seeded point (seed {seed}), run again",
            f"run 1: {first.acknowledged:,} acked then "
            f"{'killed' if first.killed else 'not killed'}; run 2: skipped "
            f"{second.skipped:,}, loaded {second.loaded:,}",
            resumed_ok and first.killed,
        ),
        Check(
            "exactly once: nothing lost, nothing twice",
            f"PartitionReader reads all {PARTITIONS} partitions back; every row checked",
            f"{back.records:,}/{count:,} records, {back.duplicates} duplicates, "
            f"{back.missing} missing, {back.wrong_bytes} corrupt",
            exact,
        ),
        Check(
            "order kept per partition",
            "row i must be in partition i % 6, rows in input order",
            f"{back.out_of_order} out of order, {back.wrong_partition} misplaced",
            exact,
        ),
    ]


__all__ = ["PARTITIONS", "ReadBack", "bulk_load_step", "read_back"]
