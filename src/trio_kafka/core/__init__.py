"""The sans-IO producer core: records, outcomes, partitioners, accumulator, sequencing.

Nothing here does I/O, reads a clock or draws its own randomness: time comes in as
`now` (float seconds, any monotonic clock), randomness from an injected object with
`random()` and `randrange(n)` (the shell passes a seeded `random.Random`).

The driver's recipe (what `client/` builds on top)
---------------------------------------------------

    core = ProducerCore(config, rng, wall_offset=time.time() - trio.current_time())
    core.update_metadata(ClusterView.from_leaders({"t": [1, 2, 1]}))  # every Metadata

send(topic, value, key=None, headers=None, partition=None, timestamp_ms=None):

    handle = core.append(topic, value, key, headers, partition, timestamp_ms, now)
    # None: buffer_memory is full. BLOCK: wait (up to max_block) until a call below
    #   reports `completed` > 0 and append again; DROP: fail with BufferFullError.
    # UnknownTopicError: fetch metadata for the topic (up to max_block), append again.
    # RecordTooLargeError / InvalidPartitionError: raise to the caller.
    # `core.append_many(topic, values, now)` -> (spans, taken) for bulk loads: one
    #   BatchSpan(batch, start, stop) per batch touched; span.handles() on demand.
    # `await handle`: register `handle.batch.add_done_hook(lambda b: event.set())`.

the sender loop (Java's runOnce, one pass):

    if core.fatal_error: core.fail_all(core.fatal_error); close.
    if core.needs_producer_id: InitProducerId(transactional_id=None, no id, no epoch)
        -> core.set_producer_id(pid, epoch, now)   (the first id, or after the epoch
        is exhausted; an epoch bump is the core's own, in expire(now): the same id)
    core.expire(now)   # expiry, unresolved sequences, a due epoch bump: the batches
                       # it returns are final (wake flush and blocked senders)
    nodes, delay, unknown = core.ready(now)   # refresh metadata for `unknown` topics
    for node, batches in core.drain(now, connected(nodes)).items():
        send ProduceRequest(acks, request_timeout, transactional_id,
                            topic_data=core.produce_data(batches))
        on response: settled = core.handle_response(node, batches,
                          {(topic, partition): partition_response, ...} or None if acks=0,
                          now)
        on connection lost / request timeout:
                     settled = core.handle_request_failure(node, batches, error, now)
        (sent=False when the request never left: nothing can have been written)
        settled.refresh_metadata -> request a metadata update
        settled.completed > 0     -> wake senders blocked on buffer room
        settled.leaders           -> KIP-951: put these current leaders (with the
                                     response's NodeEndpoints) in the metadata and
                                     hand the core the new view (retries go at once)
        response.throttle_time_ms -> KIP-219: send nothing more to that node until then
    sleep until min(delay, next response, metadata) or a send wakes it.

flush: core.begin_flush(); wait until not core.has_unfinished; core.end_flush().
close: core.close() (no more lingering), wait for `has_unfinished` to clear within
close_timeout, then core.fail_all(ProducerClosedError(...)).

Transactions: `txn = TransactionManager.from_config(config)`, then
`ProducerCore(config, rng, sequencing=Sequencer(is_transactional=True, hooks=txn))`; the
transaction is in `core/_transaction.py`. Its manager owns InitProducerId, so
`needs_producer_id` and `epoch_bump_due` stay False and the step above never runs.

A record's fate is its `DeliveryHandle`: `done()`, `outcome` (`Acknowledged`,
`Failed` -- not written --, `Ambiguous` -- may have been written --), `result()`,
`add_done_callback(fn)`. Completion is per batch: a handle is (batch, index).
"""

from __future__ import annotations

from trio_kafka.core._accumulator import BatchSpan
from trio_kafka.core._backoff import ExponentialBackoff
from trio_kafka.core._batch import DeliveryHandle, ProducerBatch
from trio_kafka.core._config import (
    BufferFullStrategy,
    ProducerConfig,
    TimeUnitWarning,
    must_be_flag,
    must_be_positive,
    must_be_str,
    must_not_be_negative,
)
from trio_kafka.core._core import Action, Decision, MetricsSnapshot, ProducerCore, Settled
from trio_kafka.core._load import (
    DEFAULT_BATCH_BYTES,
    LOAD_HEADER,
    LOADER_ROUTING,
    PARTITIONER,
    ROW_HEADER,
    Backend,
    EndMarker,
    LoadBatch,
    LoadPipeline,
    LoadRules,
    Row,
    Step,
    encode_routing,
    partition_of,
    routing_changes,
    routing_of,
    row_of,
    unrecorded,
)
from trio_kafka.core._partitioner import ClusterView, partition_for_key
from trio_kafka.core._record import (
    Acknowledged,
    Ambiguous,
    Failed,
    Headers,
    Outcome,
    ProducerRecord,
    Result,
    headers_size,
    record_size,
)
from trio_kafka.core._rules import Harness, MismatchSettler, Rules
from trio_kafka.core._sequencer import (
    PartitionSequence,
    Sequencer,
    SequenceVerdict,
    SequencingPolicy,
)
from trio_kafka.core._transaction import (
    Coordinator,
    CoordinatorType,
    GroupMetadata,
    OffsetAndMetadata,
    TransactionManager,
    TransactionRules,
    TxnRequest,
    TxnRequestKind,
    TxnResult,
    TxnState,
)

# What other packages of trio_kafka use (the client, the simulator, the network layer's
# backoff and option validators); everything else is private to the core.
__all__ = [
    "DEFAULT_BATCH_BYTES",
    "LOADER_ROUTING",
    "LOAD_HEADER",
    "PARTITIONER",
    "ROW_HEADER",
    "Acknowledged",
    "Action",
    "Ambiguous",
    "Backend",
    "BatchSpan",
    "BufferFullStrategy",
    "ClusterView",
    "Coordinator",
    "CoordinatorType",
    "Decision",
    "DeliveryHandle",
    "EndMarker",
    "ExponentialBackoff",
    "Failed",
    "GroupMetadata",
    "Harness",
    "Headers",
    "LoadBatch",
    "LoadPipeline",
    "LoadRules",
    "MetricsSnapshot",
    "MismatchSettler",
    "OffsetAndMetadata",
    "Outcome",
    "PartitionSequence",
    "ProducerBatch",
    "ProducerConfig",
    "ProducerCore",
    "ProducerRecord",
    "Result",
    "Row",
    "Rules",
    "SequenceVerdict",
    "Sequencer",
    "SequencingPolicy",
    "Settled",
    "Step",
    "TimeUnitWarning",
    "TransactionManager",
    "TransactionOutcomeUnknownError",
    "TransactionRules",
    "TransactionTimedOutError",
    "TxnRequest",
    "TxnRequestKind",
    "TxnResult",
    "TxnState",
    "encode_routing",
    "headers_size",
    "must_be_flag",
    "must_be_positive",
    "must_be_str",
    "must_not_be_negative",
    "partition_for_key",
    "partition_of",
    "record_size",
    "routing_changes",
    "routing_of",
    "row_of",
    "unrecorded",
]
