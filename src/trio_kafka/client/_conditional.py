"""`ConditionalWriter`: a partition used as a commit log, appended to with CAS.

Theory of operation
-------------------
A process that keeps its state in a partition bootstraps by reading the partition to its
end (`read_to_end()`), then appends with the expected offset it believes is next
(`append()`). CAS makes "I have seen everything before my write" true at the moment the
write lands: the broker appends only if the log end is exactly where the writer thinks.

Every record carries two headers, `tk.writer` (the writer's id, from an injectable
source) and `tk.seq` (this writer's append count, decimal): together they name the
append exactly, so "is the record at offset N mine?" has an exact answer.

`append(value)`:

1. send with `expected_offset = next_offset`;
2. acknowledged: the record is at `next_offset` (the broker guarantees it); advance
   `next_offset` and `last_read_end` past it (the application has the entry: it made it);
3. ambiguous (a request lost, a timeout): send again at the same offset, forever. A
   retry is a fresh batch, so it can never land twice: CAS lets at most one attempt
   occupy the offset;
4. a mismatch (nothing of this attempt was written): read the record at the expected
   offset. Our headers: an earlier attempt landed, the append is acknowledged there.
   Anything else: someone else wrote first, `ConcurrentWriteError(offset, foreign_record)`.
   The writer is then stale: `append` refuses until `read_to_end()` ran again (its state
   missed the foreign record).

`last_read_end` is the offset after the last entry the application has seen: read by
`read_to_end()` or appended by this writer itself. So `read_to_end(start=last_read_end)`
yields exactly the entries the application has not applied yet, each once; the writer's
own acknowledged appends are never read back to it (issue: a catch-up used to re-apply
them, a balance of 65 where the log said 35).

Appends of one writer are serialized (`_appending`): each expects the offset its
predecessor left, where concurrent ones would all expect the same offset and all but one
take the others for a foreign writer (the writer's own id in the error).

Without CAS (a topic or broker without the extension: stock Kafka, Tansu), with
`guarantee="auto"` or `"transactional"`, the writer is a *transactional* writer
instead: it holds the transactional id `tk-log-<topic>-<partition>`, and opening it
runs InitProducerId, which fences the previous writer of the log (its open transaction
is aborted, its later commits refused). It reads the committed log to its end, judged
from the transaction markers in the log itself (a record counts when the first marker of
its producer id after it is a COMMIT: the same records as read_committed on Kafka, and
right on Tansu, whose read_committed shows aborted records), and each append is one
transaction of one record. The newest writer takes
over: an older writer's append ends as `WriterFencedError` (a `ConcurrentWriteError`;
PRODUCER_FENCED), never as a write behind the new writer's back. A fenced writer is dead
(`fenced`): its producer can never write again, so every later `append` and
`read_to_end` raises `WriterFencedError` at once, and the application opens a new writer
(which fences the newer one in turn) and reads from the dead one's `last_read_end`. A
`ConcurrentWriteError` that is not a `WriterFencedError` is the CAS one: catch up with the
same writer and retry. An append whose commit answer was lost is
settled as with CAS, by reading the committed log back for its (writer id, sequence):
found, it is acknowledged at its offset; not found and not fenced, it is retried; fenced,
it is a `WriterFencedError`. docs/cas.md compares the two.

State owned here: `next_offset` (None until a complete read), `last_read_end` (see
above), `sequence` (appends this writer has made, acknowledged or not: a sequence number
is never reused, so a late landing of an abandoned append can never pass for a later
one), `fenced` (a transactional writer's death).
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import attrs

from trio_kafka.client._cas import cas_gate
from trio_kafka.client._edge import new_writer_id
from trio_kafka.client._open import open_producer
from trio_kafka.client._producer import Producer
from trio_kafka.client._reader import CommittedInOrder, PartitionReader, committed_newest_first
from trio_kafka.errors import (
    AbortableError,
    AmbiguousError,
    CasNotSupportedError,
    ConcurrentWriteError,
    ConfigError,
    ExpectedOffsetMismatchError,
    FatalError,
    ProducerFencedError,
    WriterFencedError,
)
from trio_kafka.net import SaslConfig
from trio_kafka.producer import Acknowledged, Headers, Rules, current_rules
from trio_kafka.records import Record

WRITER_HEADER = "tk.writer"
SEQUENCE_HEADER = "tk.seq"


def writer_of(record: Record) -> tuple[bytes | None, int | None]:
    """The (writer id, sequence) headers of a record written by a ConditionalWriter."""
    writer: bytes | None = None
    sequence: int | None = None
    for name, value in record.headers:
        if name == WRITER_HEADER:
            writer = value
        elif name == SEQUENCE_HEADER and value is not None:
            try:
                sequence = int(value)
            except ValueError:
                sequence = None
    return writer, sequence


@attrs.define(eq=False)
class ConditionalWriter:
    """Made by `open_conditional_writer()`; see the module doc."""

    producer: Producer
    #: Reads the partition as stored (read_uncommitted): a transactional writer judges
    #: the transaction markers itself (`_committed_by_markers`, `_find`).
    reader: PartitionReader
    topic: str
    partition: int
    writer_id: bytes
    #: The offset the next append expects (None: read_to_end() has not completed since
    #: the writer opened or met a concurrent write).
    next_offset: int | None = None
    #: Appends made so far (the next append's `tk.seq`).
    sequence: int = 0
    #: Attempts sent in total, and those that met an ambiguous outcome (for tests/metrics).
    attempts: int = 0
    ambiguous: int = 0
    #: The offset after the last entry the application has seen: read by a complete
    #: `read_to_end()` or appended (acknowledged) by this writer. The start of a
    #: catching-up read, which then yields only entries the application has not applied.
    last_read_end: int = 0
    #: "exactly_once_cas" (first writer wins) or "transactional" (newest writer wins).
    guarantee: str = "exactly_once_cas"
    #: The rule for an expected-offset mismatch (producer/_rules.py).
    rules: Rules = attrs.field(factory=current_rules)
    #: Why this (transactional) writer is dead, once a newer writer fenced it or its
    #: producer failed for good: every later `append`/`read_to_end` raises a
    #: `WriterFencedError` from it. Never set on a CAS writer (it only goes stale).
    fenced: WriterFencedError | None = None
    #: Held by the append in progress: one writer's appends go one at a time.
    _appending: anyio.Lock = attrs.field(factory=anyio.Lock, init=False, repr=False)

    def __repr__(self) -> str:
        dead = " fenced" if self.fenced is not None else ""
        return (
            f"<ConditionalWriter {self.topic}-{self.partition} writer={self.writer_id.decode()}"
            f" next_offset={self.next_offset} sequence={self.sequence}{dead}>"
        )

    def _check_alive(self, call: str) -> None:
        """A dead writer's `append`/`read_to_end` fails at once, saying why and what to do."""
        if self.fenced is None:
            return
        raise WriterFencedError(
            f"{call} on a dead writer of {self.topic}-{self.partition} (writer "
            f"{self.writer_id.decode()}): {self.fenced} A fenced transactional writer never "
            "writes again; open a new writer with open_conditional_writer and read on from "
            f"this one's last_read_end ({self.last_read_end}).",
            offset=-1,
        ) from self.fenced

    async def read_to_end(
        self, *, start: int | None = None, timeout: float | None = None
    ) -> AsyncIterator[Record]:
        """Yield the partition's records from `start` (default: the log start) to its end
        as of the first fetch; once exhausted, the next append expects that end, and
        `last_read_end` is that end.

        `read_to_end(start=writer.last_read_end)` yields exactly the entries the
        application has not seen: `last_read_end` also moves past the writer's own
        acknowledged appends. A transactional writer reads the committed log, judged
        from the transaction markers in it (`_committed_by_markers`); a fenced one
        raises `WriterFencedError` (open a new writer)."""
        self._check_alive("read_to_end")
        self.next_offset = None
        if self.guarantee == "transactional":
            async for record in self._committed_by_markers(start, timeout):
                yield record
            return
        read = self.reader.read(self.topic, self.partition, start=start, timeout=timeout)
        async for record in read:
            yield record
        assert read.end is not None
        self.next_offset = self.last_read_end = read.end

    async def _committed_by_markers(
        self, start: int | None, timeout: float | None
    ) -> AsyncIterator[Record]:
        """`read_to_end` of a transactional writer: the committed records from `start`
        to the log end, in offset order, judged from the markers in the log
        (`CommittedInOrder`) rather than by a read_committed read: Tansu shows aborted
        records to read_committed readers (docs/compatibility.md), and a log rebuilt
        from them would hold appends that never happened. The same records as
        read_committed on Kafka. The read ends at the log end, or at the first
        transaction not decided yet."""
        reader = self.reader
        topic, partition = self.topic, self.partition
        first = await reader.log_start_offset(topic, partition) if start is None else start
        # The end is the high watermark of the first answer (as `read()` takes it: no
        # ListOffsets round trip, and Tansu's "latest" is short after a batch of several).
        result = await reader.fetch(topic, partition, first, max_wait=0.0, timeout=timeout)
        end = result.high_watermark
        if end < 0:  # an answer without bounds
            end = await reader.log_end_offset(topic, partition)
        judge = CommittedInOrder()
        batches = result.batches
        low = result.next_offset
        while True:
            for record in judge.feed(batches):
                if record.offset >= first:
                    yield record
            if low >= end:
                break
            high = min(end, low + _FIND_WINDOW)
            batches = await reader.batches(topic, partition, low, high, timeout=timeout)
            low = high
        held = judge.first_held
        self.next_offset = self.last_read_end = max(first, end if held is None else held)

    async def append(
        self, value: bytes | None, *, key: bytes | None = None, headers: Headers = ()
    ) -> Acknowledged:
        """Append at `next_offset`; returns the acknowledgement (its `offset` is that
        offset) and moves `last_read_end` past it. Raises `ConcurrentWriteError` when
        another writer took the offset (catch up with `read_to_end(start=last_read_end)`
        and decide again), `WriterFencedError` when a newer transactional writer took the
        log (this writer is dead: open a new one). Concurrent calls go one at a time."""
        try:
            self._appending.acquire_nowait()  # no checkpoint when no append is running
        except anyio.WouldBlock:
            await self._appending.acquire()
        try:
            return await self._append(value, key, headers)
        finally:
            self._appending.release()

    async def _append(
        self, value: bytes | None, key: bytes | None, headers: Headers
    ) -> Acknowledged:
        self._check_alive("append")
        expected = self.next_offset
        if expected is None:
            raise RuntimeError(
                f"{self!r} must read the partition to its end first: iterate "
                "`read_to_end()` completely (again after a ConcurrentWriteError)"
            )
        sequence = self.sequence
        self.sequence += 1
        all_headers = [
            (WRITER_HEADER, self.writer_id),
            (SEQUENCE_HEADER, str(sequence).encode()),
            *headers,
        ]
        if self.guarantee == "transactional":
            return await self._append_in_transaction(value, key, all_headers, sequence)
        lost = False  # an attempt of this append met an ambiguous outcome
        while True:
            self.attempts += 1
            handle = await self.producer.send(
                self.topic,
                value,
                key=key,
                headers=all_headers,
                partition=self.partition,
                expected_offset=expected,
            )
            try:
                ack: Acknowledged = await handle
            except ExpectedOffsetMismatchError as exc:
                elsewhere = self.rules.offset_after_mismatch(exc)
                if elsewhere is not None:
                    expected = elsewhere
                    continue
                return await self.rules.settle_mismatch(self, expected, sequence, lost)  # type: ignore[no-any-return]
            except AmbiguousError as exc:
                self.ambiguous += 1
                if isinstance(getattr(exc, "cause", None), ExpectedOffsetMismatchError):
                    # A retry met a mismatch after an attempt that may have landed.
                    return await self.rules.settle_mismatch(self, expected, sequence, True)  # type: ignore[no-any-return]
                lost = True
                continue  # retried forever: CAS lets at most one attempt land
            self.next_offset = self.last_read_end = expected + 1
            if ack.offset != expected:  # dedup without the original offset (-1)
                ack = Acknowledged(ack.topic, ack.partition, expected, ack.timestamp)
            return ack

    async def _append_in_transaction(
        self, value: bytes | None, key: bytes | None, headers: Headers, sequence: int
    ) -> Acknowledged:
        """One transaction of one record (see the module doc)."""
        producer = self.producer
        while True:
            self.attempts += 1
            try:
                async with producer.transaction():
                    handle = await producer.send(
                        self.topic, value, key=key, headers=headers, partition=self.partition
                    )
                ack: Acknowledged = await handle
            except (ProducerFencedError, FatalError) as exc:
                # Only our EndTxn(commit) commits the transaction: if none was sent
                # (fenced at AddPartitionsToTxn, the usual), there is nothing to look for.
                sent = producer._transactions().commit_sent
                return await self._settle_fenced(sequence, exc, look=sent)
            except AmbiguousError:
                # The commit's answer was lost: the producer re-initialises (which
                # settles the outcome: committed or aborted) unless it was fenced.
                self.ambiguous += 1
                try:
                    await producer.init_transactions()
                except (ProducerFencedError, FatalError) as fenced:
                    return await self._settle_fenced(sequence, fenced)
                found = await self._find(sequence)
                if found is not None:
                    return found
                continue  # aborted: the append did not happen, try again
            except AbortableError:
                continue  # aborted: nothing of it is committed
            self.next_offset = self.last_read_end = ack.offset + 1
            return ack

    async def _find(self, sequence: int) -> Acknowledged | None:
        """Our append `sequence` in the committed log since the last read, if there.

        Judged from the transaction markers in the log itself (`committed_newest_first`:
        committed when the first marker of its producer id after it is a COMMIT), not
        from what a read_committed read returns: Tansu shows aborted records to
        read_committed readers (docs/compatibility.md), and the writer would take its own
        aborted append for committed. On Kafka the answer is the same: the transaction
        is complete, its markers written, once `init_transactions()` returned or a newer
        writer fenced this one. Newest first, in windows: the append is near the end."""
        reader = self.reader
        topic, partition, start = self.topic, self.partition, self.last_read_end
        high = await reader.log_end_offset(topic, partition)
        markers: dict[int, bool] = {}
        while high > start:
            low = max(start, high - _FIND_WINDOW)
            batches = await reader.batches(topic, partition, low, high, first=low == start)
            for record in committed_newest_first(batches, markers):
                if record.offset >= start and writer_of(record) == (self.writer_id, sequence):
                    self.next_offset = self.last_read_end = record.offset + 1
                    return Acknowledged(topic, partition, record.offset, record.timestamp)
            high = low
        return None

    async def _settle_fenced(
        self, sequence: int, error: Exception, *, look: bool = True
    ) -> Acknowledged:
        """A newer writer took the log (or the producer failed for good): the writer is
        dead either way. Did our append commit before that? (`look` False: it cannot
        have, no EndTxn(commit) of it was sent.) Committed, it is acknowledged, and the
        writer's next call raises `WriterFencedError`."""
        self.next_offset = None
        tid = log_transactional_id(self.topic, self.partition)
        why = (
            f"a newer writer took over {self.topic}-{self.partition} (transactional id "
            f"{tid!r} was initialised again: {error})."
            if isinstance(error, ProducerFencedError)
            else f"its transactional producer ({tid!r}) failed for good: {error}."
        )
        self.fenced = WriterFencedError(why, offset=-1)
        self.fenced.__cause__ = error
        found = await self._find(sequence) if look else None
        if found is not None:
            return found
        raise WriterFencedError(
            f"{why} This writer's append (writer {self.writer_id.decode()}, sequence "
            f"{sequence}) was not committed, and this writer is dead: open a new writer "
            f"(open_conditional_writer) and read on from last_read_end ({self.last_read_end}).",
            offset=-1,
        ) from error

    async def settle_mismatch(self, expected: int, sequence: int) -> Acknowledged:
        """The log end is not `expected` any more: was the record there ours?"""
        record = await self.reader.read_at(self.topic, self.partition, expected)
        if record is not None and writer_of(record) == (self.writer_id, sequence):
            self.next_offset = expected + 1
            return Acknowledged(self.topic, self.partition, expected, record.timestamp)
        self.next_offset = None
        who = "nothing is readable there" if record is None else _describe(record)
        raise ConcurrentWriteError(
            f"another writer appended at offset {expected} of {self.topic}-{self.partition} "
            f"before this writer's append (writer {self.writer_id.decode()}, sequence "
            f"{sequence}): {who}. Read the partition again (read_to_end) before appending.",
            offset=expected,
            foreign_record=record,
        )


def _describe(record: Record) -> str:
    writer, sequence = writer_of(record)
    if writer is None:
        return "a record without a writer id"
    return f"writer {writer.decode(errors='replace')} sequence {sequence}"


def log_transactional_id(topic: str, partition: int) -> str:
    """The transactional id every transactional writer of a log holds."""
    return f"tk-log-{topic}-{partition}"


_GUARANTEES = ("auto", "exactly_once_cas", "transactional")
#: The remedy a CAS writer refused names: what works on a broker without CAS (Apache
#: Kafka, Tansu), whatever else the error says.
_WITHOUT_CAS = (
    'open the writer with guarantee="auto" (CAS where the broker and topic have it, '
    'transactions elsewhere) or guarantee="transactional" (any Kafka 2.5+ broker, '
    'Tansu; docs/cas.md, "Without CAS") instead of the default "exactly_once_cas"'
)
#: Offsets per read of a transactional writer's raw batches (`read_to_end`, `_find`).
_FIND_WINDOW = 10_000


def transactional_options(producer: Producer) -> dict[str, Any]:
    """The options of a log's transactional producer: `producer`'s own (timeouts,
    retries, compression, sizes, serializers, interceptors...: a writer behaves alike on
    both guarantees), made transactional: idempotent with acks=all, at most 5 requests
    in flight and at least one retry (what a transactional producer must have), and no
    linger (an append goes at once). Its transactional id is the log's."""
    options = attrs.asdict(producer.config, recurse=False)
    del options["transactional_id"]
    options.update(
        enable_idempotence=True,
        acks=-1,
        max_in_flight=min(options["max_in_flight"], 5),
        retries=max(options["retries"], 1),
        linger=0.0,
    )
    return options


@contextlib.asynccontextmanager
async def open_conditional_writer(
    topic: str,
    partition: int = 0,
    *,
    bootstrap: str | None = None,
    producer: Producer | None = None,
    writer_ids: Callable[[], str] | None = None,
    guarantee: str = "exactly_once_cas",
    tls: ssl.SSLContext | bool | None = None,
    sasl: SaslConfig | None = None,
    **producer_options: Any,
) -> AsyncIterator[ConditionalWriter]:
    """A `ConditionalWriter` on `topic`-`partition`.

    Pass `bootstrap=` (the writer opens its own producer: `linger=0`, idempotent, plus
    `producer_options`) or `producer=` (shared; its `linger` delays each append). With
    `bootstrap=`, TLS and SASL as `open_producer` takes them: `tls=`, `sasl=`, or
    Kafka's names among `producer_options` (`security_protocol`, `sasl_mechanism`,
    `sasl_plain_username`, `ssl_cafile`, ...; docs/security.md).
    `writer_ids` makes the writer's id (default: a random uuid4).

    `guarantee`: "exactly_once_cas" (the default) raises `CasNotSupportedError` at once
    when the partition is not CAS-checked; "transactional" makes a transactional writer
    (see the module doc): a transactional producer of its own over the producer's
    selector, with the producer's options (`request_timeout`, `delivery_timeout`,
    `compression`, ...; `transactional_options`); "auto" picks CAS where it can and
    transactions elsewhere (`writer.guarantee` says which).
    """
    if guarantee not in _GUARANTEES:
        raise ConfigError(
            f"guarantee={guarantee!r}: use one of {', '.join(map(repr, _GUARANTEES))}"
        )
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise TypeError(f"partition must be an int, not {type(partition).__name__} ({partition!r})")
    source = writer_ids if writer_ids is not None else new_writer_id
    async with contextlib.AsyncExitStack() as stack:
        if producer is None:
            if bootstrap is None:
                raise ConfigError("open_conditional_writer needs bootstrap= or producer=")
            producer_options.setdefault("linger", 0.0)
            producer = await stack.enter_async_context(
                open_producer(bootstrap, tls=tls, sasl=sasl, **producer_options)
            )
        elif producer_options or tls is not None or sasl is not None:
            given = sorted(producer_options) + [
                name for name, value in (("tls", tls), ("sasl", sasl)) if value is not None
            ]
            raise ConfigError(f"producer options {given} belong to the producer passed in")
        selector = producer.selector
        if guarantee != "transactional":
            try:
                await cas_gate(selector).check(topic, partition, instead=_WITHOUT_CAS)
            except CasNotSupportedError:
                if guarantee == "exactly_once_cas":
                    raise
                guarantee = "transactional"
            else:
                guarantee = "exactly_once_cas"
        if guarantee == "exactly_once_cas":
            yield ConditionalWriter(
                producer, PartitionReader(selector), topic, partition, source().encode()
            )
            return
        txn_producer = await stack.enter_async_context(
            open_producer(
                selector=selector,
                # The producer's clocks, generator and fault hook: under the simulator,
                # records stamped by time.time() would differ run to run.
                **producer.seams(),
                **transactional_options(producer),
                transactional_id=log_transactional_id(topic, partition),
            )
        )
        await txn_producer.init_transactions()  # fences the previous writer of the log
        yield ConditionalWriter(
            txn_producer,
            PartitionReader(selector),  # raw: the writer judges the markers itself
            topic,
            partition,
            source().encode(),
            guarantee="transactional",
        )


__all__ = [
    "SEQUENCE_HEADER",
    "WRITER_HEADER",
    "ConditionalWriter",
    "log_transactional_id",
    "open_conditional_writer",
    "writer_of",
]
