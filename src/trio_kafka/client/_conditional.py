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

Concurrent appends of one writer share the work and keep their call order (issue 35).
On CAS they are pipelined: each claims, before any checkpoint, the offset after those
claimed before it (`next_offset` is the pipeline's tail; `Rules.pipelined_offset`) and
is handed to the producer in claim order without waiting for their answers: queued
(`_outbox`), and handed over by the first append that finds no hand-over running
(`_flush`). The hand-over does not yield (`Producer.send` checkpoints once in many
calls, the CAS gate answers a known partition without an await), so the appends made
at once ride one record batch, one Produce request, whose expected offset is the
first's (consecutive offsets join the open batch); those made while a request is out
wait in the next batch. An append queued behind a running hand-over wakes once, on its
answer (not once handed over and again for the answer). Each is settled on its own as
above. Where one fails (a
foreign record, or it could not be sent), the chain since the last read is broken
(`_Chain`): every append behind it must fail, its expected offset being a prediction
that is now false (another writer's records may fill exactly the failed one's place,
and the log end is then where the next one expects it). An append made while one
before it is being settled after an answer other than a success (`_Chain.in_doubt`,
a count its batch's answer and its settling keep, not a walk of the appends in flight)
breaks the chain the same way, unsent: that one may be about to fail.
Those not yet sent fail with `ConcurrentWriteError` unsent; the producer never resends a
CAS batch behind a failed one (`CoreRules.behind_failed_cas`); and an append sent that
did not succeed waits for those sent before it, then, behind a failure, is ours only if
an attempt already landed at its offset (read back), a `ConcurrentWriteError` otherwise.
On a producer without idempotence, which could not stop a batch in flight behind a
failed one, each append waits for the answer before it instead. On transactions they are committed in groups: the
first append queued while no commit runs leads; it commits everything queued (at most
`max_group`, after `group_linger`) in one transaction, hands the lead to the first
append queued meanwhile, and every append of the group learns its own outcome: its
offset, all failed on a fence (`WriterFencedError`, unless the log shows the group
committed), an abort retried (without an append whose record the broker refused for
itself, e.g. over the topic's `max.message.bytes`: that one fails alone; for at most the
producer's `delivery_timeout`), a lost commit answer settled by reading the log back.
A waiting append cancelled before its group took it is never sent.

Without CAS (a topic or broker without the extension: stock Kafka, Tansu), with
`guarantee="auto"` or `"transactional"`, the writer is a *transactional* writer
instead: it holds the transactional id `tk-log-<topic>-<partition>`, and opening it
runs InitProducerId, which fences the previous writer of the log (its open transaction
is aborted, its later commits refused). It reads the committed log to its end, judged
from the transaction markers in the log itself (a record counts when the first marker of
its producer id after it is a COMMIT: the same records as read_committed on Kafka, and
right on Tansu, whose read_committed shows aborted records), and each group of
concurrent appends is one transaction. The newest writer takes
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

import collections
import contextlib
import itertools
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.lowlevel
import attrs

from trio_kafka.client._cas import cas_gate
from trio_kafka.client._open import new_writer_id, open_producer
from trio_kafka.client._producer import Producer, checked_record, transaction_commit_sent
from trio_kafka.client._reader import (
    CommittedInOrder,
    PartitionReader,
    check_offset,
    committed_newest_first,
)
from trio_kafka.core import Acknowledged, Failed, Headers, Result, Rules, headers_size
from trio_kafka.errors import (
    AbortableError,
    AmbiguousError,
    CasNotSupportedError,
    ConcurrentWriteError,
    ConfigError,
    ExpectedOffsetMismatchError,
    FatalError,
    KafkaError,
    ProducerClosedError,
    ProducerFencedError,
    RetriableError,
    WriterFencedError,
    refuses_records,
)
from trio_kafka.net import Event, SaslConfig, primitives
from trio_kafka.records import Record

WRITER_HEADER = "tk.writer"
SEQUENCE_HEADER = "tk.seq"


def writer_of(record: Record) -> tuple[bytes | None, int | None]:
    """The (writer id, sequence) headers of a record written by a ConditionalWriter: the
    first `tk.writer` and the first `tk.seq`, which the writer puts before the
    application's headers. An append may carry another log's pair among its own
    headers (a copied record); read last-wins, that pair made the writer's own record
    someone else's when an append was settled by reading it back."""
    writer: bytes | None = None
    sequence: bytes | None = None
    seen_writer = seen_sequence = False
    for name, value in record.headers:
        if name == WRITER_HEADER and not seen_writer:
            writer, seen_writer = value, True
        elif name == SEQUENCE_HEADER and not seen_sequence:
            sequence, seen_sequence = value, True
    if sequence is None:
        return writer, None
    try:
        return writer, int(sequence)
    except ValueError:
        return writer, None


@attrs.define(eq=False)
class _Pending:
    """A transactional append waiting for its group's commit."""

    value: bytes | None
    key: bytes | None
    headers: Headers
    sequence: int
    #: Set when the append has its outcome, or is the next group's leader (`lead`).
    woken: anyio.Event = attrs.field(factory=anyio.Event)
    lead: bool = False
    ack: Acknowledged | None = None
    error: BaseException | None = None

    def resolve(self, ack: Acknowledged) -> None:
        if self.ack is None and self.error is None:
            self.ack = ack
            self.woken.set()

    def fail(self, error: BaseException) -> None:
        if self.ack is None and self.error is None:
            self.error = error
            self.woken.set()

    def outcome(self) -> Acknowledged:
        if self.ack is not None:
            return self.ack
        assert self.error is not None, "an append left without an outcome"
        raise self.error


@attrs.define(eq=False)
class _Link:
    """One CAS append, from its call to its outcome: queued for a flush (`_outbox`),
    handed to the producer (`handle`, its first attempt) or not (`error`), then settled:
    acknowledged, `failed` (not written: `ConcurrentWriteError`) or `unknown` (any other
    error: it may have been written, or may still be)."""

    value: bytes | None
    key: bytes | None
    headers: Headers
    sequence: int
    expected: int
    chain: _Chain
    handle: Any = None
    error: BaseException | None = None
    #: The flush is done with it: `handle` or `error` is final.
    handed: bool = False
    settled: bool = False
    failed: bool = False
    unknown: bool = False
    #: The broker refused it (its `RecordTooLargeError`, ...): not written, and no
    #: earlier attempt of it may have been.
    refused: bool = False
    #: An attempt was answered with anything but a success (counted in
    #: `_Chain.doubts` until it is settled).
    doubted: bool = False
    #: Its task was cancelled while the flush was handing it over: no one settles it.
    abandoned: bool = False
    #: Made only when a task waits, as most appends are never waited for: `answered`
    #: by its own task while another task's flush hands it over (set once its answer
    #: came, or it could not be sent), `_settled` by appends behind it (`_Chain.before`).
    answered: Event | None = None
    _settled: Event | None = attrs.field(default=None, init=False)

    def wake(self, _handle: object = None) -> None:
        assert self.answered is not None
        self.answered.set()

    async def wait_settled(self) -> None:
        if not self.settled:
            if self._settled is None:
                self._settled = primitives().event()
            await self._settled.wait()


@attrs.define(eq=False)
class _Chain:
    """CAS appends pipelined since the last complete read: those sent and not
    settled, or failed, in the order they were sent (`links`, an ordered set; one that
    succeeded leaves). Once one of them failed, those behind it fail: not sent, if they
    were not yet (`broken`), and settled as behind a failure if they were (they expected
    the log end it would have left)."""

    broken: str | None = None
    failed_at: int = -1
    links: dict[_Link, None] = attrs.field(factory=dict)
    #: Links not settled whose attempt was answered with anything but a success, by
    #: their task (`doubt`) or, before their task has run, by their batch (`_answered`).
    doubts: int = 0
    #: The batch of the last link sent, watched by `_answered`.
    _watched: Any = None

    def break_at(self, offset: int, why: str) -> None:
        if self.broken is None:
            self.broken, self.failed_at = why, offset

    def cancelled(self, offset: int = -1) -> None:
        """An append not yet sent (queued at `offset`; -1: unknown) was cancelled: those
        behind it cannot be sent."""
        self.break_at(offset, "an append queued before it was cancelled")

    def stopped_at(self, offset: int) -> int | None:
        """Whether an append at `offset` may be sent: None if so, else where the chain
        broke (`failed_at`). An append in doubt (`in_doubt`) breaks it here, at
        `offset`."""
        if self.broken is None and self.in_doubt():
            self.break_at(offset, "an append before it was being settled")
        return None if self.broken is None else self.failed_at

    def in_doubt(self) -> bool:
        """Whether an append sent is being settled after an answer other than a success
        (reading its offset back, or retrying it after a lost answer), or was answered
        so and its task has not run yet. An append made meanwhile cannot be sent: it
        would expect the log end that one leaves if it is written, and if it is not
        (another writer took its offset, or its attempts never land), the log end may be
        exactly there, with a record the writer never read before it (the cas workload's
        C5, once its appends came at staggered times). A count, not a walk of the
        appends in flight: it is asked once per append."""
        return self.doubts > 0

    def sent(self, link: _Link) -> None:
        """`link` is in the producer (`link.handle`): watch its batch's answer."""
        self.links[link] = None
        batch = link.handle.batch
        if batch is not self._watched:  # (a pipelined run shares one batch: one hook)
            self._watched = batch
            batch.add_done_hook(self._answered)

    def _answered(self, batch: Any) -> None:
        """A batch of this chain's appends was answered: those it did not acknowledge
        are in doubt from now, before their tasks run."""
        if batch.result is Result.ACKNOWLEDGED and not batch.record_errors:
            return
        for link in self.links:
            if link.handle.batch is batch and not link.handle.succeeded():
                self.doubt(link)

    def doubt(self, link: _Link) -> None:
        if not (link.doubted or link.settled):
            link.doubted = True
            self.doubts += 1

    def settle(self, link: _Link) -> None:
        """`link` has its outcome (`failed`, `unknown` or acknowledged)."""
        link.settled = True
        if link.doubted:
            self.doubts -= 1
        if link._settled is not None:
            link._settled.set()
        if not (link.failed or link.unknown):
            self.links.pop(link, None)  # nothing behind it waits on a success

    async def before(self, link: _Link) -> str:
        """How the appends sent before `link` ended, once all of them have (those no
        longer in `links` were acknowledged): "failed" if one was not written, else
        "unknown" if one may have been, else "ok"."""
        before = list(itertools.takewhile(lambda earlier: earlier is not link, self.links))
        for earlier in before:
            await earlier.wait_settled()
        if any(earlier.failed for earlier in before):
            return "failed"
        return "unknown" if any(earlier.unknown for earlier in before) else "ok"


@attrs.define(eq=False)
class _Turns:
    """Sends in the order the appends were made: trio does not run woken tasks in
    order, and `Producer.send` may checkpoint before the record is appended."""

    busy: bool = False
    waiting: collections.deque[anyio.Event] = attrs.field(factory=collections.deque)

    async def take(self, *, on_cancel: Callable[[], None]) -> None:
        if not self.busy:
            self.busy = True
            return
        turn = anyio.Event()
        self.waiting.append(turn)
        try:
            await turn.wait()
        except BaseException:
            if turn in self.waiting:
                self.waiting.remove(turn)
            else:
                self.release()  # granted as it was cancelled: pass it on
            on_cancel()
            raise

    def release(self) -> None:
        if self.waiting:
            self.waiting.popleft().set()
        else:
            self.busy = False


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
    #: The rules for an expected-offset mismatch (core/_rules.py): its producer's.
    _rules: Rules = attrs.field(factory=Rules, alias="rules", repr=False)
    #: Why this (transactional) writer is dead, once a newer writer fenced it or its
    #: producer failed for good: every later `append`/`read_to_end` raises a
    #: `WriterFencedError` from it. Never set on a CAS writer (it only goes stale).
    fenced: WriterFencedError | None = None
    #: Set when its `open_conditional_writer` block ends: every later call raises
    #: `ProducerClosedError`.
    closed: bool = False
    #: Transactional appends per commit (a group), and how long a group's leader waits
    #: for more before committing (0: what queued up during the commit before, and the
    #: appends of the tasks woken with the leader: `_gather`).
    max_group: int = 128
    group_linger: float = 0.0
    #: The offset after the last acknowledged CAS append or complete read.
    _settled_end: int = attrs.field(default=0, init=False, repr=False)
    #: At most the bytes its own two headers add to a record (a sequence of up to 20
    #: digits), counted when an append's size is checked (`checked_record`).
    _own_headers_size: int = attrs.field(init=False, repr=False)

    @_own_headers_size.default
    def _own_headers_size_default(self) -> int:
        return headers_size([(WRITER_HEADER, self.writer_id), (SEQUENCE_HEADER, b"9" * 20)])

    #: CAS appends since the last complete read, and the order they are sent in.
    _chain: _Chain = attrs.field(factory=_Chain, init=False, repr=False)
    _turns: _Turns = attrs.field(factory=_Turns, init=False, repr=False)
    #: CAS appends waiting to be handed to the producer, and whether a flush runs.
    _outbox: collections.deque[_Link] = attrs.field(
        factory=collections.deque, init=False, repr=False
    )
    _flushing: bool = attrs.field(default=False, init=False, repr=False)
    #: Transactional appends waiting for a group, and whether a group is committing.
    _queue: list[_Pending] = attrs.field(factory=list, init=False, repr=False)
    _committing: bool = attrs.field(default=False, init=False, repr=False)

    def __repr__(self) -> str:
        dead = " fenced" if self.fenced is not None else ""
        return (
            f"<ConditionalWriter {self.topic}-{self.partition} writer={self.writer_id.decode()}"
            f" next_offset={self.next_offset} sequence={self.sequence}{dead}>"
        )

    def _check_alive(self, call: str) -> None:
        """A dead or closed writer's `append`/`read_to_end` fails at once, saying why and
        what to do (a closed one's used to fail deep in its producer: "Nursery is closed
        to new arrivals", or an abort that could not run)."""
        if self.closed:
            raise ProducerClosedError(
                f"{call} on a closed writer of {self.topic}-{self.partition} (writer "
                f"{self.writer_id.decode()}): its `async with open_conditional_writer(...)` "
                "block has ended; open a new writer, and read on from this one's "
                f"last_read_end ({self.last_read_end})"
            )
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
        check_offset("start", start)
        self.next_offset = None
        if self.guarantee == "transactional":
            async for record in self._committed_by_markers(start, timeout):
                yield record
            return
        read = self.reader.read(self.topic, self.partition, start=start, timeout=timeout)
        async for record in read:
            yield record
        assert read.end is not None
        self.next_offset = self.last_read_end = self._settled_end = read.end
        self._chain = _Chain()

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
        self._chain = _Chain()

    async def append(
        self, value: bytes | None, *, key: bytes | None = None, headers: Headers = ()
    ) -> Acknowledged:
        """Append after everything this writer has read and appended; returns the
        acknowledgement (its `offset` is where the record is) and moves `last_read_end`
        past it. Raises `ConcurrentWriteError` when another writer took the offset
        (catch up with `read_to_end(start=last_read_end)` and decide again), also to
        every append of this writer queued behind that one, and `WriterFencedError` when
        a newer transactional writer took the log (this writer is dead: open a new one).

        `headers` as `send()` takes them (pairs, or a dict). Bad input raises what
        `send()` raises (`TypeError` naming the field or header, `RecordTooLargeError`)
        before the append takes a sequence or an offset: it fails alone.

        Concurrent calls share the work and keep the order they were made in: on CAS
        they are pipelined, each expecting the offset after those before it; on
        transactions they are committed in groups (`max_group`, `group_linger`).
        docs/cas.md, "Concurrent appends", says what an application may assume."""
        if self.fenced is not None or self.closed:
            self._check_alive("append")
        if self.next_offset is None:
            raise RuntimeError(
                f"{self!r} must read the partition to its end first: iterate "
                "`read_to_end()` completely (again after a ConcurrentWriteError)"
            )
        # Bad input fails here, alone, before the append takes a sequence or an offset
        # (raised by the send instead, it left a claimed offset no record would fill,
        # and broke the appends behind it).
        checked = checked_record(
            self.producer.config, value, key, headers or None, self._own_headers_size
        )
        sequence = self.sequence
        self.sequence += 1
        all_headers = [
            (WRITER_HEADER, self.writer_id),
            (SEQUENCE_HEADER, b"%d" % sequence),
            *(checked or ()),
        ]
        if self.guarantee == "transactional":
            return await self._append_grouped(_Pending(value, key, all_headers, sequence))
        # Claimed before any checkpoint: appends expect offsets in call order.
        tail = self.next_offset
        expected = self._rules.pipelined_offset(tail, self._settled_end)
        self.next_offset = tail + 1
        return await self._append_pipelined(value, key, all_headers, sequence, expected)

    async def _append_pipelined(
        self, value: bytes | None, key: bytes | None, headers: Headers, sequence: int, expected: int
    ) -> Acknowledged:
        """A CAS append at `expected`, handed to the producer in call order after the
        appends claimed before it (`_flush`), not waiting for their answers: the
        idempotent producer never lets a CAS batch behind a failed one land. Without
        idempotence it cannot recall one already in flight, so each append then waits
        for the answer before it (`_send_serial`: no pipelining)."""
        chain = self._chain
        link = _Link(value, key, headers, sequence, expected, chain)
        serial = not self.producer.config.enable_idempotence
        if serial:
            handle = await self._send_serial(link)
        elif self._flushing:
            handle = await self._wait_queued(link)
        else:
            handle = await self._flush(link)
        try:
            try:
                ack: Acknowledged = await handle
            except KafkaError:
                ack = await self._settle_cas(handle, link)
            else:
                if ack.offset != expected:  # dedup without the original offset (-1)
                    ack = Acknowledged(ack.topic, ack.partition, expected, ack.timestamp)
        except ConcurrentWriteError as exc:
            link.failed = True
            chain.break_at(expected, str(exc))
            if chain is self._chain:
                self.next_offset = None
            raise
        except BaseException as exc:
            if link.refused and not self._gave_back(link, exc):
                # Refused for itself, certainly not written: those behind it are settled
                # as behind a failure (they read the log), not as behind an unknown.
                link.failed = True
                chain.break_at(expected, f"the broker refused the append before it: {exc}")
                if chain is self._chain:
                    self.next_offset = None
            elif not link.refused:
                link.unknown = True
                chain.break_at(expected, "the append before it ended without an answer")
            raise
        finally:
            chain.settle(link)
            if serial:
                self._turns.release()
        end = ack.offset + 1
        self._settled_end = max(self._settled_end, end)
        self.last_read_end = max(self.last_read_end, end)
        if chain is self._chain and self.next_offset is not None and self.next_offset < end:
            self.next_offset = end  # an offset rule moved the append
        return ack

    async def _send_serial(self, link: _Link) -> Any:
        """Hand `link` to the producer once the append before it has its outcome
        (`_turns`, released when this one has its own)."""
        chain = link.chain
        await self._turns.take(on_cancel=chain.cancelled)
        if chain.broken is not None:
            self._turns.release()
            raise self._behind_failure(chain, link.expected, link.sequence)
        self.attempts += 1
        try:
            link.handle = await self._send_cas(link.value, link.key, link.headers, link.expected)
        except BaseException as exc:
            if not self._gave_back(link, exc):
                chain.break_at(link.expected, "the append before it could not be sent")
            self._turns.release()
            raise
        chain.sent(link)
        return link.handle

    async def _send_cas(
        self, value: bytes | None, key: bytes | None, headers: Headers, expected: int
    ) -> Any:
        return await self.producer.send(
            self.topic,
            value,
            key=key,
            headers=headers,
            partition=self.partition,
            expected_offset=expected,
        )

    async def _flush(self, own: _Link) -> Any:
        """Hand `own` to the producer, then the appends queued meanwhile (`_outbox`),
        oldest first, until none is left; return `own`'s handle. Run by the append that
        finds no flush running, while the others wait (`_wait_queued`): so a burst of
        appends (those woken by one answer) enters the producer back to back and rides
        one batch.

        Those queued are other tasks' appends, so their sends are shielded (each stops
        on its own, `max_block`): a cancelled flusher's own append fails unsent or is
        cancelled while it waits for its answer, as any other append would be, and the
        others go on. A send rarely yields (`Producer.send` checkpoints once in many
        calls), so usually nothing is queued and no shield is made."""
        self._flushing = True
        outbox = self._outbox
        try:
            await self._send_one(own)
            if outbox:
                with anyio.CancelScope(shield=True):
                    while outbox:
                        queued = outbox.popleft()
                        await self._send_one(queued)
                        self._handed(queued)
        finally:
            self._flushing = False
        if own.error is not None:
            raise own.error
        return own.handle

    async def _wait_queued(self, link: _Link) -> Any:
        """Queue `link` for the running flush and return its handle once it is answered
        (or raise why it could not be sent): its task wakes once, not once to learn
        that it was sent and again for the answer."""
        link.answered = primitives().event()
        self._outbox.append(link)
        try:
            await link.answered.wait()
        except BaseException:
            if link.handed:
                self._abandon(link)
            elif link in self._outbox:  # never sent: those behind it must not be
                self._outbox.remove(link)
                link.chain.cancelled(link.expected)
            else:
                link.abandoned = True  # the flush is handing it over: it abandons it
            raise
        if link.error is not None:
            raise link.error
        return link.handle

    async def _send_one(self, link: _Link) -> None:
        """Hand `link` to the producer unless the chain it belongs to is broken."""
        chain = link.chain
        if chain.stopped_at(link.expected) is not None:
            link.error = self._behind_failure(chain, link.expected, link.sequence)
            return
        self.attempts += 1
        try:
            link.handle = await self.producer.send(
                self.topic,
                link.value,
                key=link.key,
                headers=link.headers,
                partition=self.partition,
                expected_offset=link.expected,
            )
        except BaseException as exc:  # (a cancelled send appended nothing)
            link.error = exc
            if not self._gave_back(link, exc):
                chain.break_at(link.expected, "the append before it could not be sent")
        else:
            # What the send waited for (a leader check, room in the buffer) let the
            # appends ahead of this one be answered: look again, as above.
            failed_at = chain.stopped_at(link.expected)
            if failed_at is not None and failed_at <= link.expected:
                self._recall(link)
                return
            chain.sent(link)

    def _recall(self, link: _Link) -> None:
        """An append ahead of `link` failed, or is in doubt, while `link`'s send waited
        inside the producer (a check of a new leader, room in the buffer): `fail_behind`
        ran before its record was appended, so take it back before it leaves (nothing
        ran since the append). Sent, it would land wherever the log end happened to be
        its expected offset, after records this writer never read (the cas workload's
        C5, seed 102100152). A cancelled append queued behind it breaks the chain too,
        at its own offset: that one does not concern `link`."""
        chain = link.chain
        error = self._behind_failure(chain, link.expected, link.sequence)
        if self.producer._withdraw_unsent(link.handle, error):
            link.error, link.handle = error, None
        else:  # (it left: cannot happen, nothing yields between the append and here)
            chain.sent(link)

    def _gave_back(self, link: _Link, exc: BaseException) -> bool:
        """`link` was not written: the producer refused it (what a serializer or an
        interceptor raised), or the broker did (`link.refused`). If no append claimed an
        offset behind it, its offset is free again and the writer goes on (True); else
        the chain must break."""
        if (
            isinstance(exc, Exception)
            and link.chain is self._chain
            and self.sequence == link.sequence + 1
            and not self._outbox
            and self.next_offset is not None
        ):
            self.next_offset -= 1
            return True
        return False

    def _handed(self, link: _Link) -> None:
        """A queued `link` is handed over (or failed): wake its task once it is answered,
        or settle it if its task left."""
        link.handed = True
        if link.abandoned:
            self._abandon(link)
            return
        if link.error is None:
            link.handle.add_done_callback(link.wake)  # (at once if already answered)
        else:
            link.wake()

    def _abandon(self, link: _Link) -> None:
        """`link` was handed over but its task was cancelled first: no one waits for its
        answer, so its outcome is unknown (those behind it are settled as behind one
        that may have been written)."""
        if link.error is None:
            link.unknown = True
            link.chain.break_at(link.expected, "the append before it ended without an answer")
            link.chain.settle(link)

    def _behind_failure(self, chain: _Chain, expected: int, sequence: int) -> ConcurrentWriteError:
        if chain is self._chain:
            self.next_offset = None
        return ConcurrentWriteError(
            f"an earlier append of this writer (writer {self.writer_id.decode()}) at offset "
            f"{chain.failed_at} of {self.topic}-{self.partition} failed ({chain.broken}), so "
            f"this one (sequence {sequence}, expecting offset {expected}) was not written. "
            "Read the partition again (read_to_end) before appending.",
            offset=expected,
        )

    def _behind_unknown(self, chain: _Chain, expected: int, sequence: int) -> AmbiguousError:
        if chain is self._chain:
            self.next_offset = None
        return AmbiguousError(
            f"an earlier append of this writer (writer {self.writer_id.decode()}) at offset "
            f"{chain.failed_at} of {self.topic}-{self.partition} ended without an answer "
            f"({chain.broken}), and this one (sequence {sequence}, expecting offset "
            f"{expected}) may have been written, or may still be: it can be neither retried "
            "nor settled now. Read the partition again (read_to_end) to know."
        )

    async def _settle_cas(self, handle: Any, link: _Link) -> Acknowledged:
        """The answer to a CAS append sent at `link.expected` other than a success (see
        the module doc, steps 3-4): it may be retried with a new `handle`.

        Any answer but a success first waits for the appends sent before it: when one
        of them failed, this one's expected offset is a prediction that is now false,
        and it is settled as behind a failure (`_settle_behind`), never sent again."""
        chain, expected, sequence = link.chain, link.expected, link.sequence
        lost = False  # an attempt of this append met an ambiguous outcome
        while True:
            try:
                ack: Acknowledged = await handle
            except ExpectedOffsetMismatchError as exc:
                chain.doubt(link)
                before = await chain.before(link)
                if before == "failed":
                    return await self._settle_behind(chain, expected, sequence)
                if before == "unknown":  # (this attempt was not written, and no other)
                    raise self._behind_failure(chain, expected, sequence) from exc
                if exc.log_end_offset >= 0:  # (< 0: the producer failed it unsent)
                    elsewhere = self._rules.offset_after_mismatch(exc)
                    if elsewhere is None:
                        return await self._rules.settle_mismatch(self, expected, sequence, lost)  # type: ignore[no-any-return]
                    expected = elsewhere
            except AmbiguousError as exc:
                self.ambiguous += 1
                chain.doubt(link)
                before = await chain.before(link)
                if before == "failed":
                    return await self._settle_behind(chain, expected, sequence)
                if before == "unknown":
                    raise self._behind_unknown(chain, expected, sequence) from exc
                cause = getattr(exc, "cause", None)
                if isinstance(cause, ExpectedOffsetMismatchError) and cause.log_end_offset >= 0:
                    # A retry met a mismatch after an attempt that may have landed.
                    return await self._rules.settle_mismatch(self, expected, sequence, True)  # type: ignore[no-any-return]
                # Retried forever (also when the producer failed it behind one that
                # ended Ambiguous, which then landed): CAS lets at most one attempt
                # land, and an earlier one may still (seed 1025).
                lost = True
            except KafkaError as exc:
                chain.doubt(link)
                before = await chain.before(link)
                if before == "failed":
                    return await self._settle_behind(chain, expected, sequence)
                if before == "unknown" and not lost:  # (not written)
                    raise self._behind_failure(chain, expected, sequence) from exc
                if lost or not _only_shared_a_refused_batch(handle, exc):
                    link.refused = not lost  # (else an earlier attempt may have landed)
                    raise
                # The broker refused another append of this one's batch and wrote none
                # of it (KIP-467): every append before it is in, so it goes again alone.
            else:
                if ack.offset != expected:  # dedup without the original offset (-1)
                    ack = Acknowledged(ack.topic, ack.partition, expected, ack.timestamp)
                return ack
            self.attempts += 1
            handle = await self._send_cas(link.value, link.key, link.headers, expected)

    async def _settle_behind(self, chain: _Chain, expected: int, sequence: int) -> Acknowledged:
        """An append sent behind one that failed: its attempts can no longer land (the
        producer never resends a CAS batch behind a failed one, and the broker takes
        none of its sequences after the gap), so it is ours at `expected` if an attempt
        already landed there, and failed otherwise."""
        record = await self.reader.read_at(self.topic, self.partition, expected)
        if record is not None and writer_of(record) == (self.writer_id, sequence):
            return Acknowledged(self.topic, self.partition, expected, record.timestamp)
        raise self._behind_failure(chain, expected, sequence)

    async def _append_grouped(self, pending: _Pending) -> Acknowledged:
        """A transactional append: queued, and committed with those queued beside it by
        the first of them (the group's leader) once the transaction before is done."""
        queue = self._queue
        queue.append(pending)
        if self._committing:
            try:
                await pending.woken.wait()
            except BaseException:
                if pending in queue:  # not taken into a group: never sent
                    queue.remove(pending)
                elif pending.lead:
                    self._hand_off()
                raise
            if not pending.lead:
                return pending.outcome()
        else:
            self._committing = True
        try:
            group = await self._gather()
            # Shielded: the group is the others' appends too; a cancelled leader leaves
            # once it is committed (or not), its own append's outcome in the log.
            with anyio.CancelScope(shield=True):
                await self._commit_group(group)
        finally:
            if pending in queue:  # cancelled in the linger
                queue.remove(pending)
            self._hand_off()
        return pending.outcome()

    async def _gather(self) -> list[_Pending]:
        """The leader's group: the appends queued (at most `max_group`) once they stop
        arriving. The appends of the group before were woken with this leader, and
        their tasks append again as soon as they run: a leader that took the queue at
        once would commit alone and leave them to the next transaction, groups then
        alternating small and large at two commits per round of appenders. So it waits
        `group_linger`, then scheduling rounds (no time) until one brings no append:
        at least two, as trio runs a round's tasks in order or reversed, the leader
        possibly before those woken with it."""
        queue = self._queue
        if self.group_linger > 0:
            await anyio.sleep(self.group_linger)
        rounds = 0
        while len(queue) < self.max_group:
            queued = len(queue)
            await anyio.lowlevel.checkpoint()
            rounds += 1
            if len(queue) == queued and rounds >= 2:
                break
        group = queue[: self.max_group]
        del queue[: len(group)]
        return group

    def _hand_off(self) -> None:
        """The next group's leader is the first append queued, if any."""
        if self._queue:
            leader = self._queue[0]
            leader.lead = True
            leader.woken.set()
        else:
            self._committing = False

    async def _commit_group(self, group: list[_Pending]) -> None:
        """One transaction of the group's records; each learns its outcome (see the
        module doc: a fence or a failure fails all of them, an abort is retried, a lost
        commit answer settled by reading the log back)."""
        producer = self.producer
        todo = group
        # Aborts are retried for at most the producer's delivery_timeout (then the
        # group fails with the last one): never a loop without end.
        clock = producer.seams()["clock"]
        give_up = clock.now() + producer.config.delivery_timeout
        try:
            while todo:
                self._check_alive("append")
                self.attempts += 1
                try:
                    handles = []
                    async with producer.transaction():
                        for index, p in enumerate(todo):
                            try:
                                handle = await producer.send(
                                    self.topic,
                                    p.value,
                                    key=p.key,
                                    headers=p.headers,
                                    partition=self.partition,
                                )
                            except KafkaError:
                                raise
                            except Exception as exc:  # a serializer's, an interceptor's
                                p.fail(exc)
                                raise _Refused(index) from exc
                            handles.append(handle)
                    acks: list[Acknowledged] = [await handle for handle in handles]
                except _Refused as bad:
                    # That append fails alone (its transaction aborted): the others go
                    # again without it.
                    todo = todo[: bad.index] + todo[bad.index + 1 :]
                    continue
                except (ProducerFencedError, FatalError) as exc:
                    # Only our EndTxn(commit) commits the transaction: if none was sent
                    # (fenced at AddPartitionsToTxn, the usual), there is nothing to look for.
                    sent = transaction_commit_sent(producer)
                    await self._settle_fenced(todo, exc, look=sent)
                    return
                except AmbiguousError:
                    # The commit's answer was lost: the producer re-initialises (which
                    # settles the outcome: committed or aborted) unless it was fenced.
                    self.ambiguous += 1
                    try:
                        await producer.init_transactions()
                    except (ProducerFencedError, FatalError) as fenced:
                        await self._settle_fenced(todo, fenced)
                        return
                    found = await self._find_all([p.sequence for p in todo])
                    for p in todo:
                        if p.sequence in found:
                            p.resolve(found[p.sequence])
                    todo = [p for p in todo if p.sequence not in found]
                    continue  # the rest were aborted: they did not happen, try again
                except AbortableError:
                    # Aborted: nothing of it is committed, and the group goes again,
                    # except an append whose record the broker refused for itself (too
                    # large for the topic, invalid): it fails alone (again, it would
                    # abort every retry, a hot loop no cancellation ended).
                    refused = _refused_alone(handles)
                    for index, error in refused.items():
                        todo[index].fail(error)
                    todo = [p for index, p in enumerate(todo) if index not in refused]
                    if not refused and clock.now() >= give_up:
                        raise
                    continue
                for p, ack in zip(todo, acks, strict=True):
                    p.resolve(ack)
                self.next_offset = self.last_read_end = acks[-1].offset + 1
                return
        except BaseException as exc:
            for p in group:
                p.fail(exc)
            raise

    async def _find(self, sequence: int) -> Acknowledged | None:
        """Our append `sequence` in the committed log since the last read, if there."""
        return (await self._find_all([sequence])).get(sequence)

    async def _find_all(self, sequences: list[int]) -> dict[int, Acknowledged]:
        """Our appends `sequences` found in the committed log since the last read.

        Judged from the transaction markers in the log itself (`committed_newest_first`:
        committed when the first marker of its producer id after it is a COMMIT), not
        from what a read_committed read returns: Tansu shows aborted records to
        read_committed readers (docs/compatibility.md), and the writer would take its own
        aborted append for committed. On Kafka the answer is the same: the transaction
        is complete, its markers written, once `init_transactions()` returned or a newer
        writer fenced this one. Newest first, in windows: the appends are near the end."""
        reader = self.reader
        topic, partition, start = self.topic, self.partition, self.last_read_end
        wanted = set(sequences)
        found: dict[int, Acknowledged] = {}
        high = await reader.log_end_offset(topic, partition)
        markers: dict[int, bool] = {}
        while high > start and wanted:
            low = max(start, high - _FIND_WINDOW)
            batches = await reader.batches(topic, partition, low, high, first=low == start)
            for record in committed_newest_first(batches, markers):
                writer, sequence = writer_of(record)
                if record.offset >= start and writer == self.writer_id and sequence in wanted:
                    wanted.discard(sequence)
                    found[sequence] = Acknowledged(
                        topic, partition, record.offset, record.timestamp
                    )
            high = low
        if found:
            end = max(ack.offset for ack in found.values()) + 1
            self.next_offset = self.last_read_end = max(self.last_read_end, end)
        return found

    async def _settle_fenced(
        self, group: list[_Pending], error: Exception, *, look: bool = True
    ) -> None:
        """A newer writer took the log (or the producer failed for good): the writer is
        dead either way. Did the group commit before that? (`look` False: it cannot
        have, no EndTxn(commit) of it was sent.) Committed, its appends are
        acknowledged, and the writer's next call raises `WriterFencedError`; otherwise
        each raises `WriterFencedError`."""
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
        found = await self._find_all([p.sequence for p in group]) if look else {}
        for p in group:
            if p.sequence in found:
                p.resolve(found[p.sequence])
                continue
            refused = WriterFencedError(
                f"{why} This writer's append (writer {self.writer_id.decode()}, sequence "
                f"{p.sequence}) was not committed, and this writer is dead: open a new "
                "writer (open_conditional_writer) and read on from last_read_end "
                f"({self.last_read_end}).",
                offset=-1,
            )
            refused.__cause__ = error
            p.fail(refused)

    async def settle_mismatch(self, expected: int, sequence: int) -> Acknowledged:
        """The log end is not `expected` any more: was the record there ours?"""
        record = await self.reader.read_at(self.topic, self.partition, expected)
        if record is not None and writer_of(record) == (self.writer_id, sequence):
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


class _Refused(Exception):
    """Ends a group's transaction when the producer refused append `index` (it failed
    with that error; the group goes again without it)."""

    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index


def _refused_alone(handles: list[Any]) -> dict[int, KafkaError]:
    """The records of an aborted transaction that failed for themselves (by index): an
    error that is neither the transaction's abort nor retriable (`RecordTooLargeError`
    for a record over the topic's `max.message.bytes`), or a broker's refusal of the
    record itself (INVALID_RECORD, INVALID_TIMESTAMP: `refuses_records`). The others
    failed because the transaction aborted, or were written into it."""
    refused: dict[int, KafkaError] = {}
    for index, handle in enumerate(handles):
        outcome = handle.outcome
        if not isinstance(outcome, Failed):
            continue
        error = outcome.error
        if refuses_records(error):
            if _named(handle):
                refused[index] = error
        elif not isinstance(error, AbortableError | RetriableError):
            refused[index] = error
    return refused


def _only_shared_a_refused_batch(handle: Any, error: KafkaError) -> bool:
    """`handle`'s record failed only because the broker refused another record of its
    batch for what that one holds (the batch refused whole, this record not named)."""
    return refuses_records(error) and not _named(handle)


def _named(handle: Any) -> bool:
    """A broker refusing a batch for what its records hold named this record (or named
    none: then every record of the batch is refused). A record it did not name failed
    only for sharing the batch (KIP-467)."""
    batch, index = handle.batch.located(handle.index)
    named = batch.record_errors
    return not named or index in named


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
    max_group: int = 128,
    group_linger: float = 0.0,
    tls: ssl.SSLContext | bool | None = None,
    sasl: SaslConfig | None = None,
    **producer_options: Any,
) -> AsyncIterator[ConditionalWriter]:
    """A `ConditionalWriter` on `topic`-`partition`.

    Pass `bootstrap=` (the writer opens its own producer: `linger=0`, `max_in_flight=1`
    so that concurrent appends share batches, idempotent, plus `producer_options`) or `producer=` (shared; its `linger` delays each append). With
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

    `max_group` and `group_linger` bound a transactional writer's group commit: the
    appends made while a commit runs are committed together in the next transaction, at
    most `max_group` of them, after waiting `group_linger` seconds for more (default 0:
    no added wait beyond letting the tasks woken with the leader append again). A CAS writer pipelines its concurrent appends instead.
    """
    if isinstance(max_group, bool) or not isinstance(max_group, int) or max_group < 1:
        raise ConfigError(f"max_group={max_group!r}: appends per commit, an int >= 1")
    if not isinstance(group_linger, (int, float)) or not group_linger >= 0:
        raise ConfigError(f"group_linger={group_linger!r}: seconds to wait, a number >= 0")
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
            # One request at a time: concurrent CAS appends made while it is out join the
            # next batch (consecutive expected offsets, one round trip) instead of each
            # taking a request of its own. One appender waits for each answer anyway.
            producer_options.setdefault("max_in_flight", 1)
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
        writer_producer = producer
        if guarantee == "transactional":
            writer_producer = await stack.enter_async_context(
                open_producer(
                    selector=selector,
                    # The producer's clocks, generator and harness: under the simulator,
                    # records stamped by time.time() would differ run to run.
                    **producer.seams(),
                    **transactional_options(producer),
                    transactional_id=log_transactional_id(topic, partition),
                )
            )
            await writer_producer.init_transactions()  # fences the previous writer
        writer = ConditionalWriter(
            writer_producer,
            # Raw: a transactional writer judges the markers itself.
            PartitionReader(selector),
            topic,
            partition,
            source().encode(),
            guarantee=guarantee,
            max_group=max_group,
            group_linger=group_linger,
            rules=writer_producer.seams()["harness"].rules,
        )
        try:
            yield writer
        finally:
            writer.closed = True


__all__ = [
    "SEQUENCE_HEADER",
    "WRITER_HEADER",
    "ConditionalWriter",
    "log_transactional_id",
    "open_conditional_writer",
    "writer_of",
]
