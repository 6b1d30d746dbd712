"""Load speed: `BulkLoader` with the CAS backend and with the transactional backend, in
one run, against the same mock broker (its own subprocess, `trio-kafka broker`).

Each measurement loads ROWS rows of SIZE bytes (unkeyed: round robin over the
partitions) into a fresh topic of PARTITIONS partitions: CAS on (`guarantee` picks
exactly_once_cas) or off (transactional), and counts until `run()` returns, every row
acknowledged (CAS) or committed (transactions). Prints rows/s for each and the ratio
transactional / CAS (goal: >= 0.7).

The Spark rows of the issue's table (`write_dataframe` on local[2]) are not measured
here: the Spark writers do not drive the load pipeline yet (docs/spark.md).

    .venv/bin/python benchmarks/load.py [--rows N] [--size BYTES] [--partitions P]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bulk_load import broker

from trio_kafka.client import BulkLoader, create_topic
from trio_kafka.net import open_selector


async def load(
    bootstrap: str, topic: str, cas: bool, rows: list[bytes], partitions: int
) -> tuple[float, str]:
    async with open_selector(bootstrap) as selector:
        await create_topic(selector, topic, partitions, cas=cas)
        loader = BulkLoader(selector, topic, "bench")
        started = time.perf_counter()
        result = await loader.run(rows)
        elapsed = time.perf_counter() - started
    assert result.loaded == len(rows), result
    return elapsed, result.guarantee


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=6)
    args = parser.parse_args()
    rows = [b"%0*d" % (args.size, i) for i in range(args.rows)]
    results: dict[str, float] = {}
    with broker() as bootstrap:
        for name, cas in (("cas", True), ("transactional", False)):
            elapsed, guarantee = trio.run(
                load, bootstrap, f"load-{name}", cas, rows, args.partitions
            )
            rate = args.rows / elapsed
            results[guarantee] = rate
            print(
                f"BulkLoader {guarantee:17} {args.rows:,} rows of {args.size} B, "
                f"{args.partitions} partitions: {elapsed:6.2f} s, {rate:10,.0f} rows/s",
                flush=True,
            )
    ratio = results["transactional"] / results["exactly_once_cas"]
    print(f"transactional / CAS: {ratio:.2f}x (goal >= 0.7)")


if __name__ == "__main__":
    main()
