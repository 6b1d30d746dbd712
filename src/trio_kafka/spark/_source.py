"""The `trio-kafka` Spark data source: the driver's and the tasks' halves of a load.

Theory of operation
-------------------
Spark 4's Python data source API gives three hooks: `writer()` on the driver before the
job, `write(batches)` in every task attempt, and `commit(messages)` / `abort(messages)`
on the driver after it (each of the driver hooks may run in a Python process of its own:
all state travels in the pickled writer or in Kafka, never in driver globals).

The input has the columns `partition` (int, the Kafka partition), `row` (long, the row's
number within its Kafka partition, 0, 1, 2...), `key` and `value` (binary or string):
`write_dataframe()` computes them and puts each Kafka partition in exactly one Spark
task. A task checks that what it got of each Kafka partition is rows 0..n-1; a Kafka
partition split over two tasks, or numbered with gaps, is refused at once.

- `writer()`: refuses overwrite; opens the load: reads the manifest of `load_id` from
  the control topic (a rerun reuses its bases), or fixes the bases at the partitions'
  current log ends and writes a `started` manifest. In exactly_once mode it first checks
  that the brokers and the topic do the CAS check (`CasNotSupportedError` otherwise).
- `write()`: collects the task's rows, then `trio.run`s one writer per Kafka partition
  (`_wire.py`), and returns a `LoadCommitMessage` (what each partition's attempt did).
- `commit()`: exactly_once: every partition must end at `base + count`; transactional:
  EndTxn(commit) for each winning attempt's transaction, then fence every other
  candidate transactional id (earlier or concurrent attempts). Then the manifest says
  `complete`. `abort()`: transactional mode fences every candidate id; the manifest says
  `aborted` (a rerun with the same load_id resumes).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Iterator
from typing import Any

import trio
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from trio_kafka.client import CasGate
from trio_kafka.errors import ConfigError, KafkaError
from trio_kafka.net import KafkaSelector, open_selector
from trio_kafka.spark._manifest import CONTROL_TOPIC, Manifest, read_manifest, write_manifest
from trio_kafka.spark._wire import (
    CasPartitionWriter,
    FailurePlan,
    PartitionReport,
    Row,
    TxnPartitionWriter,
    end_transaction,
    fence,
    partition_count,
)

EXACTLY_ONCE = "exactly_once"
TRANSACTIONAL = "transactional"
GUARANTEES = (EXACTLY_ONCE, TRANSACTIONAL)
NAME = "trio-kafka"


@dataclasses.dataclass
class LoadCommitMessage(WriterCommitMessage):
    """What one task attempt did (picklable; Spark hands it to `commit()`)."""

    task: int
    attempt: int
    partitions: list[PartitionReport]


class LoadError(KafkaError):
    """The driver found the load incomplete or inconsistent at commit."""


@dataclasses.dataclass
class LoadOptions:
    """The writer's options (all strings in Spark; parsed once on the driver)."""

    bootstrap: str
    topic: str
    load_id: str
    guarantee: str = EXACTLY_ONCE
    control_topic: str = CONTROL_TOPIC
    batch_records: int = 1000
    request_timeout: float = 30.0
    transaction_timeout: float = 600.0
    max_attempts: int = 8
    fail: str = ""

    @classmethod
    def parse(cls, options: dict[str, str]) -> LoadOptions:
        opts = {k.lower(): v for k, v in options.items()}
        missing = [name for name in ("bootstrap", "topic") if not opts.get(name)]
        if missing:
            raise ConfigError(
                f"the {NAME} data source needs the option(s) {', '.join(missing)}: "
                '.option("bootstrap", "host:9092").option("topic", "t")'
            )
        guarantee = opts.get("guarantee", EXACTLY_ONCE)
        if guarantee not in GUARANTEES:
            raise ConfigError(f"guarantee={guarantee!r}: use one of {', '.join(GUARANTEES)}")
        return cls(
            bootstrap=opts["bootstrap"],
            topic=opts["topic"],
            load_id=opts.get("load_id", ""),
            guarantee=guarantee,
            control_topic=opts.get("control_topic", CONTROL_TOPIC),
            batch_records=int(opts.get("batch_records", 1000)),
            request_timeout=float(opts.get("request_timeout", 30.0)),
            transaction_timeout=float(opts.get("transaction_timeout", 600.0)),
            max_attempts=int(opts.get("max_attempts", 8)),
            fail=opts.get("fail", ""),
        )

    def transactional_id(self, partition: int, attempt: int) -> str:
        return f"trio-kafka-{self.load_id}-{partition}-{attempt}"


@contextlib.asynccontextmanager
async def _selector(options: LoadOptions) -> AsyncIterator[KafkaSelector]:
    async with open_selector(options.bootstrap, request_timeout=options.request_timeout) as sel:
        yield sel


async def open_load(options: LoadOptions) -> Manifest:
    """The driver's start of a load (see the module doc)."""
    if not options.load_id:
        raise ConfigError(
            f'the {NAME} data source needs .option("load_id", ...): it names the load, so '
            "that a rerun resumes it instead of writing the rows again"
        )
    async with _selector(options) as selector:
        count = await partition_count(selector, options.topic)
        if options.guarantee == EXACTLY_ONCE:
            gate = CasGate(selector)
            for partition in range(count):
                await gate.check(options.topic, partition)
        manifest = await read_manifest(selector, options.load_id, options.control_topic)
        if manifest is not None:
            if (manifest.topic, manifest.guarantee) != (options.topic, options.guarantee):
                raise ConfigError(
                    f"load_id {options.load_id!r} already names a {manifest.guarantee} load "
                    f"into topic {manifest.topic!r}; use another load_id"
                )
            return manifest
        from trio_kafka.client import PartitionReader

        reader = PartitionReader(selector)
        bases = {}
        for partition in range(count):
            if options.guarantee == EXACTLY_ONCE:
                bases[partition] = await reader.log_end_offset(options.topic, partition)
            else:
                bases[partition] = -1
        manifest = Manifest(options.load_id, options.topic, options.guarantee, bases)
        await write_manifest(selector, manifest, options.control_topic)
        return manifest


def _as_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


def collect_rows(batches: Iterator[Any]) -> dict[int, list[Row]]:
    """The task's rows per Kafka partition, in row order (checked to be 0..n-1)."""
    numbered: dict[int, list[tuple[int, bytes | None, bytes | None]]] = {}
    for batch in batches:
        names = batch.schema.names
        for column in ("partition", "row", "value"):
            if column not in names:
                raise ConfigError(
                    f"the {NAME} data source needs the columns partition, row, key, value "
                    f"(got {names}); use trio_kafka.spark.write_dataframe(), which adds them"
                )
        parts = batch.column("partition").to_pylist()
        rows = batch.column("row").to_pylist()
        values = batch.column("value").to_pylist()
        keys = batch.column("key").to_pylist() if "key" in names else [None] * len(values)
        for p, r, k, v in zip(parts, rows, keys, values):
            numbered.setdefault(int(p), []).append((int(r), _as_bytes(k), _as_bytes(v)))
    result: dict[int, list[Row]] = {}
    for partition, items in numbered.items():
        items.sort(key=lambda item: item[0])
        for expected, (row, _, _) in enumerate(items):
            if row != expected:
                raise ConfigError(
                    f"Kafka partition {partition}: this task has row {row} where row "
                    f"{expected} should be; each Kafka partition must be in exactly one "
                    "Spark task and numbered 0, 1, 2... (use write_dataframe())"
                )
        result[partition] = [(k, v) for _, k, v in items]
    return result


async def _write_partitions(
    options: LoadOptions,
    manifest: Manifest,
    rows: dict[int, list[Row]],
    task: int,
    attempt: int,
) -> list[PartitionReport]:
    plans = FailurePlan.parse(options.fail)
    reports: list[PartitionReport] = []
    async with _selector(options) as selector:
        for partition in sorted(rows):
            if partition not in manifest.bases:
                raise ConfigError(
                    f"row for partition {partition}, but {options.topic} had "
                    f"{len(manifest.bases)} partitions when load {options.load_id!r} began"
                )
            plan = next(
                (p for p in plans if (p.partition, p.attempt) == (partition, attempt)), None
            )
            if options.guarantee == EXACTLY_ONCE:
                cas = CasPartitionWriter(
                    selector,
                    options.topic,
                    partition,
                    options.load_id,
                    manifest.bases[partition],
                    attempt=attempt,
                    task=task,
                    batch_records=options.batch_records,
                    request_timeout=options.request_timeout,
                    failure=plan,
                )
                reports.append(await cas.run(rows[partition]))
            else:
                txn = TxnPartitionWriter(
                    selector,
                    options.topic,
                    partition,
                    options.load_id,
                    options.transactional_id(partition, attempt),
                    attempt=attempt,
                    task=task,
                    batch_records=options.batch_records,
                    transaction_timeout=options.transaction_timeout,
                    request_timeout=options.request_timeout,
                    failure=plan,
                )
                reports.append(await txn.run(rows[partition]))
    return reports


def write_task(
    options: LoadOptions, manifest: Manifest, batches: Iterator[Any]
) -> LoadCommitMessage:
    """A task attempt's whole write (runs on an executor)."""
    context = TaskContext.get()
    task = context.partitionId() if context is not None else 0
    attempt = context.attemptNumber() if context is not None else 0
    rows = collect_rows(batches)  # read everything first: no yield inside trio.run
    if manifest.state == "complete":
        reports = [
            PartitionReport(p, attempt, task, manifest.bases[p], len(r), skipped=len(r))
            for p, r in sorted(rows.items())
        ]
    else:
        reports = trio.run(_write_partitions, options, manifest, rows, task, attempt)
    return LoadCommitMessage(task, attempt, reports)


async def commit_load(
    options: LoadOptions, manifest: Manifest, messages: list[LoadCommitMessage]
) -> Manifest:
    """The driver's end of a successful job (see the module doc)."""
    reports = [r for m in messages if m is not None for r in m.partitions]
    counts = dict.fromkeys(manifest.bases, 0)
    for report in reports:
        counts[report.partition] = report.count
    async with _selector(options) as selector:
        committed: list[tuple[str, int, int]] = list(manifest.transactions)
        if options.guarantee == EXACTLY_ONCE:
            from trio_kafka.client import PartitionReader

            reader = PartitionReader(selector)
            wrong = []
            for partition, base in sorted(manifest.bases.items()):
                end = await reader.log_end_offset(options.topic, partition)
                if end != base + counts[partition]:
                    wrong.append(f"{partition}: ends at {end}, not {base} + {counts[partition]}")
            if wrong:
                raise LoadError(
                    f"load {options.load_id!r} into {options.topic} is not exact "
                    f"(partition: {'; '.join(wrong)}): another writer used these partitions "
                    "during the load, or the input is not deterministic"
                )
        elif manifest.state != "complete":
            winners = {r.transaction[0] for r in reports if r.transaction is not None}
            for report in reports:
                assert report.transaction is not None
                txn_id, producer_id, epoch = report.transaction
                await end_transaction(
                    selector,
                    txn_id,
                    producer_id,
                    epoch,
                    commit=True,
                    timeout=options.request_timeout,
                )
                committed.append(report.transaction)
            await _fence_candidates(selector, options, manifest, exclude=winners)
        done = attr_evolve(
            manifest,
            state="complete",
            counts=counts,
            transactions=tuple(committed),
            reports=tuple(_report_json(r) for r in reports) or manifest.reports,
        )
        await write_manifest(selector, done, options.control_topic)
        return done


async def _fence_candidates(
    selector: KafkaSelector, options: LoadOptions, manifest: Manifest, exclude: set[str]
) -> None:
    """Abort whatever any attempt's transactional id still has open."""
    for partition in sorted(manifest.bases):
        for attempt in range(options.max_attempts):
            txn_id = options.transactional_id(partition, attempt)
            if txn_id not in exclude:
                await fence(selector, txn_id, options.transaction_timeout, options.request_timeout)


async def abort_load(options: LoadOptions, manifest: Manifest) -> None:
    async with _selector(options) as selector:
        if options.guarantee == TRANSACTIONAL:
            await _fence_candidates(selector, options, manifest, exclude=set())
        await write_manifest(
            selector, attr_evolve(manifest, state="aborted"), options.control_topic
        )


def _report_json(report: PartitionReport) -> dict[str, Any]:
    import attrs

    fields = attrs.asdict(report)
    if report.transaction is not None:
        fields["transaction"] = list(report.transaction)
    return fields


def attr_evolve(manifest: Manifest, **changes: Any) -> Manifest:
    import attrs

    return attrs.evolve(manifest, **changes)


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


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """The streaming writer: each micro-batch is a load named `<load_id>-<batch id>`.

    The bases of a micro-batch's load are fixed by its first task attempt to run (each
    Kafka partition is in one task, so there is no race between partitions); a replayed
    micro-batch finds its manifest and resumes or skips."""

    def __init__(self, options: LoadOptions) -> None:
        self.options = options

    def _batch_options(self, batch_id: int) -> LoadOptions:
        return dataclasses.replace(self.options, load_id=f"{self.options.load_id}-{batch_id}")

    def write(self, iterator: Iterator[Any]) -> LoadCommitMessage:
        context = TaskContext.get()
        batch = context.getLocalProperty("streaming.sql.batchId") if context else None
        if batch is None:
            raise RuntimeError("a streaming write task without streaming.sql.batchId")
        batch_id = int(batch)
        options = self._batch_options(batch_id)
        manifest = trio.run(open_load, options)
        return write_task(options, manifest, iterator)

    def commit(self, messages: list[Any], batchId: int) -> None:
        options = self._batch_options(batchId)
        manifest = trio.run(open_load, options)
        trio.run(commit_load, options, manifest, messages)

    def abort(self, messages: list[Any], batchId: int) -> None:
        options = self._batch_options(batchId)
        manifest = trio.run(open_load, options)
        trio.run(abort_load, options, manifest)


class KafkaDataSource(DataSource):
    """`df.write.format("trio-kafka")`: see the module doc and docs/spark.md."""

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

    def streamWriter(self, schema: Any, overwrite: bool) -> KafkaStreamWriter:
        if overwrite:
            raise ConfigError(f"the {NAME} data source only appends (outputMode append)")
        options = LoadOptions.parse(dict(self.options))
        if not options.load_id:
            raise ConfigError(
                f'a streaming write to {NAME} needs .option("load_id", ...): a name stable '
                "across restarts from the same checkpoint (e.g. the query's name); each "
                "micro-batch is loaded as <load_id>-<batch id>"
            )
        return KafkaStreamWriter(options)


__all__ = [
    "EXACTLY_ONCE",
    "GUARANTEES",
    "NAME",
    "TRANSACTIONAL",
    "KafkaDataSource",
    "KafkaStreamWriter",
    "KafkaWriter",
    "LoadCommitMessage",
    "LoadError",
    "LoadOptions",
    "abort_load",
    "collect_rows",
    "commit_load",
    "open_load",
    "write_task",
]
