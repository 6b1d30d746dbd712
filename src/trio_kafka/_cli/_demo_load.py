"""The demo's loading child: `python -m trio_kafka._cli._demo_load BOOTSTRAP TOPIC LOAD_ID N BATCH`.

A separate process so the demo can SIGKILL it mid-load (nothing of it survives: no
`finally`, no flush) and start it again. It loads rows `0..N-1` of `row_value` with the
`BulkLoader` (keyless rows: row i goes to partition i % partitions) and writes, on
stdout, one `progress RECORDS BYTES` line per acknowledged batch and a final
`result LOADED SKIPPED` line. The rows are a pure function of their number, so the
parent can check every record it reads back without keeping the input.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

_PAD = b"abcdefghijklmnopqrstuvwxyz0123456789" * 4


def row_value(row: int) -> bytes:
    """Row `row`'s value: its number, then 60 to 123 bytes that depend on it (~100 bytes
    on average)."""
    return b"%09d|" % row + _PAD[: 50 + (row * 7919) % 64]


def row_number(value: bytes | None) -> int:
    """The row a value was made from (-1 when it is not one of ours)."""
    if value is None or len(value) < 10 or value[9:10] != b"|":
        return -1
    try:
        return int(value[:9])
    except ValueError:
        return -1


def rows(count: int) -> Iterator[bytes]:
    pad = _PAD
    for row in range(count):
        yield b"%09d|" % row + pad[: 50 + (row * 7919) % 64]


async def _load(bootstrap: str, topic: str, load_id: str, count: int, batch_bytes: int) -> None:
    from trio_kafka.client import BulkLoader
    from trio_kafka.net import open_selector

    out = sys.stdout

    def on_progress(records: int, size: int) -> None:
        # Unbuffered enough for the parent to kill at a point it chose: one line, flushed.
        out.write(f"progress {records} {size}\n")
        out.flush()

    async with open_selector(bootstrap) as selector:
        loader = BulkLoader(
            selector, topic, load_id, batch_bytes=batch_bytes, on_progress=on_progress
        )
        result = await loader.run(rows(count))
    out.write(f"result {result.loaded} {result.skipped}\n")
    out.flush()


def main(argv: list[str]) -> None:
    import trio

    bootstrap, topic, load_id, count, batch_bytes = argv
    trio.run(_load, bootstrap, topic, load_id, int(count), int(batch_bytes))


if __name__ == "__main__":
    main(sys.argv[1:])
