"""Load speed: `BulkLoader` with the CAS backend and with the transactional backend, in
one run, against the same mock broker (its own subprocess, `trio-kafka broker`).

Each measurement loads ROWS rows of SIZE bytes into a fresh topic of PARTITIONS
partitions: CAS on (`guarantee` picks exactly_once_cas) or off (transactional), and
counts until `run()` returns, every row acknowledged (CAS) or committed (transactions).
Rows are unkeyed (round robin over the partitions), or with `--keyed` (key, value)
pairs over KEYS distinct keys (partitioned by the key's murmur2).

The two backends run in A B B A order, ROUNDS pairs of rounds (`--rounds 2`: A B B A,
A B B A), so a busy spell on a shared machine weighs on both alike; the table shows each
run, the mean time and rate of each backend (and the loader process's CPU seconds), and
the ratio transactional / CAS of the mean rates (goal: >= 0.7).

The Spark rows of the issue's table (`write_dataframe` on local[2]) are not measured
here: the Spark writers do not drive the load pipeline yet (docs/spark.md).

    .venv/bin/python benchmarks/load.py [--rows N] [--size BYTES] [--partitions P]
        [--rounds R] [--keyed] [--keys K]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bulk_load import broker

from trio_kafka.client import BulkLoader, create_topic
from trio_kafka.client._bulk import Row
from trio_kafka.net import open_selector

BACKENDS = (("exactly_once_cas", True), ("transactional", False))


async def load(
    bootstrap: str, topic: str, cas: bool, rows: list[Row], partitions: int
) -> tuple[float, float, str]:
    async with open_selector(bootstrap) as selector:
        await create_topic(selector, topic, partitions, cas=cas)
        loader = BulkLoader(selector, topic, "bench")
        started, cpu = time.perf_counter(), time.process_time()
        result = await loader.run(rows)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert result.loaded == len(rows), result
    return elapsed, cpu, result.guarantee


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument(
        "--rounds", type=int, default=1, help="pairs of rounds, each A B B A (default 1)"
    )
    parser.add_argument("--keyed", action="store_true", help="(key, value) rows")
    parser.add_argument("--keys", type=int, default=10_000, help="distinct keys (--keyed)")
    args = parser.parse_args()
    if args.rounds < 1 or args.rows < 1 or args.keys < 1:
        parser.error("--rounds, --rows and --keys must be at least 1")
    values = [b"%0*d" % (args.size, i) for i in range(args.rows)]
    rows: list[Row]
    if args.keyed:
        keys = [b"key-%d" % k for k in range(args.keys)]
        rows = [(keys[i % args.keys], value) for i, value in enumerate(values)]
    else:
        rows = list(values)
    shape = (
        f"{args.rows:,} rows of {args.size} B{' keyed' if args.keyed else ''}, "
        f"{args.partitions} partitions"
    )
    order = [BACKENDS[0], BACKENDS[1], BACKENDS[1], BACKENDS[0]] * args.rounds
    times: dict[str, list[float]] = {name: [] for name, _ in BACKENDS}
    # CPU seconds of the loader's process (the broker runs in its own).
    cpus: dict[str, list[float]] = {name: [] for name, _ in BACKENDS}
    with broker() as bootstrap:
        for run, (name, cas) in enumerate(order):
            elapsed, cpu, guarantee = trio.run(
                load, bootstrap, f"load-{name}-{run}", cas, rows, args.partitions
            )
            assert guarantee == name, (guarantee, name)
            times[name].append(elapsed)
            cpus[name].append(cpu)
            print(
                f"run {run + 1}: BulkLoader {name:17} {shape}: {elapsed:6.2f} s, "
                f"{args.rows / elapsed:10,.0f} rows/s, loader CPU {cpu:5.2f} s",
                flush=True,
            )
    print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"| backend ({shape}) | mean s | rows/s (of the mean) | runs (s) | loader CPU s |")
    print("| --- | --- | --- | --- | --- |")
    means = {name: statistics.fmean(runs) for name, runs in times.items()}
    for name, runs in times.items():
        print(
            f"| {name} | {means[name]:.2f} | {args.rows / means[name]:,.0f} | "
            f"{', '.join(f'{t:.2f}' for t in runs)} | {statistics.fmean(cpus[name]):.2f} |"
        )
    ratio = means["exactly_once_cas"] / means["transactional"]
    print(f"\ntransactional / CAS (rows/s of the mean times): {ratio:.2f}x (goal >= 0.7)")


if __name__ == "__main__":
    main()
