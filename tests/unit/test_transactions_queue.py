"""The transaction's request queue, a component its manager owns: order, backoff,
coordinator lookups and stale answers, without a transaction behind it."""

from __future__ import annotations

from trio_kafka.core._transaction import (
    Coordinator,
    CoordinatorType,
    Priority,
    TxnRequestKind,
    TxnRequestQueue,
    Work,
)

K = TxnRequestKind
IDS = ("tid", 7, 3)


def test_the_head_is_the_highest_priority_then_the_oldest() -> None:
    queue = TxnRequestQueue()
    end = Work(K.END_TXN, Priority.END_TXN, committed=True)
    first_add = Work(K.ADD_OFFSETS, Priority.ADD_PARTITIONS_OR_OFFSETS)
    second_add = Work(K.ADD_OFFSETS, Priority.ADD_PARTITIONS_OR_OFFSETS)
    for work in (end, first_add, second_add):
        queue.enqueue(work)
    assert queue.head() is first_add
    queue.remove(first_add)
    assert queue.head() is second_add


def test_a_lookup_forgets_the_coordinator_and_queues_one_find_coordinator() -> None:
    queue = TxnRequestQueue()
    queue.coordinator_found(CoordinatorType.TRANSACTION, "tid", Coordinator(1, "h", 9092))
    assert queue.coordinator == Coordinator(1, "h", 9092)
    queue.lookup_coordinator(CoordinatorType.TRANSACTION, "tid")
    queue.lookup_coordinator(CoordinatorType.TRANSACTION, "tid")
    assert queue.coordinator is None
    finds = queue.keep_only(lambda work: work.kind is not K.FIND_COORDINATOR)
    assert [(w.key_type, w.key) for w in finds] == [(CoordinatorType.TRANSACTION, "tid")]


def test_retries_back_off_exponentially_up_to_the_maximum() -> None:
    queue = TxnRequestQueue(retry_backoff=0.1, retry_backoff_max=0.35)
    work = Work(K.END_TXN, Priority.END_TXN)
    waits = []
    for _ in range(4):
        queue.retry(work, now=10.0)
        waits.append(round(work.not_before - 10.0, 6))
        queue.remove(work)
    assert waits == [0.1, 0.2, 0.35, 0.35]
    queue.retry(work, now=10.0, backoff=0.02)
    assert work.not_before == 10.02


def test_only_the_request_in_flight_can_be_answered() -> None:
    queue = TxnRequestQueue()
    work = Work(K.END_TXN, Priority.END_TXN, committed=True)
    queue.enqueue(work)
    coordinator = Coordinator(1, "h", 9092)
    request = queue.start(work, coordinator, 3, IDS, transaction_timeout=60.0)
    assert queue.head() is None
    assert (request.producer_id, request.producer_epoch, request.coordinator) == (7, 3, coordinator)
    assert queue.answered(request)
    assert not queue.answered(request)  # a second answer for it is stale


def test_the_negotiated_version_caps_ours_and_a_missing_api_has_none() -> None:
    queue = TxnRequestQueue(add_partitions_max_version=3)
    assert queue.version_of(K.ADD_PARTITIONS) == 3
    queue.set_api_versions({24: 2, 26: 5}, transaction_version=2)  # AddPartitions, EndTxn
    assert queue.version_of(K.ADD_PARTITIONS) == 2
    assert queue.version_of(K.END_TXN) == 5
    assert queue.version_of(K.ADD_OFFSETS) is None
    assert queue.transaction_version == 2


def test_end_txn_stays_below_v5_without_transactions_v2() -> None:
    # EndTxn v5 asks for KIP-890's epoch bump; Kafka 4.4 bumps on a v1 cluster too, and
    # the next transaction's AddPartitionsToTxn (old epoch) was answered PRODUCER_FENCED.
    queue = TxnRequestQueue()
    queue.set_api_versions({26: 5}, transaction_version=1)
    assert queue.version_of(K.END_TXN) == 4
    queue.set_api_versions({26: 5}, transaction_version=2)
    assert queue.version_of(K.END_TXN) == 5


def test_end_txn_v5_is_used_only_under_transactions_v2() -> None:
    # Apache Kafka 4.4 with transaction.version 0 answered our EndTxn v5 with
    # UNSUPPORTED_VERSION (v5 belongs to KIP-890's transactions v2), stopping the producer.
    queue = TxnRequestQueue()
    for level, expected in ((None, 4), (0, 4), (1, 4), (2, 5)):
        queue.set_api_versions({26: 5}, transaction_version=level)
        assert queue.version_of(K.END_TXN) == expected, level
