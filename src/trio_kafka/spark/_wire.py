"""The Kafka side of a Spark load: one partition's rows written by one task attempt.

Theory of operation
-------------------
Everything here is async (trio) and runs inside `trio.run` in a Spark task or in the
driver. It speaks the wire protocol through a `KafkaSelector`, one request at a time per
partition: a load is placed by offsets, so pipelining buys little and costs reasoning.

`CasPartitionWriter` (guarantee "exactly_once") owns one partition of one load. The
driver fixed the partition's `base` offset in the manifest; row `r` of the partition
belongs at offset `base + r`, and every record carries the headers `tk.load` (the load
id) and `tk.row` (r). An attempt:

1. reads the log end offset `E`; `E - base` rows are already there (written by an
   earlier attempt or run). It checks the record at `E - 1` is this load's row
   `E - 1 - base` (anything else: another writer used the partition, stop loudly);
2. appends the remaining rows in batches, each a CAS write whose record batch
   `baseOffset` is `base + first row`: the broker appends it only at exactly that offset;
3. a lost answer, a timeout, a retriable error: the same batch is sent again at the
   same offset. CAS lets at most one copy land, so no sequence numbers are needed;
4. a mismatch (someone else is at that offset: our own earlier copy, or a zombie
   attempt of the same task racing us): every record between the offset we expected and
   the log end the broker reported is read back and must be this load's row for its
   offset; then the attempt goes on after them. A foreign record is a
   `ConcurrentWriteError`.

`TxnPartitionWriter` (guarantee "transactional", for brokers without CAS) writes one
partition's rows in a transaction of its own (`transactional_id` per task attempt):
FindCoordinator, InitProducerId, AddPartitionsToTxn, then idempotent transactional
batches (a retry resends the same sequence numbers: the broker deduplicates). It
returns the producer id and epoch and leaves the transaction open: the driver ends it
(`end_transaction`) or fences it (`fence`, an InitProducerId on the same id, which makes
the coordinator abort whatever that id had open).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import trio

from trio_kafka.client import (
    LOAD_HEADER,
    ROW_HEADER,
    PartitionReader,
    one_batch_request,
    row_of,
)
from trio_kafka.errors import (
    ConcurrentWriteError,
    ErrorCode,
    KafkaError,
    error_for_code,
    error_info,
)
from trio_kafka.net import ExponentialBackoff, KafkaSelector
from trio_kafka.producer.transactions import (
    CoordinatorType,
    add_partitions_to_txn,
    find_coordinator,
    init_producer_id,
    read_add_partitions_to_txn,
    read_find_coordinator,
)
from trio_kafka.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from trio_kafka.protocol.messages.end_txn import EndTxnRequest
from trio_kafka.protocol.messages.find_coordinator import FindCoordinatorRequest
from trio_kafka.protocol.messages.produce import (
    ProduceRequest,
)
from trio_kafka.records import BatchBuilder

#: One row: (key, value).
Row = tuple[bytes | None, bytes | None]
#: Java's cap for AddPartitionsToTxn (v4+ is the broker-to-broker batched form).
_MAX_ADD_PARTITIONS_VERSION = 3
#: Coordinator answers that mean "ask again" (after finding the coordinator again for
#: the first two).
_REFIND = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})
_AGAIN = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS})


class InjectedFailure(RuntimeError):
    """A test-only failure (the `fail` option): the attempt stops here on purpose."""


@attrs.frozen
class FailurePlan:
    """Test-only: make attempt `attempt` of the task writing `partition` fail once
    `after` rows are acknowledged, by raising (`how="raise"`) or by sending the next
    batch and killing the Python worker before its answer (`how="exit"`)."""

    partition: int
    attempt: int = 0
    after: int = 0
    how: str = "raise"

    @classmethod
    def parse(cls, text: str | None) -> tuple[FailurePlan, ...]:
        """`"partition=1,attempt=0,after=1000,how=exit; partition=3,after=10"`."""
        plans = []
        for part in (text or "").split(";"):
            if not part.strip():
                continue
            fields: dict[str, Any] = {}
            for item in part.split(","):
                name, _, value = item.strip().partition("=")
                fields[name.strip()] = value.strip() if name.strip() == "how" else int(value)
            if fields.get("how", "raise") not in ("raise", "exit"):
                raise ValueError(f"fail: how must be raise or exit, not {fields['how']!r}")
            plans.append(cls(**fields))
        return tuple(plans)


@attrs.frozen
class PartitionReport:
    """What one attempt did in one Kafka partition (part of a Spark commit message)."""

    partition: int
    #: The attempt (Spark's attempt number) and the Spark partition (task) that wrote it.
    attempt: int
    task: int
    base: int
    #: Rows of the partition in the DataFrame; rows found already written and skipped;
    #: rows this attempt wrote; CAS mismatches met (another attempt was writing too).
    count: int
    skipped: int = 0
    written: int = 0
    conflicts: int = 0
    #: Transactional mode: (transactional id, producer id, epoch) left open.
    transaction: tuple[str, int, int] | None = None


#: The row number of a record this load wrote (None: not one of this load's). Spark
#: loads and `BulkLoader` share the manifest headers, so they share the reader too.
load_row = row_of


def _batch(rows: Sequence[Row], first_row: int, load_id: bytes, timestamp_ms: int) -> BatchBuilder:
    builder = BatchBuilder()
    for index, (key, value) in enumerate(rows, first_row):
        builder.append(
            timestamp_ms, key, value, ((LOAD_HEADER, load_id), (ROW_HEADER, b"%d" % index))
        )
    return builder


async def leader_of(selector: KafkaSelector, topic: str, partition: int) -> int:
    await selector.wait_for_topic(topic)
    for _ in range(50):
        part = selector.metadata.partition(topic, partition)
        if part is not None and part.leader >= 0:
            return part.leader
        await selector.refresh_metadata([topic])
        await trio.sleep(0.1)
    raise KafkaError(f"{topic}-{partition} has no leader")


async def partition_count(selector: KafkaSelector, topic: str) -> int:
    return (await selector.wait_for_topic(topic)).partition_count


@attrs.define(eq=False)
class _Sender:
    """Sends one batch to a partition's leader until it gets a definite answer."""

    selector: KafkaSelector
    topic: str
    partition: int
    request_timeout: float
    retry_timeout: float
    transactional_id: str | None = None
    _backoff: ExponentialBackoff = attrs.field(factory=lambda: ExponentialBackoff(0.05, 1.0))

    def request(self, data: bytes) -> ProduceRequest:
        return one_batch_request(
            self.topic,
            self.partition,
            data,
            timeout=self.request_timeout,
            transactional_id=self.transactional_id,
        )

    async def send(self, data: bytes) -> tuple[int, int]:
        """(error code, base offset) of the first definite answer: NONE,
        DUPLICATE_SEQUENCE_NUMBER or EXPECTED_OFFSET_MISMATCH (with the log end offset).
        Lost connections, timeouts and retriable codes are retried with the same bytes;
        other codes raise."""
        deadline = trio.current_time() + self.retry_timeout
        attempt = 0
        while True:
            try:
                leader = await leader_of(self.selector, self.topic, self.partition)
                response = await self.selector.request(
                    leader, self.request(data), timeout=self.request_timeout
                )
                answer = response.responses[0].partition_responses[0]
                code, offset = answer.error_code, answer.base_offset
                if code in (
                    ErrorCode.NONE,
                    ErrorCode.DUPLICATE_SEQUENCE_NUMBER,
                    ErrorCode.EXPECTED_OFFSET_MISMATCH,
                ):
                    return code, offset
                info = error_info(code)
                error: KafkaError = error_for_code(code, answer.error_message)
                if not (info.retriable or info.invalid_metadata):
                    raise error
            except KafkaError as exc:
                if not _transient(exc):
                    raise
                error = exc
            if trio.current_time() >= deadline:
                raise KafkaError(
                    f"{self.topic}-{self.partition}: no definite answer to a Produce within "
                    f"{self.retry_timeout} s (last error: {error})"
                ) from error
            await trio.sleep(self._backoff.backoff(attempt, self.selector.rng))
            attempt += 1
            self.selector.request_refresh()

    async def send_and_forget(self, data: bytes) -> None:
        """Write the request and do not wait (the `exit` failure: the answer is lost)."""
        leader = await leader_of(self.selector, self.topic, self.partition)
        await self.selector.send(leader, self.request(data), timeout=self.request_timeout)


def _transient(exc: KafkaError) -> bool:
    """Errors after which the same request may simply be sent again."""
    from trio_kafka.errors import (
        BrokerConnectionError,
        ConnectionLostError,
        RequestTimeoutError,
        RetriableError,
    )

    return isinstance(
        exc, BrokerConnectionError | ConnectionLostError | RequestTimeoutError | RetriableError
    )


@attrs.define(eq=False)
class CasPartitionWriter:
    """One attempt at one partition of an exactly-once load (see the module doc)."""

    selector: KafkaSelector
    topic: str
    partition: int
    load_id: str
    base: int
    attempt: int = 0
    task: int = 0
    batch_records: int = 1000
    request_timeout: float = 30.0
    retry_timeout: float = 120.0
    failure: FailurePlan | None = None
    #: Called with the rows acknowledged so far after each batch (tests, progress).
    on_progress: Callable[[int], None] | None = None

    async def run(self, rows: Sequence[Row]) -> PartitionReport:
        load = self.load_id.encode()
        reader = PartitionReader(self.selector, timeout=self.request_timeout)
        sender = _Sender(
            self.selector, self.topic, self.partition, self.request_timeout, self.retry_timeout
        )
        count = len(rows)
        end = await reader.log_end_offset(self.topic, self.partition)
        await self._check_tail(reader, load, end, count)
        position = skipped = end - self.base
        written = conflicts = 0
        while position < count:
            take = rows[position : position + self.batch_records]
            expected = self.base + position
            data = _batch(take, position, load, _now_ms()).build(base_offset=expected)
            await self._maybe_fail(position, written, sender, data)
            code, log_end = await sender.send(data)
            if code == ErrorCode.EXPECTED_OFFSET_MISMATCH:
                conflicts += 1
                if log_end < 0:
                    log_end = await reader.log_end_offset(self.topic, self.partition)
                await self._check_range(reader, load, expected, log_end, count)
                position = log_end - self.base
                continue
            position += len(take)
            written += len(take)
            if self.on_progress is not None:
                self.on_progress(position)
        return PartitionReport(
            self.partition,
            self.attempt,
            self.task,
            self.base,
            count,
            skipped=skipped,
            written=written,
            conflicts=conflicts,
        )

    async def _maybe_fail(self, position: int, written: int, sender: _Sender, data: bytes) -> None:
        plan = self.failure
        if plan is None or written < plan.after:
            return
        if plan.how == "exit":
            # Send the batch, then die before its answer: the worker crashes mid-batch.
            await sender.send_and_forget(data)
            await trio.sleep(0.05)  # let the bytes leave
            os._exit(1)
        raise InjectedFailure(
            f"injected failure: {self.topic}-{self.partition} attempt {self.attempt} after "
            f"{written} acknowledged rows (row {position})"
        )

    async def _check_tail(self, reader: PartitionReader, load: bytes, end: int, count: int) -> None:
        if end < self.base:
            raise KafkaError(
                f"{self.topic}-{self.partition} ends at {end}, before the load's base offset "
                f"{self.base}: the partition was deleted or truncated since load "
                f"{self.load_id!r} began; start a new load_id"
            )
        if end == self.base:
            return
        await self._check_range(reader, load, end - 1, end, count)

    async def _check_range(
        self, reader: PartitionReader, load: bytes, start: int, end: int, count: int
    ) -> None:
        """Every record in [start, end) must be this load's row for its offset."""
        if end < start:
            raise KafkaError(
                f"{self.topic}-{self.partition}: the broker reported the log end {end} "
                f"before offset {start} this load expected; the partition was truncated"
            )
        if end > self.base + count:
            raise ConcurrentWriteError(
                f"{self.topic}-{self.partition} ends at {end}, past the end of load "
                f"{self.load_id!r} ({self.base} + {count} rows): another writer appended "
                "there, or the DataFrame has fewer rows than the run that began the load "
                "(the input must be deterministic)",
                offset=self.base + count,
            )
        offset = start
        async for record in reader.read(self.topic, self.partition, start=start, end=end):
            row = load_row(record, load)
            if row != record.offset - self.base:
                raise ConcurrentWriteError(
                    f"offset {record.offset} of {self.topic}-{self.partition} holds "
                    f"{'a record of another writer' if row is None else f'row {row}'}, not "
                    f"row {record.offset - self.base} of load {self.load_id!r}: another "
                    "writer used the partition during the load; the load stops",
                    offset=record.offset,
                    foreign_record=record,
                )
            offset = record.offset + 1
        if offset != end:
            raise ConcurrentWriteError(
                f"{self.topic}-{self.partition}: offsets [{offset}, {end}) hold no record of "
                f"load {self.load_id!r} (markers or other writers' transactions)",
                offset=offset,
            )


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)


# -- transactions ------------------------------------------------------------------------


@attrs.define(eq=False)
class _Coordinator:
    """Requests to a transactional id's coordinator, found and re-found as needed."""

    selector: KafkaSelector
    transactional_id: str
    timeout: float
    node: int | None = None
    _backoff: ExponentialBackoff = attrs.field(factory=lambda: ExponentialBackoff(0.05, 1.0))

    async def find(self) -> int:
        selector = self.selector
        node = selector.least_loaded_node()
        await selector.connection(node)
        info = selector.api_versions(node)
        version = info.version_for(FindCoordinatorRequest.API_KEY) if info is not None else None
        version = 1 if version is None else version
        request = find_coordinator(self.transactional_id, CoordinatorType.TRANSACTION, version)
        response = await selector.request(node, request, version=version, timeout=self.timeout)
        code, message, found = read_find_coordinator(response, self.transactional_id, version)
        if found is None:
            raise error_for_code(code, message or "FindCoordinator")
        if found.node_id not in selector.node_ids:
            await selector.refresh_metadata()
        return int(found.node_id)

    async def call(self, build: Callable[[int], Any], read: Callable[[Any, int], int]) -> Any:
        """Send `build(version)` until `read(response, version)` returns NONE."""
        deadline = trio.current_time() + self.timeout * 4
        attempt = 0
        while True:
            try:
                if self.node is None:
                    self.node = await self.find()
                request_class = type(build(0))
                await self.selector.connection(self.node)
                info = self.selector.api_versions(self.node)
                version = info.version_for(request_class.API_KEY) if info is not None else None
                if version is None:
                    version = request_class.MIN_VERSION
                if request_class is AddPartitionsToTxnRequest:
                    version = min(version, _MAX_ADD_PARTITIONS_VERSION)
                response = await self.selector.request(
                    self.node, build(version), version=version, timeout=self.timeout
                )
                code = read(response, version)
                if code == ErrorCode.NONE:
                    return response
                error: KafkaError = error_for_code(code, f"{request_class.__name__}")
                if code in _REFIND:
                    self.node = None
                elif code not in _AGAIN and not error_info(code).retriable:
                    raise error
            except KafkaError as exc:
                if not _transient(exc):
                    raise
                error, self.node = exc, None
            if trio.current_time() >= deadline:
                raise error
            await trio.sleep(self._backoff.backoff(attempt, self.selector.rng))
            attempt += 1


async def init_transactional_id(
    selector: KafkaSelector, transactional_id: str, transaction_timeout: float, timeout: float
) -> tuple[int, int]:
    """InitProducerId for `transactional_id`: (producer id, epoch). Any transaction the
    id had open is aborted by the coordinator (this is also how we fence)."""
    coordinator = _Coordinator(selector, transactional_id, timeout)
    response = await coordinator.call(
        lambda version: init_producer_id(transactional_id, transaction_timeout, -1, -1),
        lambda response, version: int(response.error_code),
    )
    return int(response.producer_id), int(response.producer_epoch)


fence = init_transactional_id


async def end_transaction(
    selector: KafkaSelector,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    *,
    commit: bool,
    timeout: float = 30.0,
) -> None:
    """EndTxn on the wire for a transaction another process (a Spark task) began."""
    coordinator = _Coordinator(selector, transactional_id, timeout)
    await coordinator.call(
        lambda version: EndTxnRequest(
            transactional_id=transactional_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            committed=commit,
        ),
        lambda response, version: int(response.error_code),
    )


@attrs.define(eq=False)
class TxnPartitionWriter:
    """One attempt at one partition of a transactional load (see the module doc)."""

    selector: KafkaSelector
    topic: str
    partition: int
    load_id: str
    transactional_id: str
    attempt: int = 0
    task: int = 0
    batch_records: int = 1000
    transaction_timeout: float = 600.0
    request_timeout: float = 30.0
    retry_timeout: float = 120.0
    failure: FailurePlan | None = None

    async def run(self, rows: Sequence[Row]) -> PartitionReport:
        load = self.load_id.encode()
        txn_id = self.transactional_id
        producer_id, epoch = await init_transactional_id(
            self.selector, txn_id, self.transaction_timeout, self.request_timeout
        )
        coordinator = _Coordinator(self.selector, txn_id, self.request_timeout)
        partitions = [(self.topic, self.partition)]
        await coordinator.call(
            lambda version: add_partitions_to_txn(txn_id, producer_id, epoch, partitions, version),
            lambda response, version: max(
                read_add_partitions_to_txn(response, txn_id, partitions, version).values()
            ),
        )
        sender = _Sender(
            self.selector,
            self.topic,
            self.partition,
            self.request_timeout,
            self.retry_timeout,
            transactional_id=txn_id,
        )
        sequence = 0
        plan = self.failure
        while sequence < len(rows):
            if plan is not None and sequence >= plan.after:
                raise InjectedFailure(
                    f"injected failure: {self.topic}-{self.partition} attempt {self.attempt} "
                    f"after {sequence} rows written in transaction {txn_id}"
                )
            take = rows[sequence : sequence + self.batch_records]
            data = _batch(take, sequence, load, _now_ms()).build(
                base_offset=-1,
                producer_id=producer_id,
                producer_epoch=epoch,
                base_sequence=sequence,
                is_transactional=True,
            )
            code, _ = await sender.send(data)
            if code == ErrorCode.EXPECTED_OFFSET_MISMATCH:
                raise KafkaError(
                    f"{self.topic}-{self.partition} answered EXPECTED_OFFSET_MISMATCH to a "
                    "write without an expected offset"
                )
            sequence += len(take)
        return PartitionReport(
            self.partition,
            self.attempt,
            self.task,
            -1,
            len(rows),
            written=len(rows),
            transaction=(txn_id, producer_id, epoch),
        )


__all__ = [
    "LOAD_HEADER",
    "ROW_HEADER",
    "CasPartitionWriter",
    "FailurePlan",
    "InjectedFailure",
    "PartitionReport",
    "Row",
    "TxnPartitionWriter",
    "end_transaction",
    "fence",
    "init_transactional_id",
    "leader_of",
    "load_row",
    "partition_count",
]
