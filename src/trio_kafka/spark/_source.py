"""The `trio-kafka` Spark data source: the driver's half of a load.

Theory of operation
-------------------
Spark 4's Python data source API gives three hooks: `writer()` on the driver before the
job, `write(batches)` in every task attempt, and `commit(messages)` / `abort(messages)`
on the driver after it (each of the driver hooks may run in a Python process of its own:
all state travels in the pickled writer or in Kafka, never in driver globals).

The rows are the load's rows in `BulkLoader`'s sense (core/_load.py): numbered in
the input, placed by murmur2 of the key or row % partitions, each record batch closed
by a checkpoint, so every attempt and every rerun resumes from the log (`_task.py`).

- `writer()` (`open_load`): refuses overwrite; decides the guarantee ("auto": CAS where
  every partition is CAS-checked, transactions elsewhere; a forced one is checked) and
  records it in the manifest (`_manifest.py`), or takes the recorded one on a rerun. A
  rerun that finds a commit under way (`committing`: the driver died between EndTxns)
  first finishes it (`_finish_commit`).
- `write()` (`_task.py`): streams the task's rows through `load_partition` and returns
  a `LoadCommitMessage` (what each partition's attempt did).
- `commit()`: CAS: each partition's last checkpoint must be its last row. Transactions:
  the winning attempts' transactions go into the manifest (`committing`) BEFORE the
  first EndTxn; then every other candidate transactional id is fenced and each winner
  committed (`_finish_commit`). Then the manifest says `complete`.
- `abort()`: transactional loads fence every candidate id; the manifest says `aborted`
  (a rerun with the same load_id resumes).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
from collections.abc import Iterator
from typing import Any

import attrs
import trio
from pyspark import TaskContext
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

from trio_kafka.client import (
    Backend,
    BulkLoader,
    HandedOffTransaction,
    IsolationLevel,
    KafkaSelector,
    PartitionReader,
    open_producer,
    open_selector,
)
from trio_kafka.errors import ConfigError, KafkaError
from trio_kafka.spark._manifest import (
    LoadState,
    Manifest,
    Winner,
    read_manifest,
    write_manifest,
)
from trio_kafka.spark._options import AUTO, EXACTLY_ONCE, NAME, TRANSACTIONAL, LoadOptions
from trio_kafka.spark._task import PartitionReport, transactional_id, write_partitions

logger = logging.getLogger("trio_kafka.spark")


@dataclasses.dataclass
class LoadCommitMessage(WriterCommitMessage):
    """What one task attempt did (picklable; Spark hands it to `commit()`)."""

    task: int
    attempt: int
    partitions: list[PartitionReport]


class LoadError(KafkaError):
    """The driver found the load incomplete or inconsistent at commit."""


def _loader(selector: KafkaSelector, options: LoadOptions, guarantee: str) -> BulkLoader:
    return BulkLoader(
        selector,
        options.topic,
        options.load_id,
        guarantee=guarantee,
        request_timeout=options.request_timeout,
        transaction_timeout=options.transaction_timeout,
        routing=options.routing_fields(),
    )


async def open_load(options: LoadOptions) -> Manifest:
    """The driver's start of a load (see the module doc)."""
    if not options.load_id:
        raise ConfigError(
            f'the {NAME} data source needs .option("load_id", ...): it names the load, so '
            "that a rerun resumes it instead of writing the rows again"
        )
    async with open_selector(options.bootstrap, request_timeout=options.request_timeout) as sel:
        count = (await sel.wait_for_topic(options.topic)).partition_count
        manifest = await read_manifest(sel, options.load_id, options.control_topic)
        if manifest is not None:
            if manifest.topic != options.topic:
                raise ConfigError(
                    f"load_id {options.load_id!r} already names a {manifest.guarantee} "
                    f"load into topic {manifest.topic!r}; use another load_id"
                )
            check_resume(sel, options, manifest, count)
            if manifest.state is LoadState.COMMITTING:
                # The driver died between EndTxns: finish them before any task runs.
                manifest = await _finish_commit(sel, options, manifest)
                if not manifest.lost:
                    manifest = attrs.evolve(manifest, state=LoadState.COMPLETE)
                await write_manifest(sel, manifest, options.control_topic)
            return manifest
        loader = _loader(sel, options, options.guarantee)
        backend = await loader.choose_backend(count)
        routing = loader.load_routing(backend.value, count)
        recorded = {name: value for name, value in routing.items() if value is not None}
        manifest = Manifest(options.load_id, options.topic, backend.value, count, routing=recorded)
        await write_manifest(sel, manifest, options.control_topic)
        return manifest


async def load_backend(selector: KafkaSelector, options: LoadOptions, count: int) -> Backend:
    """The backend a new load takes, as `open_load` chooses it (`BulkLoader.choose_backend`):
    a forced guarantee the brokers or the topic cannot give raises `CasNotSupportedError`
    naming what to do instead. `write_dataframe` asks it on the driver before Spark runs
    anything, for a load forced onto CAS."""
    return await _loader(selector, options, options.guarantee).choose_backend(count)


def check_resume(
    selector: KafkaSelector, options: LoadOptions, manifest: Manifest, count: int
) -> None:
    """A rerun must route rows as the load began (core/_load.py): the same partition
    count, guarantee ("auto" takes the recorded one), key and value columns, order_by."""
    guarantee = manifest.guarantee if options.guarantee == AUTO else options.guarantee
    loader = _loader(selector, options, guarantee)
    routing = loader.load_routing(guarantee, count)
    loader.check_routing(manifest.routing, routing, f"its manifest in {options.control_topic}")


def write_task(
    options: LoadOptions, manifest: Manifest, batches: Iterator[Any]
) -> LoadCommitMessage:
    """A task attempt's whole write (runs on an executor)."""
    context = TaskContext.get()
    task = context.partitionId() if context is not None else 0
    attempt = context.attemptNumber() if context is not None else 0
    if manifest.state is LoadState.COMPLETE:
        return LoadCommitMessage(task, attempt, [])
    reports = trio.run(write_partitions, options, manifest.guarantee, batches, task, attempt)
    return LoadCommitMessage(task, attempt, reports)


def _report_json(report: PartitionReport) -> dict[str, Any]:
    fields = attrs.asdict(report, recurse=False)
    if report.transaction is not None:
        fields["transaction"] = attrs.asdict(report.transaction)
    return fields


async def commit_load(
    options: LoadOptions, manifest: Manifest, messages: list[LoadCommitMessage]
) -> Manifest:
    """The driver's end of a successful job (see the module doc)."""
    if manifest.state is LoadState.COMPLETE:
        return manifest
    reports = sorted(
        (r for m in messages if m is not None for r in m.partitions), key=lambda r: r.partition
    )
    counts = {r.partition: r.count for r in reports}
    async with open_selector(options.bootstrap, request_timeout=options.request_timeout) as sel:
        manifest = attrs.evolve(
            manifest, counts=counts, reports=tuple(_report_json(r) for r in reports)
        )
        if manifest.guarantee == EXACTLY_ONCE:
            await _check_tails(sel, options, manifest, reports)
        else:
            winners = tuple(
                Winner(
                    r.partition,
                    r.transaction.transactional_id,
                    r.transaction.producer_id,
                    r.transaction.producer_epoch,
                    r.last_row,
                )
                for r in reports
                if r.transaction is not None
            )
            manifest = attrs.evolve(manifest, state=LoadState.COMMITTING, winners=winners)
            await write_manifest(sel, manifest, options.control_topic)  # before any EndTxn
            manifest = await _finish_commit(sel, options, manifest)
            if manifest.lost:
                await write_manifest(sel, manifest, options.control_topic)
                raise LoadError(
                    f"load {options.load_id!r}: the transactions {', '.join(manifest.lost)} "
                    "were aborted by the coordinator before their commit (past "
                    "transaction_timeout); the other partitions are committed. Run the "
                    "load again with the same load_id: it loads those partitions again"
                )
        done = attrs.evolve(manifest, state=LoadState.COMPLETE)
        await write_manifest(sel, done, options.control_topic)
        return done


async def _check_tails(
    selector: KafkaSelector, options: LoadOptions, manifest: Manifest, reports: list[Any]
) -> None:
    """CAS: each partition's last checkpoint of this load is its last row."""
    loader = _loader(selector, options, EXACTLY_ONCE)
    wrong = []
    for report in reports:
        if report.last_row < 0:
            continue
        _, row, foreign = await loader.resume_point(report.partition)
        if row != report.last_row or foreign:
            after = " followed by other records" if foreign else ""
            wrong.append(f"{report.partition}: ends at row {row}{after}, not {report.last_row}")
    if wrong:
        raise LoadError(
            f"load {options.load_id!r} into {options.topic} is not exact (partition: "
            f"{'; '.join(wrong)}): another writer used these partitions during the load, "
            "or the input is not deterministic"
        )


async def _finish_commit(
    selector: KafkaSelector, options: LoadOptions, manifest: Manifest
) -> Manifest:
    """Fence every candidate that did not win, then commit each winner not committed
    yet; a winner the coordinator already aborted goes to `lost`. Returns the manifest
    `started` again (lost partitions must be loaded again) or still `committing`."""
    winners = {w.transactional_id for w in manifest.winners}
    await _fence_candidates(selector, options, manifest, exclude=winners)
    committed_reader = PartitionReader(
        selector, timeout=options.request_timeout, isolation=IsolationLevel.READ_COMMITTED
    )
    loader = _loader(selector, options, TRANSACTIONAL)
    lost: list[str] = []
    commits = 0
    for winner in manifest.winners:
        _, row, _ = await loader.resume_point(winner.partition, committed_reader)
        if row >= winner.last_row:
            continue  # committed before the driver died
        transaction = HandedOffTransaction(
            winner.transactional_id, winner.producer_id, winner.producer_epoch
        )
        try:
            async with open_producer(
                selector=selector,
                transactional_id=winner.transactional_id,
                request_timeout=options.request_timeout,
            ) as producer:
                await producer.complete_transaction(transaction, commit=True)
        except KafkaError as exc:
            logger.warning(
                "load %s: the transaction %s of partition %d cannot be committed: %s",
                options.load_id,
                winner.transactional_id,
                winner.partition,
                exc,
            )
            lost.append(winner.transactional_id)
            continue
        commits += 1
        if commits == options.crash_driver_after_commits:
            # Test-only: the driver (its process group: the JVM too) dies here.
            os.killpg(options.crash_driver_pgid or os.getpgrp(), signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)  # this process may be in another group
    if lost:
        return attrs.evolve(manifest, state=LoadState.STARTED, lost=tuple(lost), winners=())
    return manifest


async def _fence_candidates(
    selector: KafkaSelector, options: LoadOptions, manifest: Manifest, exclude: set[str]
) -> None:
    """Abort whatever any attempt's transactional id still has open (InitProducerId)."""

    async def fence(txn_id: str) -> None:
        async with open_producer(
            selector=selector,
            transactional_id=txn_id,
            transaction_timeout=options.transaction_timeout,
            request_timeout=options.request_timeout,
        ) as producer:
            await producer.init_transactions()

    async with trio.open_nursery() as nursery:
        for partition in range(manifest.partitions):
            for attempt in range(options.max_attempts):
                txn_id = transactional_id(options.load_id, partition, attempt)
                if txn_id not in exclude:
                    nursery.start_soon(fence, txn_id)


async def abort_load(options: LoadOptions, manifest: Manifest) -> None:
    async with open_selector(options.bootstrap, request_timeout=options.request_timeout) as sel:
        if manifest.guarantee == TRANSACTIONAL:
            await _fence_candidates(sel, options, manifest, exclude=set())
        aborted = attrs.evolve(manifest, state=LoadState.ABORTED)
        await write_manifest(sel, aborted, options.control_topic)


class KafkaWriter(DataSourceArrowWriter):
    """The batch writer (pickled to the executors with its options and manifest)."""

    def __init__(self, options: LoadOptions, manifest: Manifest) -> None:
        self.options = options
        self.manifest = manifest

    def write(self, iterator: Iterator[Any]) -> LoadCommitMessage:
        return write_task(self.options, self.manifest, iterator)

    def commit(self, messages: list[Any]) -> None:
        trio.run(commit_load, self.options, self.manifest, messages)

    def abort(self, messages: list[Any]) -> None:
        trio.run(abort_load, self.options, self.manifest)


class KafkaDataSource(DataSource):
    """`df.write.format("trio-kafka")`: see the module doc and docs/spark.md.

    Batch writes only: a stream is loaded with `foreach_batch_writer` (each micro-batch
    a load of its own), because the `row` column needs the whole micro-batch."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def writer(self, schema: Any, overwrite: bool) -> KafkaWriter:
        if overwrite:
            raise ConfigError(
                f"the {NAME} data source only appends: Kafka topics cannot be overwritten "
                '(use .mode("append"))'
            )
        options = LoadOptions.parse(dict(self.options))
        manifest = trio.run(open_load, options)
        return KafkaWriter(options, manifest)


__all__ = [
    "AUTO",
    "EXACTLY_ONCE",
    "NAME",
    "TRANSACTIONAL",
    "KafkaDataSource",
    "KafkaWriter",
    "LoadCommitMessage",
    "LoadError",
    "LoadOptions",
    "abort_load",
    "check_resume",
    "commit_load",
    "load_backend",
    "open_load",
    "write_task",
]
