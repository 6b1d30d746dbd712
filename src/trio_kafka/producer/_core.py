"""`ProducerCore`: the accumulator, the sequencing policy and the response handler together.

Theory of operation: the driver's loop is Java's `Sender.runOnce` split in pure steps:
`expire(now)`, `ready(now)`, `drain(now, nodes)`, `encode(batch)`, then, when a request
comes back, `handle_response` (per-partition answers) or `handle_request_failure` (the
request was lost, timed out, or never left). Every decision about a batch is taken
here, in one place (`_settle`): complete, retry (with or without a metadata refresh),
request an epoch bump, fail, or make ambiguous.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import attrs

from trio_kafka.errors import (
    AmbiguousError,
    BrokerConnectionError,
    DeliveryTimeoutError,
    ErrorCode,
    ExpectedOffsetMismatchError,
    KafkaError,
    error_for_code,
    error_info,
)
from trio_kafka.producer._accumulator import RecordAccumulator
from trio_kafka.producer._backoff import ExponentialBackoff
from trio_kafka.producer._batch import ProducerBatch
from trio_kafka.producer._cluster import ClusterView
from trio_kafka.producer._config import ProducerConfig
from trio_kafka.producer._handle import DeliveryHandle
from trio_kafka.producer._metrics import MetricsSnapshot, ProducerMetrics
from trio_kafka.producer._partitioner import RandomSource
from trio_kafka.producer._queues import ReadyResult
from trio_kafka.producer._record import Result
from trio_kafka.producer._responses import (
    LEADER_MOVED,
    Decision,
    PartitionResponseLike,
    Settled,
    ambiguous_end,
    dropped_at_bump,
    expired_error,
    idempotent_epoch_refused,
    record_errors_of,
    refused_as_too_large,
)
from trio_kafka.producer._rule_context import rules_for
from trio_kafka.producer._sequencer import (
    NoSequencing,
    Sequencer,
    SequencerRules,
    SequenceVerdict,
    SequencingPolicy,
)
from trio_kafka.producer._sequencing import check_new_producer_id

_COMPRESSION = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


class CoreRules(SequencerRules):
    """The core's part of the rules (producer/_rules.py gathers them into `Rules`); it
    includes its sequencer's, which the core hands on."""

    def lost_request(
        self, core: ProducerCore, batch: ProducerBatch, now: float, error: KafkaError
    ) -> Decision:
        """A request carrying `batch` left and got no answer: it may have been written;
        resent with the same sequence (deduplicated), or Ambiguous."""
        batch.maybe_written = True
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

    def written_to_fewer_replicas(
        self, core: ProducerCore, batch: ProducerBatch, now: float, code: int, message: str | None
    ) -> Decision | None:
        """NOT_ENOUGH_REPLICAS_AFTER_APPEND: the broker appended the batch, to fewer
        replicas than asked; it may be retried (deduplicated), never called Failed.
        None: go on deciding by the error table (a retry)."""
        batch.maybe_written = True
        return None

    def behind_failed_cas(self, core: ProducerCore, failed: ProducerBatch) -> None:
        """A CAS batch ended unwritten or Ambiguous: the CAS batches of its partition
        that expected offsets past its own are never attempted again (their expected
        offsets assumed its records; a resend under a new epoch would land after records
        their writer never saw, if another writer's exactly filled the gap)."""
        core.fail_behind(failed)


class ProducerCore:
    """The sans-IO producer (see `trio_kafka.producer` for the driver's recipe)."""

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
        #: The decisions where a wrong rule loses or duplicates writes (producer/_rules.py).
        self.rules = rules_for(CoreRules) if rules is None else rules
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

        def settle(batch: ProducerBatch) -> Decision:
            self.metrics.record_latency(now - batch.last_attempt)
            if responses is None:
                self._finish_ok(batch, -1, -1)
                return Decision.FINAL
            response = responses.get((batch.topic, batch.partition))
            if response is None:
                # A broker that does not answer for a partition it was sent: treat as
                # a lost response for that batch (it may have been appended).
                batch.maybe_written = True
                return self.lost(batch, now, KafkaError("no answer for this partition"))
            if response.error_code in LEADER_MOVED:
                leader = getattr(response, "current_leader", None)
                if leader is not None and leader.leader_id >= 0 and leader.leader_id != node:
                    leaders.append(
                        (batch.topic, batch.partition, leader.leader_id, leader.leader_epoch)
                    )
            return self._settle(batch, response, now)

        settled = self.accumulator.batches.settle_request(node, batches, settle, refresh=False)
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

        def settle(batch: ProducerBatch) -> Decision:
            if sent:
                return self.rules.lost_request(self, batch, now, error)
            return self.retry_or_fail(batch, now, error, refresh=True)

        return self.accumulator.batches.settle_request(node, batches, settle, refresh=True)

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

        def settle(batch: ProducerBatch) -> Decision:
            error = errors.get(id(batch))
            if error is None:
                not_sent = BrokerConnectionError(
                    "not sent: another batch of the same request could not be encoded"
                )
                return self.retry_or_fail(batch, now, not_sent, refresh=False)
            self.sequencing.on_final(batch, gap=not batch.maybe_written, error=error)
            self.finish_failed(batch, error)
            return Decision.FINAL

        return self.accumulator.batches.settle_request(node, batches, settle, refresh=False)

    def _can_retry(self, batch: ProducerBatch, now: float) -> bool:
        return (
            now - batch.created < self.config.delivery_timeout
            and batch.attempts <= self.config.retries
            and self.fatal_error is None
            and batch not in self._behind_failed_cas
        )

    def backoff(self, attempts: int) -> float:
        """The backoff before a batch's next attempt, after `attempts` (the one backoff,
        producer/_backoff.py: KIP-580, jittered from the injected rng)."""
        return self._backoff.backoff(attempts - 1, self.rng)

    def _retry(self, batch: ProducerBatch, now: float) -> None:
        self.rules.requeue(self, batch, now)

    # -- the settle actions (each decision in producer/_rules.py ends in one) ---------

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
        """Java's `Sender.completeBatch` + `canRetry`, for one partition's answer."""
        code = response.error_code
        if code == ErrorCode.NONE:
            batch.base_offset = response.base_offset
            self.sequencing.on_success(batch)
            self._finish_ok(batch, response.base_offset, response.log_append_time_ms)
            return Decision.FINAL
        if code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER and batch.base_sequence >= 0:
            # The broker holds this sequence already but no longer its offset.
            batch.base_offset = -1
            self.sequencing.on_success(batch)
            self._finish_ok(batch, -1, -1)
            return Decision.FINAL
        info = error_info(code)
        message = response.error_message
        if code == ErrorCode.MESSAGE_TOO_LARGE:
            return self._too_large(batch, message, now)
        if code == ErrorCode.EXPECTED_OFFSET_MISMATCH:
            mismatch = ExpectedOffsetMismatchError(
                message,
                expected_offset=batch.expected_offset,
                log_end_offset=response.base_offset,
            )
            self.sequencing.on_final(batch, gap=True, error=mismatch)
            self.finish_failed(batch, mismatch)
            return Decision.FINAL
        if code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND:
            # Written, to fewer replicas than asked: retry (dedup makes it safe); it can
            # never be reported as failed.
            decided = self.rules.written_to_fewer_replicas(self, batch, now, code, message)
            if decided is not None:
                return decided
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
            info.retriable
            if verdict is SequenceVerdict.BY_ERROR_TABLE
            else verdict is SequenceVerdict.RETRY
        )
        if info.fatal:
            self.set_fatal(error)
            retriable = False
        if retriable:
            return self.retry_or_fail(batch, now, error, refresh=info.invalid_metadata)
        record_errors = record_errors_of(response, code, message)
        self.sequencing.on_final(batch, gap=not batch.maybe_written, error=error)
        self.finish_failed(batch, error, record_errors)
        return Decision.FINAL_REFRESH if info.invalid_metadata else Decision.FINAL

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
            self.accumulator.batches.remove(batch)
            batch.seal()
            self.sequencing.on_final(batch, gap=not batch.maybe_written, error=error)
            self.finish_failed(batch, error)
        sequencing = self.sequencing
        entry = sequencing.partitions.get(tp) if isinstance(sequencing, Sequencer) else None
        for batch in entry.inflight if entry is not None else ():
            if batch.expected_offset > failed.expected_offset:
                self._behind_failed_cas.add(batch)

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


__all__ = ["CoreRules", "ProducerCore"]
