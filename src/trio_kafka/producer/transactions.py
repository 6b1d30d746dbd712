"""The transaction state machine of a transactional producer (KIP-98, sans-IO).

Theory of operation
-------------------
`TransactionManager` owns what a transactional producer knows about its transaction: the
transactional id, the producer id and epoch, the coordinators (the transaction
coordinator of our id; the group coordinator of each consumer group whose offsets we
commit), the partitions added to the transaction, and a queue of coordinator requests.
It never does I/O: the caller's methods (`init`, `begin`, `commit`, `abort`,
`send_offsets`) change the state and queue work; the driver takes requests out with
`next_request(now)` and feeds back `handle_response` or `handle_failure`.

States are `TxnState`; every move goes through `transition`, checked against one
table, `ALLOWED`. The life of a transaction: UNINITIALIZED -> INITIALIZING (FindCoordinator,
InitProducerId) -> READY -> IN_TRANSACTION (partitions added as batches become ready;
offsets sent) -> COMMITTING or ABORTING (EndTxn) -> READY. Errors:

- abortable (a batch failed, a topic is not authorised, TRANSACTION_ABORTABLE...):
  ABORTABLE_ERROR; `commit()` raises the error, `abort()` works and the next
  transaction may begin. After a failed batch the sequences may have gaps, so the abort
  also bumps the epoch (KIP-360: InitProducerId with the current id and epoch, after
  EndTxn). Transactions v2 (KIP-890) need no extra request: EndTxn itself bumps.
- fatal (PRODUCER_FENCED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_TXN_STATE, ...):
  FATAL_ERROR; every later call raises the same error; close the producer.
- ambiguous: an EndTxn(commit) that left and got no answer. The commit result fails with
  `TransactionOutcomeUnknownError` and the manager goes COMMITTING -> INITIALIZING,
  resends the same EndTxn at the same epoch until the coordinator answers (Kafka answers
  a repeated EndTxn from the transaction's state, and a v2 coordinator recognises the
  retry), then bumps the epoch, so a late EndTxn (still in the network, or retried by a
  broker) carries a fenced epoch and can never commit a later transaction (KAFKA-17754,
  the Jepsen/Bufstream finding). Not a bump at once: Kafka's coordinator fences a KIP-360
  bump that finds the transaction still open (prepareFenceProducerEpoch keeps no last
  epoch), which the simulator found once the mock broker answered as Kafka does
  (transactional seed 3001759). `begin()` is refused until that is done: await `init()`
  (it returns the bump's result). An EndTxn(abort) without answer is resent the same way.

INVALID_PRODUCER_EPOCH (decision, after KIP-588): from a partition leader (a failed
batch) it is `TransactionTimedOutError`, abortable: the broker aborted our transaction
after `transaction_timeout` and bumped the epoch. `abort()` then skips EndTxn (our
epoch is stale) and sends InitProducerId with the old id and epoch. Kafka's coordinator
fenced that epoch when it aborted the timed-out transaction and answers PRODUCER_FENCED
(fatal), as it does when another producer took over; the error names the timeout it saw.
From the coordinator it is the same when InitProducerId v4+ is negotiated (those
coordinators say PRODUCER_FENCED for a real fence), and fatal otherwise (older
coordinators used it for fencing), as Java does.

Requests are sent one at a time, in Java's priority order: FindCoordinator, then
InitProducerId, then AddPartitionsToTxn / AddOffsetsToTxn / TxnOffsetCommit, then EndTxn,
then an epoch-bumping InitProducerId; equal priorities in queue order. EndTxn and the
bump wait until the producer has no unfinished batch. An EndTxn for a transaction that
added nothing is completed locally. NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE forget
the coordinator (FindCoordinator goes first again); COORDINATOR_LOAD_IN_PROGRESS,
CONCURRENT_TRANSACTIONS and other retriable codes retry after an exponential backoff.
A response to anything but the request in flight is stale and ignored.

Transactions v2 (KIP-890 part 2), when the driver reports `transaction.version` >= 2
and EndTxn v5+ is negotiated: partitions join the transaction with the Produce request
(no AddPartitionsToTxn), and EndTxn answers with the producer id and epoch to use next.

The driver (client/)
--------------------
::

    txn = TransactionManager.from_config(config)
    core = ProducerCore(config, rng, sequencing=TransactionalSequencer(txn))
    txn.set_api_versions(info.negotiated, transaction_version=info.finalized_level(
        "transaction.version"))                      # after ApiVersions, and on changes

    # the coordinator loop, in the sender task, each pass:
    if (error := txn.undrained_error()) is not None: core.fail_all(error)
    request = txn.next_request(now, batches_unfinished=core.has_unfinished)
    if request is not None:   # request.coordinator: a Coordinator, or None = any node
        node = request.coordinator.node_id if request.coordinator else least_loaded
        try: response = await selector.request(node, request.message,
                                                version=request.version)
        except KafkaError as e:   # sent=False when it never left (BrokerConnectionError)
            update = txn.handle_failure(request, e, now, sent=...)
        else: update = txn.handle_response(request, response, now)
        if update.new_producer_id: core.set_producer_id(*update.new_producer_id, now)
    sleep until txn.poll_delay(now), a batch completes, or the user calls something.

    # user calls: `await` = wait for TxnResult.add_done_callback, then .result()
    await txn.init(); txn.begin(); send(...); await txn.send_offsets(offsets, group)
    await txn.commit()   # or await txn.abort()

With a `TransactionalSequencer` the core's `needs_producer_id` and `epoch_bump_due` are
always False (`owns_producer_id`): the manager owns InitProducerId, so the idempotent
producer's InitProducerId step of the sender loop never runs behind its back. The
manager is in `_txn_manager.py`, its request queue (a component: `manager.requests`) in
`_txn_queue.py`, the response handlers in `_txn_handlers.py`.
The request builders and readers (`find_coordinator`, `init_producer_id`,
`add_partitions_to_txn`, ...) are exported here too, for code that talks to a
coordinator without a manager (the Spark writer's per-task transactions).
"""

from __future__ import annotations

from trio_kafka.producer._txn_manager import TransactionManager, TransactionRules
from trio_kafka.producer._txn_requests import (
    add_partitions_to_txn,
    find_coordinator,
    init_producer_id,
    read_add_partitions_to_txn,
    read_find_coordinator,
)
from trio_kafka.producer._txn_state import ALLOWED, TxnState
from trio_kafka.producer._txn_types import (
    Coordinator,
    CoordinatorType,
    GroupMetadata,
    IllegalTransactionStateError,
    OffsetAndMetadata,
    Priority,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionOutcomeUnknownError,
    TransactionTimedOutError,
    TxnRequest,
    TxnRequestKind,
    TxnResult,
    TxnUpdate,
)

__all__ = [
    "ALLOWED",
    "Coordinator",
    "CoordinatorType",
    "GroupMetadata",
    "IllegalTransactionStateError",
    "OffsetAndMetadata",
    "Priority",
    "TransactionAbortableError",
    "TransactionAbortedError",
    "TransactionManager",
    "TransactionOutcomeUnknownError",
    "TransactionRules",
    "TransactionTimedOutError",
    "TxnRequest",
    "TxnRequestKind",
    "TxnResult",
    "TxnState",
    "TxnUpdate",
    "add_partitions_to_txn",
    "find_coordinator",
    "init_producer_id",
    "read_add_partitions_to_txn",
    "read_find_coordinator",
]
