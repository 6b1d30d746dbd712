"""`trio-kafka tail --topic T`: print the records of a topic's partitions."""

from __future__ import annotations

import sys
from typing import Any

import click

from trio_kafka._cli._security import pop_security_options, security_options


def _text(data: bytes | None) -> str:
    if data is None:
        return "null"
    return data.decode("utf-8", errors="backslashreplace")


@click.command()
@click.option("--topic", required=True)
@click.option("--partition", type=click.IntRange(min=0), help="Only this partition (default: all).")
@click.option("--from-beginning", is_flag=True, help="Every record (default: the last --lines).")
@click.option(
    "--lines",
    "-n",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="Records per partition.",
)
@click.option("--bootstrap", default="127.0.0.1:9092", show_default=True)
@click.option("--headers", "show_headers", is_flag=True, help="Print the record headers too.")
@click.option(
    "--isolation",
    type=click.Choice(["read_committed", "read_uncommitted"]),
    default="read_committed",
    show_default=True,
    help="read_committed: what consumers of committed data see (no records of aborted or "
    "still open transactions); read_uncommitted: every record written.",
)
@security_options
def tail(
    topic: str,
    partition: int | None,
    from_beginning: bool,
    lines: int,
    bootstrap: str,
    show_headers: bool,
    isolation: str,
    **security: Any,
) -> None:
    """Print what TOPIC holds: `partition:offset<TAB>key<TAB>value` per record.

    `-n N` prints the last N records of each partition: records, not offsets (on a
    topic written in transactions, commit and abort markers and aborted records take
    offsets too). SIGINT or SIGTERM stops it after the record being printed (exit 130
    or 143)."""
    import anyio
    import trio

    from trio_kafka._cli._signals import stop_on_signals
    from trio_kafka.client import PartitionReader
    from trio_kafka.errors import KafkaError
    from trio_kafka.net import open_selector

    connection = pop_security_options(security)

    async def run() -> int:
        async with stop_on_signals(5.0, doing="stopping after this record") as stop:
            await show(stop.requested)
        return stop.exit_code

    async def show(requested: anyio.Event) -> None:
        async with open_selector(
            bootstrap,
            allow_auto_create_topics=False,
            transport=connection.transport(None),
            sasl=connection.sasl,
        ) as selector:
            meta = await selector.wait_for_topic(topic, timeout=10)
            reader = PartitionReader(selector, isolation=isolation)
            chosen = [partition] if partition is not None else range(meta.partition_count)

            def echo(p: int, record: Any) -> None:
                line = f"{p}:{record.offset}\t{_text(record.key)}\t{_text(record.value)}"
                if show_headers and record.headers:
                    line += "\t" + " ".join(f"{k}={_text(v)}" for k, v in record.headers)
                click.echo(line)

            for p in chosen:
                start = await reader.log_start_offset(topic, p)
                # Where the read below stops (the Fetch high watermark, or the last
                # stable offset with read_committed), not ListOffsets: Tansu's is short
                # after a batch of several records.
                end = await reader.read_end(topic, p)
                if from_beginning:
                    async for record in reader.read(topic, p, start=start, end=end):
                        if requested.is_set():
                            return
                        echo(p, record)
                    continue
                for record in await _last_records(reader, topic, p, start, end, lines):
                    if requested.is_set():
                        return
                    echo(p, record)

    try:
        code = trio.run(run)
    except KafkaError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
    if code:
        sys.exit(code)


async def _last_records(
    reader: Any, topic: str, partition: int, start: int, end: int, count: int
) -> list[Any]:
    """The last `count` records of `[start, end)`: read back from `end` in windows that
    double, since markers and records the reader skips (aborted, with read_committed)
    take offsets too, so `count` offsets may hold fewer records."""
    found: list[Any] = []
    high, window = end, max(count, 1)
    while count and len(found) < count and high > start:
        low = max(start, high - window)
        found[:0] = [record async for record in reader.read(topic, partition, start=low, end=high)]
        high, window = low, window * 2
    return found[max(len(found) - count, 0) :] if count else []


__all__ = ["tail"]
