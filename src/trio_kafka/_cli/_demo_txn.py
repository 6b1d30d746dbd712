"""Demo step 3: two conditional writers racing on one commit log, then transactions.

The race: writers A and B each read the log to its end and append with the expected
offset they believe is next. At each offset one of them wins; the loser gets a
`ConcurrentWriteError` (nothing of its attempt was written), reads what it missed and
tries again. Reading the log afterwards shows every acknowledged append once, at the
offset its acknowledgement named, and none of the lost attempts.

Transactions: one transactional producer commits a transaction, aborts one (its records
were sent and are in the log), and commits another. A read_committed reader sees the two
committed transactions only; a read_uncommitted reader sees the aborted records too.
"""

from __future__ import annotations

import anyio
import attrs
from rich.console import Console
from rich.table import Table

from trio_kafka._cli._demo_ui import Check


@attrs.define
class _Writer:
    name: str
    acked: list[tuple[int, int, bytes]] = attrs.Factory(list)  # (offset, sequence, value)
    lost: list[tuple[int, bytes]] = attrs.Factory(list)  # (sequence, value)
    ambiguous: int = 0


async def _write(bootstrap: str, topic: str, writer: _Writer, appends: int) -> None:
    from trio_kafka.client import open_conditional_writer
    from trio_kafka.errors import ConcurrentWriteError

    async with open_conditional_writer(
        topic, 0, bootstrap=bootstrap, writer_ids=lambda: writer.name
    ) as log:
        async for _ in log.read_to_end():
            pass
        attempt = 0
        while len(writer.acked) < appends and attempt < 50 * appends:
            value = b"%s appends entry %d" % (writer.name.encode(), len(writer.acked))
            sequence = log.sequence
            attempt += 1
            try:
                ack = await log.append(value)
            except ConcurrentWriteError:
                writer.lost.append((sequence, value))
                async for _ in log.read_to_end(start=log.last_read_end):
                    pass
                continue
            writer.acked.append((ack.offset, sequence, value))
        writer.ambiguous = log.ambiguous


async def commit_log_step(
    console: Console, bootstrap: str, appends: int, suffix: str
) -> list[Check]:
    from trio_kafka.client import (
        IsolationLevel,
        PartitionReader,
        create_topic,
        writer_of,
    )
    from trio_kafka.net import open_selector

    topic = f"demo-log-{suffix}"
    async with open_selector(bootstrap) as selector:
        if not (await selector.negotiated_versions()).supports_cas:
            # The race needs CAS; with transactions a second writer of the partition
            # fences the first instead of racing it (docs/cas.md).
            console.print(
                "commit log race: not run, this broker has no CAS (Apache Kafka); "
                "with guarantee='transactional' a second writer fences the first",
                highlight=False,
            )
            return [
                Check(
                    "commit log: at most one success per offset",
                    "2 ConditionalWriters append to one CAS partition at the same time",
                    "not run: the broker has no CAS extension; with transactions one "
                    "writer per partition fences the others instead (docs/cas.md)",
                    None,
                )
            ]
        await create_topic(selector, topic, 1, cas=True)
        writers = [_Writer("writer-A"), _Writer("writer-B")]
        console.print(
            f"two ConditionalWriters race to append {appends} entries each to {topic}-0",
            highlight=False,
        )
        started = anyio.current_time()
        async with anyio.create_task_group() as nursery:
            for writer in writers:
                nursery.start_soon(_write, bootstrap, topic, writer, appends)
        elapsed = anyio.current_time() - started
        reader = PartitionReader(selector, isolation=IsolationLevel.READ_COMMITTED)
        log = await reader.read_all(topic, 0, start=0)
    by_offset = {r.offset: r for r in log}
    acked = [(w, a) for w in writers for a in w.acked]
    misplaced = 0
    for writer, (offset, sequence, value) in acked:
        record = by_offset.get(offset)
        if (
            record is None
            or record.value != value
            or writer_of(record) != (writer.name.encode(), sequence)
        ):
            misplaced += 1
    names = [writer_of(r) for r in log]
    duplicates = len(names) - len(set(names))
    lost_names = {(w.name.encode(), seq) for w in writers for seq, _ in w.lost}
    lost_landed = sum(1 for n in names if n in lost_names)
    conflicts = sum(len(w.lost) for w in writers)
    table = Table(title="commit log race")
    for column in ("writer", "appends acknowledged", "lost races (nothing written)", "ambiguous"):
        table.add_column(column, justify="right" if column != "writer" else "left")
    for w in writers:
        table.add_row(w.name, str(len(w.acked)), str(len(w.lost)), str(w.ambiguous))
    console.print(table)
    console.print(
        f"the log holds {len(log)} records ({elapsed:.2f} s); every acknowledged append is at "
        f"its offset: {'yes' if not misplaced else f'no, {misplaced} are not'}; "
        f"lost attempts found in the log: {lost_landed}",
        highlight=False,
    )
    ok = (
        not misplaced
        and not duplicates
        and not lost_landed
        and len(log) == len(acked)
        and all(len(w.acked) == appends for w in writers)
    )
    return [
        Check(
            "commit log: at most one success per offset",
            "2 ConditionalWriters append to one CAS partition at the same time",
            f"{len(acked)} appends acked = {len(log)} in the log, {conflicts} lost races, "
            f"{lost_landed} of them written, {duplicates} duplicates",
            ok,
        )
    ]


def transactions_available() -> bool:
    from trio_kafka.client import Producer

    return hasattr(Producer, "transaction") and hasattr(Producer, "init_transactions")


async def transactions_step(
    console: Console, bootstrap: str, per_txn: int, suffix: str
) -> list[Check]:
    if not transactions_available():
        console.print("[yellow]transactions are not available in this build yet: skipped[/]")
        return [
            Check(
                "transactions: atomic, aborted never visible",
                "not yet available in this build",
                "-",
                None,
            )
        ]
    from trio_kafka.client import IsolationLevel, PartitionReader, create_topic, open_producer
    from trio_kafka.net import open_selector

    topic = f"demo-txn-{suffix}"
    partitions = 3
    sent: dict[str, list[bytes]] = {"commit-1": [], "abort": [], "commit-2": []}
    async with open_selector(bootstrap) as selector:
        await create_topic(selector, topic, partitions, cas=False)
        async with open_producer(
            bootstrap, transactional_id=f"demo-txn-{suffix}", linger=0.005
        ) as producer:
            await producer.init_transactions()
            for name, sent_values in sent.items():
                producer.begin_transaction()
                for i in range(per_txn):
                    value = b"%s record %d" % (name.encode(), i)
                    await producer.send(topic, value, partition=i % partitions)
                    sent_values.append(value)
                if name == "abort":
                    await producer.flush()  # the records are in the log; the abort hides them
                    await producer.abort_transaction()
                else:
                    await producer.commit_transaction()
        seen: dict[IsolationLevel, list[bytes]] = {}
        for isolation in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
            reader = PartitionReader(selector, isolation=isolation)
            values: list[bytes] = []
            for partition in range(partitions):
                for record in await reader.read_all(topic, partition, start=0):
                    values.append(record.value or b"")
            seen[isolation] = values
    committed = set(sent["commit-1"] + sent["commit-2"])
    aborted = set(sent["abort"])
    table = Table(title=f"what readers of {topic} see")
    for column in ("reader", "records", "committed", "aborted"):
        table.add_column(column, justify="left" if column == "reader" else "right")
    for isolation, values in seen.items():
        table.add_row(
            isolation.name.lower(),
            str(len(values)),
            str(sum(v in committed for v in values)),
            str(sum(v in aborted for v in values)),
        )
    console.print(table)
    rc = seen[IsolationLevel.READ_COMMITTED]
    ru = seen[IsolationLevel.READ_UNCOMMITTED]
    ok = (
        sorted(rc) == sorted(committed)
        and not any(v in aborted for v in rc)
        and sorted(ru) == sorted(committed | aborted)
    )
    return [
        Check(
            "transactions: atomic, aborted never visible",
            "commit, abort (records sent first), commit; read_committed vs read_uncommitted",
            f"read_committed {len(rc)} = {len(committed)} committed, "
            f"{sum(v in aborted for v in rc)} aborted; read_uncommitted {len(ru)}",
            ok,
        )
    ]


__all__ = ["commit_log_step", "transactions_available", "transactions_step"]
