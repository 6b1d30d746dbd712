"""`ProducerCore`: what an answer, a lost request or time means for a batch, in one place.

Theory of operation: the driver's loop is Java's `Sender.runOnce` split in pure steps:
`expire(now)`, `ready(now)`, `drain(now, nodes)`, `encode(batch)`, then, when a request
comes back, `handle_response` (per-partition answers), `handle_request_failure` (the
request was lost, timed out, or never left) or `handle_unencodable`. The core owns the
accumulator (core/_accumulator.py), the sequencing policy (core/_sequencer.py)
and the metrics, and calls them; none of them calls back. Settling a request goes one
way: `_returned` takes each of its batches still in flight out of the accumulator's
counts, the core decides it (a `Decision`: complete, retry with or without a metadata
refresh, fail, or make ambiguous; the sequencer is told the outcome and may ask for an
epoch bump), and `_tally` sums the decisions into the `Settled` the driver acts on.

One classification of a partition's Produce outcome, `classify(code) -> Action`, serves
every writer that keeps its own order: this core (`_settle`, which refines it with what
only its batch can say: its sequence, its size, the sequencer's verdict on an idempotence
error) and the load pipeline (core/_load.py):

- `ACKNOWLEDGED`: NONE, and DUPLICATE_SEQUENCE_NUMBER (the broker already holds the
  batch: an earlier attempt landed; Tansu answers so for a recent duplicate).
- `RESOLVE_MISMATCH`: EXPECTED_OFFSET_MISMATCH. Nothing of this attempt was written, but
  an earlier attempt of the same batch may have been: read the log to know (the
  pipeline or the conditional writer says what to read).
- `NEW_PRODUCER_ID`: UNKNOWN_PRODUCER_ID, OUT_OF_ORDER_SEQUENCE_NUMBER: the broker lost
  (or never had) our producer state, so sequences must start again under a new id or
  epoch (for the core, the sequencer decides: `on_sequence_error`). Retrying with the
  same sequences would be refused forever.
- `REFRESH_AND_RETRY`: a code with `invalid_metadata` (NOT_LEADER_OR_FOLLOWER, ...):
  the leader moved; refresh the metadata, back off, resend the same batch.
- `RETRY`: other retriable codes, and a request that left without an answer
  (`code=None`): resend the same batch with the same sequence, so the broker's
  deduplication (and, for CAS, the expected offset) makes a landed attempt harmless.
- `FAIL`: anything else (a record too large, authorisation, a fatal producer error).

The table is data (`ACTIONS`) plus two rules (retriable, invalid metadata) read from
`errors.error_info`, so adding a code to Kafka's table classifies it without a change
here.

Also here: what a Produce answer looks like to the core (`PartitionResponseLike`, which
the protocol layer's `PartitionProduceResponse` fits), what the driver must do after a
request (`Settled`), the errors a batch ends with that need more words than the error
table's, and the counters (`ProducerMetrics`, read as a `MetricsSnapshot`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Protocol

import attrs

from trio_kafka.core._accumulator import ReadyResult, RecordAccumulator
from trio_kafka.core._backoff import ExponentialBackoff
from trio_kafka.core._batch import BatchState, DeliveryHandle, ProducerBatch
from trio_kafka.core._config import ProducerConfig
from trio_kafka.core._partitioner import ClusterView, RandomSource
from trio_kafka.core._record import Result
from trio_kafka.core._sequencer import (
    NoSequencing,
    Sequencer,
    SequencerRules,
    SequenceVerdict,
    SequencingPolicy,
    check_new_producer_id,
)
from trio_kafka.errors import (
    AmbiguousDeliveryTimeoutError,
    AmbiguousError,
    BrokerConnectionError,
    DeliveryTimeoutError,
    ErrorCode,
    ExpectedOffsetMismatchError,
    KafkaError,
    ProducerFencedError,
    RecordTooLargeError,
    RequestTimeoutError,
    TopicAuthorizationError,
    UnknownTopicError,
    error_for_code,
    error_info,
)
from trio_kafka.protocol import INTERNAL_TOPICS


class Action(enum.Enum):
    ACKNOWLEDGED = "acknowledged"
    RESOLVE_MISMATCH = "resolve-mismatch"
    NEW_PRODUCER_ID = "new-producer-id"
    REFRESH_AND_RETRY = "refresh-and-retry"
    RETRY = "retry"
    FAIL = "fail"


#: Codes whose action is not implied by the error table's retriable / invalid_metadata.
ACTIONS: dict[int, Action] = {
    ErrorCode.NONE: Action.ACKNOWLEDGED,
    ErrorCode.DUPLICATE_SEQUENCE_NUMBER: Action.ACKNOWLEDGED,
    ErrorCode.EXPECTED_OFFSET_MISMATCH: Action.RESOLVE_MISMATCH,
    ErrorCode.UNKNOWN_PRODUCER_ID: Action.NEW_PRODUCER_ID,
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER: Action.NEW_PRODUCER_ID,
}


def classify(code: int | None) -> Action:
    """The action for a partition's answer `code` (None: the request may have been
    applied but no answer came: a lost connection or a timeout)."""
    if code is None:
        return Action.RETRY
    action = ACTIONS.get(code)
    if action is not None:
        return action
    info = error_info(code)
    if info.invalid_metadata:
        return Action.REFRESH_AND_RETRY
    if info.retriable:
        return Action.RETRY
    return Action.FAIL


#: The actions that send the same batch again (unless the sequencer rules otherwise).
_RETRIED = frozenset({Action.RETRY, Action.REFRESH_AND_RETRY})


class Decision(enum.Enum):
    """What settling a batch did with it: sent again later, or final; and whether the
    answer says the metadata is stale (the driver then refreshes it)."""

    RETRY = "retry"  # back in its queue
    RETRY_REFRESH = "retry_refresh"  # back in its queue; refresh the metadata
    FINAL = "final"  # done (acknowledged, failed or ambiguous)
    FINAL_REFRESH = "final_refresh"  # done; refresh the metadata

    @property
    def retried(self) -> bool:
        return self is Decision.RETRY or self is Decision.RETRY_REFRESH

    @property
    def refresh(self) -> bool:
        return self is Decision.RETRY_REFRESH or self is Decision.FINAL_REFRESH


#: Answers that may name the partition's current leader (KIP-951, Produce v10+).
LEADER_MOVED = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH})


class RecordErrorLike(Protocol):
    @property
    def batch_index(self) -> int: ...
    @property
    def batch_index_error_message(self) -> str | None: ...


class PartitionResponseLike(Protocol):
    """What `handle_response` reads of a partition's answer: the protocol layer's
    `PartitionProduceResponse` fits, and so does `PartitionResponse`."""

    @property
    def error_code(self) -> int: ...
    @property
    def base_offset(self) -> int: ...
    @property
    def log_append_time_ms(self) -> int: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def record_errors(self) -> Sequence[RecordErrorLike]: ...
    @property
    def error_message(self) -> str | None: ...


@attrs.frozen(slots=True)
class RecordError:
    batch_index: int
    batch_index_error_message: str | None = None


@attrs.frozen(slots=True)
class PartitionResponse:
    """A partition's answer to a Produce request (for tests and other callers)."""

    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    record_errors: Sequence[RecordError] = ()
    error_message: str | None = None


@attrs.frozen(slots=True)
class Settled:
    """What the driver should do after handing back a request's results."""

    refresh_metadata: bool = False
    #: Batches that reached a final state (room came free: wake blocked senders).
    completed: int = 0
    retried: int = 0
    #: KIP-951: (topic, partition, leader id, leader epoch) a NOT_LEADER_OR_FOLLOWER or
    #: FENCED_LEADER_EPOCH answer named as the current leader (Produce v10+). The driver
    #: puts them in its metadata (with the response's NodeEndpoints) and hands the core
    #: the new view: the retries then go to the new leader at once, without backoff.
    leaders: tuple[tuple[str, int, int, int], ...] = ()


def _tally(decisions: Iterable[Decision], *, refresh: bool) -> Settled:
    """A request's `Settled` from the decisions on its batches (`refresh`: ask for
    metadata whatever they say)."""
    completed = retried = 0
    for decision in decisions:
        if decision.retried:
            retried += 1
        else:
            completed += 1
        refresh = refresh or decision.refresh
    return Settled(refresh, completed, retried)


def idempotent_epoch_refused(
    batch: ProducerBatch, code: int, message: str | None
) -> ProducerFencedError:
    """PRODUCER_FENCED for a batch of a non-transactional idempotent producer: with no
    transactional id there is no newer instance, so the broker refused our epoch bump."""
    return ProducerFencedError(
        code,
        f"the broker refused producer id {batch.producer_id} epoch "
        f"{batch.producer_epoch} for {batch.topic}-{batch.partition}"
        + (f" ({message})" if message else "")
        + ": a non-transactional idempotent producer bumps its epoch itself after "
        "a sequence gap or a lost request, as Java's does and Kafka accepts; this "
        "broker does not (Tansu refuses it). The producer stops rather than take "
        "a new producer id, under which a late request of the old one could land "
        "after newer records",
    )


def refused_as_too_large(batch: ProducerBatch, message: str | None) -> RecordTooLargeError:
    """MESSAGE_TOO_LARGE for a batch that cannot be split (see `ProducerCore._too_large`)."""
    what = "a record of" if batch.record_count == 1 else f"a batch of {batch.record_count} records,"
    return RecordTooLargeError(
        f"{what} {batch.size} bytes (estimated) for {batch.topic}-{batch.partition} is "
        f"larger than the broker accepts (MESSAGE_TOO_LARGE: the topic's "
        f"max.message.bytes or the broker's message.max.bytes)"
        + (f": {message}" if message else "")
    )


def record_errors_of(
    response: PartitionResponseLike, code: int, message: str | None
) -> dict[int, KafkaError] | None:
    """The errors the broker named per record (KIP-467), by index in the batch."""
    if not response.record_errors:
        return None
    hint = _RECORD_ERROR_HINTS.get(code, "")
    return {
        e.batch_index: error_for_code(code, (e.batch_index_error_message or message or "") + hint)
        for e in response.record_errors
    }


#: What Kafka's per-record message leaves out: which setting decides it.
_RECORD_ERROR_HINTS: dict[int, str] = {
    ErrorCode.INVALID_TIMESTAMP: (
        " (Kafka refuses a CreateTime timestamp further ahead of its clock than the "
        "topic's message.timestamp.after.max.ms, an hour by default in Kafka 4, or "
        "further behind it than message.timestamp.before.max.ms)"
    ),
}


def expired_error(batch: ProducerBatch, age: float) -> KafkaError:
    """A queued batch passed `delivery_timeout`: Ambiguous when an earlier attempt may
    have been written, else not written."""
    where = f"{batch.record_count} record(s) for {batch.topic}-{batch.partition}"
    if batch.maybe_written:
        return AmbiguousDeliveryTimeoutError(
            f"{where} expired after {age:.3f}s; an earlier attempt may have been written"
        )
    return DeliveryTimeoutError(f"{where} expired after {age:.3f}s without being written")


def ambiguous_end(batch: ProducerBatch, error: KafkaError, timed_out: bool) -> AmbiguousError:
    """The error a batch that may have been written ends with (`timed_out`: its
    delivery_timeout passed with a request in flight)."""
    if timed_out:
        return AmbiguousDeliveryTimeoutError(
            f"{batch.record_count} record(s) for {batch.topic}-{batch.partition}: "
            f"delivery_timeout passed with a request in flight ({error})"
        )
    return error if isinstance(error, AmbiguousError) else RequestTimeoutError(str(error))


def dropped_at_bump() -> AmbiguousError:
    """A batch dropped at an epoch bump (`Sequencer.new_producer_id`)."""
    return AmbiguousError(
        "the producer epoch was bumped while an earlier attempt of this batch "
        "may have been written; resending it under the new epoch could duplicate it"
    )


_RESERVOIR = 1024


@attrs.frozen(slots=True)
class MetricsSnapshot:
    records_sent: int
    records_acknowledged: int
    records_failed: int
    records_ambiguous: int
    record_retries: int
    batches_sent: int
    bytes_sent: int
    average_batch_size: float
    requests_sent: int
    request_latency_p50: float
    request_latency_p99: float
    request_latency_max: float
    buffer_in_use: int
    epoch_bumps: int
    #: Batches the broker refused as too large and the producer split (MESSAGE_TOO_LARGE).
    batch_splits: int = 0


class ProducerMetrics:
    """Counters (owned by the core; the driver reads `snapshot()`)."""

    def __init__(self) -> None:
        self.records_sent = 0
        self.records_acknowledged = 0
        self.records_failed = 0
        self.records_ambiguous = 0
        self.record_retries = 0
        self.batches_sent = 0
        self.bytes_sent = 0
        self.requests_sent = 0
        self.epoch_bumps = 0
        self.batch_splits = 0
        # The last _RESERVOIR request latencies (a ring), seconds.
        self._latencies: list[float] = []
        self._next = 0

    def count_drained(self, requests: Iterable[Sequence[ProducerBatch]]) -> None:
        """The batches of each request drained for sending (retries counted apart)."""
        for batches in requests:
            self.requests_sent += 1
            for batch in batches:
                self.batches_sent += 1
                self.records_sent += batch.record_count
                self.bytes_sent += batch.size
                if batch.attempts > 1:
                    self.record_retries += batch.record_count

    def record_latency(self, seconds: float) -> None:
        if len(self._latencies) < _RESERVOIR:
            self._latencies.append(seconds)
        else:
            self._latencies[self._next] = seconds
            self._next = (self._next + 1) % _RESERVOIR

    def snapshot(self, buffer_in_use: int = 0) -> MetricsSnapshot:
        ordered = sorted(self._latencies)

        def pct(q: float) -> float:
            if not ordered:
                return 0.0
            return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

        return MetricsSnapshot(
            records_sent=self.records_sent,
            records_acknowledged=self.records_acknowledged,
            records_failed=self.records_failed,
            records_ambiguous=self.records_ambiguous,
            record_retries=self.record_retries,
            batches_sent=self.batches_sent,
            bytes_sent=self.bytes_sent,
            average_batch_size=self.bytes_sent / self.batches_sent if self.batches_sent else 0.0,
            requests_sent=self.requests_sent,
            request_latency_p50=pct(0.5),
            request_latency_p99=pct(0.99),
            request_latency_max=ordered[-1] if ordered else 0.0,
            buffer_in_use=buffer_in_use,
            epoch_bumps=self.epoch_bumps,
            batch_splits=self.batch_splits,
        )


_COMPRESSION = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

#: Answers that may come after the leader appended the batch. With acks=all Kafka appends
#: first and then waits for the in-sync replicas (its DelayedProduce): the wait ends
#: NOT_ENOUGH_REPLICAS_AFTER_APPEND (appended to fewer replicas than asked),
#: REQUEST_TIMED_OUT (timeout_ms passed; the followers may still copy the batch) or
#: NOT_LEADER_OR_FOLLOWER (the leader stepped down; the follower that took over may hold
#: it). Such a batch is retried (the retry is deduplicated) and never ends Failed. Under
#: acks=1 only the first follows an append (the others are answered before it).
_FEWER_REPLICAS = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
MAYBE_APPENDED = frozenset(
    {_FEWER_REPLICAS, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_LEADER_OR_FOLLOWER}
)


class CoreRules(SequencerRules):
    """The core's part of the rules (core/_rules.py gathers them into `Rules`); it
    includes its sequencer's, which the core hands on."""

    def lost_request(
        self, core: ProducerCore, batch: ProducerBatch, now: float, error: KafkaError
    ) -> Decision:
        """A request carrying `batch` left and got no answer: it may have been written;
        resent with the same sequence (deduplicated), or Ambiguous."""
        batch.may_have_been_written()
        return core.lost(batch, now, error)

    def requeue(self, core: ProducerCore, batch: ProducerBatch, now: float) -> None:
        """`batch` is retried: back to the front of its queue, in sequence order, with
        its sequence kept."""
        core.requeue(batch, now)

    def give_up_lost(
        self, core: ProducerCore, batch: ProducerBatch, now: float, error: KafkaError
    ) -> Decision:
        """A batch without a definite answer can no longer be retried (its delivery
        timeout passed with a request in flight, or retries ran out): Ambiguous."""
        return core.end_ambiguous(batch, now, error)

    def answered_after_append(
        self, core: ProducerCore, batch: ProducerBatch, now: float, code: int, message: str | None
    ) -> Decision | None:
        """An error that may come after the leader appended the batch (`MAYBE_APPENDED`):
        it may be retried (deduplicated), never called Failed. None: go on deciding by
        the error table (a retry)."""
        batch.may_have_been_written()
        return None

    def behind_failed_cas(self, core: ProducerCore, failed: ProducerBatch) -> None:
        """A CAS batch ended unwritten or Ambiguous: the CAS batches of its partition
        that expected offsets past its own are never attempted again (their expected
        offsets assumed its records; a resend under a new epoch would land after records
        their writer never saw, if another writer's exactly filled the gap)."""
        core.fail_behind(failed)


class ProducerCore:
    """The sans-IO producer (see `trio_kafka.core` for the driver's recipe)."""

    def __init__(
        self,
        config: ProducerConfig,
        rng: RandomSource,
        *,
        sequencing: SequencingPolicy | None = None,
        cluster: ClusterView | None = None,
        wall_offset: float = 0.0,
        handle_class: type[DeliveryHandle] = DeliveryHandle,
        rules: CoreRules | None = None,
    ) -> None:
        self.config = config
        self.rng = rng
        self._backoff = ExponentialBackoff.of(config)
        #: The decisions where a wrong rule loses or duplicates writes (core/_rules.py).
        self.rules = CoreRules() if rules is None else rules
        if sequencing is None:
            sequencing = (
                Sequencer(is_transactional=config.transactional_id is not None, rules=self.rules)
                if config.enable_idempotence
                else NoSequencing()
            )
        self.sequencing = sequencing
        self.metrics = ProducerMetrics()
        self.accumulator = RecordAccumulator(
            config, rng, sequencing, cluster, wall_offset, handle_class
        )
        # The hot path, bound once: `core.append(...)` is the accumulator's.
        self.append = self.accumulator.append
        self.append_many = self.accumulator.append_many
        self.append_record = self.accumulator.append_record
        self._compression = _COMPRESSION[config.compression]
        # Set when the producer cannot go on: the driver closes it.
        self.fatal_error: KafkaError | None = None
        # CAS batches in flight behind a failed one (`fail_behind`): never retried.
        self._behind_failed_cas: set[ProducerBatch] = set()

    def __repr__(self) -> str:
        return f"<ProducerCore {self.accumulator!r} {self.sequencing!r}>"

    # -- metadata, producer id -------------------------------------------------------

    def update_metadata(self, cluster: ClusterView) -> None:
        self.accumulator.update_cluster(cluster)

    @property
    def cluster(self) -> ClusterView:
        return self.accumulator.cluster

    @property
    def needs_producer_id(self) -> bool:
        """Idempotent and no producer id yet: run InitProducerId, then `set_producer_id`.
        Always False when the policy owns InitProducerId (a transactional producer: the
        transaction manager runs it and hands the driver the id to install)."""
        seq = self.sequencing
        return seq.enabled and not seq.owns_producer_id and seq.producer_id < 0

    @property
    def epoch_bump_due(self) -> bool:
        """An epoch bump was requested and no produce request is in flight any more (a
        request of the old epoch could otherwise land after the new one's records). The
        core applies it itself in `ready(now)` (see `bump_epoch_locally`); always False
        when the policy owns InitProducerId (see `needs_producer_id`)."""
        seq = self.sequencing
        return (
            seq.epoch_bump_required
            and not seq.owns_producer_id
            and not self.accumulator.node_in_flight
        )

    def set_producer_id(
        self, producer_id: int, producer_epoch: int, now: float
    ) -> list[ProducerBatch]:
        """Install the answer of InitProducerId (or a bumped epoch of the same id).
        Returns the batches that ended Ambiguous (see `Sequencer.new_producer_id`).
        While an epoch bump is pending and our id can still be bumped, only the next
        epochs of the same id are taken: a new producer id would not fence the old one's
        late requests (ValueError: a driver bug)."""
        check_new_producer_id(self.sequencing, producer_id, producer_epoch)
        bumped = self.sequencing.epoch_bump_required
        dropped = self.sequencing.new_producer_id(producer_id, producer_epoch)
        if bumped and producer_id >= 0:
            self.metrics.epoch_bumps += 1
        for batch in dropped:
            self.accumulator.batches.remove(batch)
            self.finish_ambiguous(batch, dropped_at_bump())
        return dropped

    def bump_epoch_locally(self, now: float) -> list[ProducerBatch]:
        """Apply a due epoch bump on the client side, as Java's idempotent producer does
        (`bumpIdempotentEpochAndResetIdIfNeeded`): the same producer id, the next epoch,
        sequences from 0. `expire(now)` calls it; nothing happens unless
        `epoch_bump_due`. Returns the batches it ended (Ambiguous: an earlier attempt
        may have been written, and a new epoch cannot deduplicate a resend). Never a new
        producer id while the current one can be bumped (seeds 709627, 901616, 904005):
        docs/design.md, "The idempotent producer bumps its epoch itself" says why.
        """
        seq = self.sequencing
        if not self.epoch_bump_due or seq.producer_id < 0 or self.fatal_error is not None:
            return []
        producer_id, epoch = self.rules.epoch_bump(seq)
        return self.set_producer_id(producer_id, epoch, now)

    # -- the send loop ---------------------------------------------------------------

    def ready(self, now: float) -> ReadyResult:
        return self.accumulator.ready(now)

    def drain(
        self, now: float, nodes: Iterable[int], max_request_size: int | None = None
    ) -> dict[int, list[ProducerBatch]]:
        drained = self.accumulator.drain(now, nodes, max_request_size)
        self.metrics.count_drained(drained.values())
        return drained

    def split_request(self, node: int, parts: int) -> None:
        """`drain`'s request for `node` goes out as `parts` (BUGGIFY): each settles on
        its own, so each counts as in flight (an epoch bump waits for all: 10816290)."""
        self.accumulator.batches.requests_started(node, parts - 1)

    def encode(self, batch: ProducerBatch, *, cas_broker: bool = True) -> bytes:
        """The record batch bytes for `batch`'s PartitionProduceData.records;
        `cas_broker`: the leader has the CAS extension (`ProducerBatch.encode`)."""
        return batch.encode(self._compression, self.config.compression_level, cas_broker=cas_broker)

    def produce_data(
        self, batches: Iterable[ProducerBatch], *, cas_broker: bool = True
    ) -> dict[str, list[tuple[int, bytes]]]:
        """topic -> [(partition, records bytes)] for one ProduceRequest to a leader with
        (`cas_broker`) or without the CAS extension."""
        data: dict[str, list[tuple[int, bytes]]] = {}
        for batch in batches:
            data.setdefault(batch.topic, []).append(
                (batch.partition, self.encode(batch, cas_broker=cas_broker))
            )
        return data

    def expire(self, now: float) -> list[ProducerBatch]:
        """What time and settled requests decide, at the top of each pass (Java's
        `maybeResolveSequences`, `bumpIdempotentEpochAndResetIdIfNeeded` and expiry):
        fail queued batches past `delivery_timeout` (in-flight ones wait for their
        request to come back: Ambiguous only then, if it cannot be retried), settle
        partitions left unresolved, and apply a due epoch bump. Returns every batch
        that reached a final state (wake whoever waits for progress)."""
        expired = self.accumulator.batches.expire(now)
        for batch in expired:
            error = expired_error(batch, now - batch.created)
            self.sequencing.on_final(batch, gap=False, error=error)
            if isinstance(error, AmbiguousError):
                self.finish_ambiguous(batch, error)
            else:
                self.finish_failed(batch, error)
        seq = self.sequencing
        seq.resolve_sequences()
        if seq.epoch_bump_required:
            dropped = self.bump_epoch_locally(now)
            if dropped:
                expired = [*expired, *dropped]
        return expired

    # -- responses -------------------------------------------------------------------

    def handle_response(
        self,
        node: int,
        batches: Sequence[ProducerBatch],
        responses: Mapping[tuple[str, int], PartitionResponseLike] | None,
        now: float,
    ) -> Settled:
        """A Produce response for the request `drain` gave for `node`.

        `responses` maps (topic, partition) to its answer; None for acks=0 (nothing
        comes back: the records are reported with offset -1).
        """
        leaders: list[tuple[str, int, int, int]] = []
        settled = _tally(
            (
                self._answered(batch, node, responses, now, leaders)
                for batch in self._returned(node, batches)
            ),
            refresh=False,
        )
        return attrs.evolve(settled, leaders=tuple(leaders)) if leaders else settled

    def handle_request_failure(
        self,
        node: int,
        batches: Sequence[ProducerBatch],
        error: KafkaError,
        now: float,
        *,
        sent: bool = True,
    ) -> Settled:
        """The request got no answer: connection lost or request timeout (`sent=True`:
        it may have been processed), or it never left (`sent=False`)."""
        returned = self._returned(node, batches)
        if sent:
            decisions = (self.rules.lost_request(self, batch, now, error) for batch in returned)
        else:
            decisions = (self.retry_or_fail(batch, now, error, refresh=True) for batch in returned)
        return _tally(decisions, refresh=True)

    def handle_unencodable(
        self,
        node: int,
        batches: Sequence[ProducerBatch],
        errors: Mapping[int, KafkaError],
        now: float,
    ) -> Settled:
        """The request for `batches` could not be built: the batches whose `id()` is in
        `errors` cannot be encoded and fail alone (a record `send()` should have
        refused); the others never left and go back to their queues. One bad batch must
        never take the producer (and every other record) down with it."""
        return _tally(
            (
                self._unencodable(batch, errors.get(id(batch)), now)
                for batch in self._returned(node, batches)
            ),
            refresh=False,
        )

    def _returned(self, node: int, batches: Sequence[ProducerBatch]) -> Iterator[ProducerBatch]:
        """The batches of a request to `node` still in flight, each taken out of the
        accumulator's in-flight counts just before the caller settles it (the first one
        also takes the request out of `node`'s count; none left in flight: a late
        duplicate of a settled request, which counts nothing)."""
        queues = self.accumulator.batches
        counted = False
        for batch in batches:
            if batch.state is not BatchState.IN_FLIGHT:
                continue
            if not counted:
                queues.request_done(node)
                counted = True
            queues.settle_in_flight(batch)
            yield batch

    def _answered(
        self,
        batch: ProducerBatch,
        node: int,
        responses: Mapping[tuple[str, int], PartitionResponseLike] | None,
        now: float,
        leaders: list[tuple[str, int, int, int]],
    ) -> Decision:
        """One batch of an answered request (`leaders` gathers the KIP-951 leaders)."""
        self.metrics.record_latency(now - batch.last_attempt)
        if responses is None:
            self._finish_ok(batch, -1, -1)
            return Decision.FINAL
        response = responses.get((batch.topic, batch.partition))
        if response is None:
            # A broker that does not answer for a partition it was sent: treat as
            # a lost response for that batch (it may have been appended).
            batch.may_have_been_written()
            return self.lost(batch, now, KafkaError("no answer for this partition"))
        if response.error_code in LEADER_MOVED:
            leader = getattr(response, "current_leader", None)
            if leader is not None and leader.leader_id >= 0 and leader.leader_id != node:
                leaders.append(
                    (batch.topic, batch.partition, leader.leader_id, leader.leader_epoch)
                )
        return self._settle(batch, response, now)

    def _unencodable(self, batch: ProducerBatch, error: KafkaError | None, now: float) -> Decision:
        """One batch of a request that could not be built (`error`: this one's)."""
        if error is None:
            not_sent = BrokerConnectionError(
                "not sent: another batch of the same request could not be encoded"
            )
            return self.retry_or_fail(batch, now, not_sent, refresh=False)
        self.sequencing.on_final(batch, gap=not batch.maybe_written, error=error)
        self.finish_failed(batch, error)
        return Decision.FINAL

    def _can_retry(self, batch: ProducerBatch, now: float) -> bool:
        return (
            now - batch.created < self.config.delivery_timeout
            and batch.attempts <= self.config.retries
            and self.fatal_error is None
            and batch not in self._behind_failed_cas
        )

    def backoff(self, attempts: int) -> float:
        """The backoff before a batch's next attempt, after `attempts` (the one backoff,
        core/_backoff.py: KIP-580, jittered from the injected rng)."""
        return self._backoff.backoff(attempts - 1, self.rng)

    def _retry(self, batch: ProducerBatch, now: float) -> None:
        self.rules.requeue(self, batch, now)

    # -- the settle actions (each decision in core/_rules.py ends in one) ---------

    def requeue(self, batch: ProducerBatch, now: float) -> None:
        """Back to the front of its queue in sequence order, sendable after a backoff."""
        self.sequencing.on_retry(batch)
        self.accumulator.reenqueue(batch, now, self.backoff(batch.attempts))

    def lost(self, batch: ProducerBatch, now: float, error: KafkaError) -> Decision:
        """No definite answer: retry with the same sequence and epoch, or Ambiguous."""
        if self._can_retry(batch, now):
            self._retry(batch, now)
            return Decision.RETRY_REFRESH
        return self.rules.give_up_lost(self, batch, now, error)

    def end_ambiguous(self, batch: ProducerBatch, now: float, error: KafkaError) -> Decision:
        """A batch that may have been written and can no longer be retried."""
        timed_out = now - batch.created >= self.config.delivery_timeout
        cause = ambiguous_end(batch, error, timed_out)
        self.sequencing.on_final(batch, gap=False, error=cause)
        self.finish_ambiguous(batch, cause)
        return Decision.FINAL

    def retry_or_fail(
        self, batch: ProducerBatch, now: float, error: KafkaError, *, refresh: bool
    ) -> Decision:
        if self._can_retry(batch, now):
            self._retry(batch, now)
            return Decision.RETRY_REFRESH if refresh else Decision.RETRY
        if now - batch.created >= self.config.delivery_timeout and not batch.maybe_written:
            error = DeliveryTimeoutError(f"delivery_timeout passed; last error: {error}")
        self.sequencing.on_final(batch, gap=not batch.maybe_written, error=error)
        self.finish_failed(batch, error)
        return Decision.FINAL_REFRESH if refresh else Decision.FINAL

    def _settle(
        self, batch: ProducerBatch, response: PartitionResponseLike, now: float
    ) -> Decision:
        """Java's `Sender.completeBatch` + `canRetry`, for one partition's answer: the
        code's `Action` (`classify`, the one table, which the load pipeline reads too),
        refined by what only this producer's batch can say (its sequence, its size, what
        the sequencer makes of an idempotence error)."""
        code = response.error_code
        action = classify(code)
        if action is Action.ACKNOWLEDGED:
            if code == ErrorCode.NONE:
                batch.answered(response.base_offset)
                self.sequencing.on_success(batch)
                self._finish_ok(batch, response.base_offset, response.log_append_time_ms)
                return Decision.FINAL
            if batch.base_sequence >= 0:
                # DUPLICATE_SEQUENCE_NUMBER: the broker holds this sequence already but
                # no longer its offset. (For a batch without a sequence: the error.)
                batch.answered(-1)
                self.sequencing.on_success(batch)
                self._finish_ok(batch, -1, -1)
                return Decision.FINAL
        message = response.error_message
        if action is Action.RESOLVE_MISMATCH:
            # Nothing of this attempt was written: the batch fails with the mismatch,
            # and the conditional writer reads the log to resolve it.
            mismatch = ExpectedOffsetMismatchError(
                message,
                expected_offset=batch.expected_offset,
                log_end_offset=response.base_offset,
            )
            self.sequencing.on_final(batch, gap=True, error=mismatch)
            self.finish_failed(batch, mismatch)
            return Decision.FINAL
        if code == ErrorCode.MESSAGE_TOO_LARGE:
            return self._too_large(batch, message, now)
        if code in MAYBE_APPENDED and (self.config.acks == -1 or code == _FEWER_REPLICAS):
            decided = self.rules.answered_after_append(self, batch, now, code, message)
            if decided is not None:
                return decided
        if code == ErrorCode.INVALID_TOPIC_EXCEPTION and batch.topic in INTERNAL_TOPICS:
            message = (
                f"topic {batch.topic!r} is internal to Kafka (its group coordinator's or "
                "transaction coordinator's): brokers take no records for it from a producer"
            )
        if code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            error: KafkaError = TopicAuthorizationError(topic=batch.topic)
        else:
            error = error_for_code(code, message)
        if (
            code == ErrorCode.PRODUCER_FENCED
            and batch.base_sequence >= 0
            and not self.sequencing.is_transactional
        ):
            # No transactional id, so no newer instance: the broker refused the epoch.
            error = idempotent_epoch_refused(batch, code, message)
        verdict = self.sequencing.on_sequence_error(batch, code, response.log_start_offset)
        retriable = (
            action in _RETRIED
            if verdict is SequenceVerdict.BY_ERROR_TABLE
            else verdict is SequenceVerdict.RETRY
        )
        if error_info(code).fatal:
            self.set_fatal(error)
            retriable = False
        refresh = action is Action.REFRESH_AND_RETRY
        if retriable:
            return self.retry_or_fail(batch, now, error, refresh=refresh)
        record_errors = record_errors_of(response, code, message)
        if record_errors and self._send_the_others(batch, record_errors, now):
            return Decision.RETRY
        self.sequencing.on_final(batch, gap=not batch.maybe_written, error=error)
        self.finish_failed(batch, error, record_errors)
        return Decision.FINAL_REFRESH if refresh else Decision.FINAL

    def _send_the_others(
        self, batch: ProducerBatch, record_errors: dict[int, KafkaError], now: float
    ) -> bool:
        """The broker refused `batch` for some of its records and named them (KIP-467:
        INVALID_RECORD, e.g. a record without a key for a compacted topic): those fail,
        each with its own error, and the others are sent again in their order (True).
        Java fails the whole batch; one bad record should not fail the records that
        happened to share its batch. Not done (False: the batch fails whole, as before)
        for a CAS batch (its records land together at the expected offset or not at
        all), a transactional one (the transaction must abort anyway), a batch an
        earlier attempt of which may have been written, or when every record is named.

        The refused records leave a hole in the partition's sequences: as for any batch
        that certainly failed unwritten, the partition is rewritten under a new epoch,
        the other records first, in their order (`Sequencer.on_final`)."""
        refused = sorted(i for i in record_errors if 0 <= i < batch.record_count)
        if (
            not refused
            or len(refused) == batch.record_count
            or batch.expected_offset >= 0
            or batch.maybe_written
            or self.sequencing.is_transactional
            or self.fatal_error is not None
        ):
            return False
        pieces, apart = self.accumulator.batches.set_aside(batch, refused, now)
        self.sequencing.on_split(batch, pieces)
        for index in refused:
            error = record_errors[index]
            self.sequencing.on_final(apart[index], gap=True, error=error)
            self.finish_failed(apart[index], error)
        return True

    def _too_large(self, batch: ProducerBatch, message: str | None, now: float) -> Decision:
        """MESSAGE_TOO_LARGE (Java's `Sender.completeBatch`): a batch of several records
        is split and its pieces sent again (not counted as a retry); a single record the
        broker will not take fails alone with `RecordTooLargeError`. Never split: a CAS
        batch (its records must land together at the expected offset or not at all) and
        a batch an earlier attempt of which may have been written (pieces would reuse
        its sequences with other boundaries, which the broker cannot deduplicate)."""
        if (
            batch.record_count > 1
            and not batch.maybe_written
            and batch.expected_offset < 0
            and self.fatal_error is None
        ):
            pieces = self.accumulator.batches.split_and_reenqueue(batch, now)
            self.sequencing.on_split(batch, pieces)
            self.metrics.batch_splits += 1
            return Decision.RETRY
        error = refused_as_too_large(batch, message)
        self.sequencing.on_final(batch, gap=not batch.maybe_written, error=error)
        self.finish_failed(batch, error)
        return Decision.FINAL

    def fail_behind(self, failed: ProducerBatch) -> None:
        """`failed`, a CAS batch, ended unwritten or Ambiguous: every unfinished CAS
        batch of its partition expecting an offset past `failed`'s fails. Those queued
        (new, or waiting for a retry) fail now, never sent (again); those in flight fail
        when their answer comes back, unless it is a success (`_can_retry`). Failed, not
        Ambiguous, unless an earlier attempt may have been written. The last first, so
        that each finds nothing queued behind it."""
        tp = (failed.topic, failed.partition)
        queue = self.accumulator.batches.queues.get(tp, ())
        for batch in [b for b in reversed(queue) if b.expected_offset > failed.expected_offset]:
            if batch.result is not None:
                continue  # failed already, behind one failed in this loop
            error = ExpectedOffsetMismatchError(
                f"not sent: the CAS batch before it on {tp[0]}-{tp[1]} (expected offset "
                f"{failed.expected_offset}) failed ({failed.error}), and this "
                f"one's expected offset ({batch.expected_offset}) assumed its records",
                expected_offset=batch.expected_offset,
                log_end_offset=-1,  # no broker compared it
            )
            self._fail_queued(batch, error)
        sequencing = self.sequencing
        entry = sequencing.partitions.get(tp) if isinstance(sequencing, Sequencer) else None
        for batch in entry.inflight if entry is not None else ():
            if batch.expected_offset > failed.expected_offset:
                self._behind_failed_cas.add(batch)

    def withdraw(self, batch: ProducerBatch, error: KafkaError) -> bool:
        """Fail `batch` unsent if it is queued and was never drained (False, and nothing
        done, once it is in flight or done): for a CAS append whose writer learned, while
        it waited to append (a leader check, room in the buffer), that an append before
        it failed. `fail_behind` ran before this one was appended, so it did not see it;
        sent, it would land if the log end happened to be its expected offset, after
        records its writer never read."""
        if batch.result is not None or batch.attempts or batch.maybe_written:
            return False
        queue = self.accumulator.batches.queues.get((batch.topic, batch.partition), ())
        if batch not in queue:
            return False
        self._fail_queued(batch, error)
        return True

    def _fail_queued(self, batch: ProducerBatch, error: KafkaError) -> None:
        """A queued batch ends now, failed, never sent (again)."""
        self.accumulator.batches.remove(batch)
        batch.seal()
        self.sequencing.on_final(batch, gap=not batch.maybe_written, error=error)
        self.finish_failed(batch, error)

    # -- final states ----------------------------------------------------------------

    def _finish_ok(self, batch: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        if batch.complete(base_offset, log_append_time):
            self.metrics.records_acknowledged += batch.record_count
            self.accumulator.release(batch)
            if self._behind_failed_cas:
                self._behind_failed_cas.discard(batch)

    def finish_failed(
        self,
        batch: ProducerBatch,
        error: KafkaError,
        record_errors: dict[int, KafkaError] | None = None,
    ) -> None:
        if batch.fail(error, record_errors):
            if batch.result is Result.FAILED:
                self.metrics.records_failed += batch.record_count
            else:
                self.metrics.records_ambiguous += batch.record_count
            self._finished_unwritten(batch)

    def finish_ambiguous(self, batch: ProducerBatch, error: AmbiguousError) -> None:
        if batch.fail_ambiguous(error):
            self.metrics.records_ambiguous += batch.record_count
            self._finished_unwritten(batch)

    def _finished_unwritten(self, batch: ProducerBatch) -> None:
        """`batch` failed or ended Ambiguous: its buffer goes back, and a CAS batch's
        failure reaches the CAS batches behind it (`CoreRules.behind_failed_cas`)."""
        self.accumulator.release(batch)
        self._behind_failed_cas.discard(batch)
        if batch.expected_offset >= 0:
            self.rules.behind_failed_cas(self, batch)

    def set_fatal(self, error: KafkaError) -> None:
        """The producer cannot go on: `error` is kept (the first one only) and the
        sequencing policy hears of it."""
        if self.fatal_error is None:
            self.fatal_error = error
            self.sequencing.on_fatal(error)

    def fail_all(self, error: KafkaError) -> int:
        """Fail every queued batch (closing without flush, or after a fatal error): with
        `error` if never sent, else Ambiguous; in-flight ones settle when they return."""
        batches = self.accumulator.batches.take_all_queued()
        for batch in batches:
            self.sequencing.on_final(batch, gap=False, error=error)
            self.finish_failed(batch, error)
        return len(batches)

    def fail_topic(self, topic: str, reason: str) -> list[ProducerBatch]:
        """`topic` no longer exists (its metadata says so, `reason`): fail its queued
        batches with `UnknownTopicError` (Ambiguous if an earlier attempt may have been
        written); in-flight ones settle when they return, and are failed here the next
        time. Returns the batches failed."""
        batches = self.accumulator.batches.take_topic(topic)
        for batch in batches:
            error = UnknownTopicError(
                f"{reason}: {batch.record_count} record(s) for {topic}-{batch.partition} "
                "were not written",
                topic=topic,
            )
            self.sequencing.on_final(batch, gap=False, error=error)
            self.finish_failed(batch, error)
        return batches

    # -- flush, close, metrics -------------------------------------------------------

    def begin_flush(self) -> None:
        self.accumulator.flushing += 1

    def end_flush(self) -> None:  # (flushes nest: each begin has its end)
        self.accumulator.flushing -= 1

    def close(self) -> None:
        """Stop lingering: everything queued becomes sendable at once."""
        self.accumulator.closed = True

    @property
    def has_unfinished(self) -> bool:
        """Queued or in-flight batches remain (flush and close wait for False)."""
        return self.accumulator.has_undrained or bool(self.accumulator.node_in_flight)

    def metrics_snapshot(self) -> MetricsSnapshot:
        return self.metrics.snapshot(self.accumulator.buffer_used)
