"""Record batch v2 encoding and decoding speed, per codec.

Encodes batches of 1,000 records with 100-byte values (no key, no headers, one timestamp
per batch as a producer under load sees), one `append` at a time and in bulk
(`append_values`, the producer's path), `build()`s them, then decodes them back; reports
records per second for each, on one core. Values are partly repetitive so that codecs have
something to do (a monotonically numbered prefix plus fixed text). Run by hand:

    .venv/bin/python benchmarks/encode.py [--batches N] [--codecs none,zstd,...] [--plain]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from trio_kafka.records import BatchBuilder, Compression, decode_batches

RECORDS_PER_BATCH = 1_000
VALUE_SIZE = 100


def _values() -> list[bytes]:
    return [
        (b"%08d " % i + b"trio-kafka benchmark payload " * 4)[:VALUE_SIZE]
        for i in range(RECORDS_PER_BATCH)
    ]


def _best_of(repeats: int, run: Callable[[], None]) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def measure(codec: Compression, batches: int, repeats: int) -> dict[str, float]:
    values = _values()
    built: list[bytes] = []

    def encode() -> None:
        built.clear()
        for _ in range(batches):
            builder = BatchBuilder(codec)
            append = builder.append
            for value in values:
                append(1_700_000_000_000, None, value)
            built.append(builder.build(producer_id=1, producer_epoch=0, base_sequence=0))

    def append_only() -> None:
        for _ in range(batches):
            append = BatchBuilder(codec).append
            for value in values:
                append(1_700_000_000_000, None, value)

    timestamps = [1_700_000_000_000] * RECORDS_PER_BATCH

    def append_values() -> None:  # the producer's bulk path (no keys, no headers)
        for _ in range(batches):
            BatchBuilder(codec).append_values(timestamps, values)

    def decode() -> None:
        for data in built:
            for _batch in decode_batches(data):
                pass

    records = batches * RECORDS_PER_BATCH
    encode_s = _best_of(repeats, encode)
    append_s = _best_of(repeats, append_only)
    bulk_s = _best_of(repeats, append_values)
    decode_s = _best_of(repeats, decode)
    return {
        "append": records / append_s,
        "bulk": records / bulk_s,
        "encode": records / encode_s,
        "decode": records / decode_s,
        "bytes": sum(len(b) for b in built) / len(built),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--codecs", default="none,gzip,snappy,lz4,zstd")
    parser.add_argument("--plain", action="store_true", help="plain text, no rich table")
    args = parser.parse_args()
    rows = []
    for name in args.codecs.split(","):
        codec = Compression[name.strip().upper()]
        result = measure(codec, args.batches, args.repeats)
        rows.append((
            codec.name.lower(),
            f"{result['append']:,.0f}",
            f"{result['bulk']:,.0f}",
            f"{result['encode']:,.0f}",
            f"{result['decode']:,.0f}",
            f"{result['bytes']:,.0f}",
        ))  # fmt: skip
    headings = (
        "codec",
        "append rec/s",
        "bulk rec/s",
        "append+build rec/s",
        "decode rec/s",
        "batch bytes",
    )
    title = (
        f"record batch v2, {RECORDS_PER_BATCH} records of {VALUE_SIZE} bytes a batch,"
        f" {args.batches} batches, best of {args.repeats}"
    )
    try:
        if args.plain:
            raise ImportError
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(title)
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headings)]
        print("  ".join(h.rjust(w) for h, w in zip(headings, widths)))
        for row in rows:
            print("  ".join(c.rjust(w) for c, w in zip(row, widths)))
        return
    table = Table(title=title)
    for heading in headings:
        table.add_column(heading, justify="right")
    for row in rows:
        table.add_row(*row)
    Console().print(table)


if __name__ == "__main__":
    main()
