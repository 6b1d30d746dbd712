"""The checker against a real mock-broker cluster, in process: raw requests (encoded and
decoded by the real codec) go to the broker's handlers; the snapshot of its logs checks
clean, then a tampered log or a tampered history is caught."""

from __future__ import annotations

from typing import Any

import attrs

from trio_kafka.broker import ClusterOptions, ClusterState
from trio_kafka.broker._context import RequestContext
from trio_kafka.broker.handlers import HANDLERS
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol import decode_request, encode_request
from trio_kafka.protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from trio_kafka.protocol.messages.end_txn import EndTxnRequest
from trio_kafka.protocol.messages.fetch import FetchPartition, FetchRequest, FetchTopic
from trio_kafka.protocol.messages.init_producer_id import InitProducerIdRequest
from trio_kafka.protocol.messages.produce import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from trio_kafka.records import BatchBuilder, ControlType, decode_batches, parse_control_record
from trio_kafka.sim.checker import ViolationKind, check, snapshot_cluster
from trio_kafka.sim.history import History, Ok, Produce, TxnBegin, TxnCommit
from trio_kafka.sim.history import TxnAbort as TxnAbortOp

NOW = 1_700_000_000_000


@attrs.define
class Client:
    """Raw requests to node 0, through the wire codec."""

    state: ClusterState
    correlation: int = 0

    def call(self, request: Any, version: int) -> Any:
        self.correlation += 1
        frame = encode_request(
            request, version=version, correlation_id=self.correlation, client_id="checker"
        )
        header, decoded = decode_request(frame[4:])
        handler = HANDLERS[header.api_key]
        return handler.handle(RequestContext(self.state, 0, header), decoded)

    def init(self, transactional_id: str | None) -> tuple[int, int]:
        r = self.call(InitProducerIdRequest(transactional_id, 60_000), 4)
        assert r.error_code == ErrorCode.NONE
        return r.producer_id, r.producer_epoch

    def produce(
        self,
        topic: str,
        partition: int,
        values: list[bytes],
        *,
        pid: int,
        epoch: int,
        seq: int,
        txn: str | None = None,
    ) -> int:
        builder = BatchBuilder()
        for v in values:
            builder.append(NOW, None, v)
        data = builder.build(
            base_offset=-1,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=txn is not None,
        )
        req = ProduceRequest(
            transactional_id=txn,
            acks=-1,
            timeout_ms=1000,
            topic_data=[TopicProduceData(topic, [PartitionProduceData(partition, data)])],
        )
        (answer,) = self.call(req, 9).responses[0].partition_responses
        assert answer.error_code == ErrorCode.NONE, answer
        return int(answer.base_offset)

    def add_partitions(self, txn: str, pid: int, epoch: int, parts: list[tuple[str, int]]) -> None:
        topics: dict[str, list[int]] = {}
        for topic, index in parts:
            topics.setdefault(topic, []).append(index)
        req = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=txn,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[AddPartitionsToTxnTopic(t, p) for t, p in topics.items()],
        )
        self.call(req, 3)

    def end(self, txn: str, pid: int, epoch: int, *, commit: bool) -> None:
        r = self.call(EndTxnRequest(txn, pid, epoch, commit), 3)
        assert r.error_code == ErrorCode.NONE

    def read_committed(self, topic: str, partition: int) -> list[tuple[int, bytes | None]]:
        """What a read_committed consumer returns: up to the LSO, aborted data dropped."""
        req = FetchRequest(
            max_wait_ms=0,
            min_bytes=0,
            isolation_level=1,
            topics=[
                FetchTopic(
                    topic=topic,
                    partitions=[
                        FetchPartition(partition, fetch_offset=0, partition_max_bytes=1 << 20)
                    ],
                )
            ],
        )
        (data,) = self.call(req, 11).responses[0].partitions
        aborted = {(a.producer_id, a.first_offset) for a in data.aborted_transactions or []}
        dropping: set[int] = set()
        out = []
        for batch in decode_batches(data.records or b""):
            pid = batch.producer_id
            if batch.is_control:
                if parse_control_record(batch.records[0]).type is ControlType.ABORT:
                    dropping.discard(pid)
                continue
            if any(p == pid and first <= batch.base_offset for p, first in aborted):
                dropping.add(pid)
                aborted = {(p, f) for p, f in aborted if not (p == pid and f <= batch.base_offset)}
            if pid in dropping:
                continue
            out += [(r.offset, r.value) for r in batch.records]
        return out


def run_workload(history: History) -> tuple[ClusterState, Client]:
    """An idempotent writer on t-0 and a transactional writer (one commit, one abort)."""
    state = ClusterState([0], ClusterOptions(), clock=lambda: NOW)
    state.create_topic("t", 2)
    client = Client(state)

    pid, epoch = client.init(None)
    for n in range(3):
        values = [f"w1-{2 * n}".encode(), f"w1-{2 * n + 1}".encode()]
        ops = [history.invoke(Produce("w1", "t", 0, v)) for v in values]
        base = client.produce("t", 0, values, pid=pid, epoch=epoch, seq=2 * n)
        for i, op in enumerate(ops):
            history.complete(op, Ok(0, base + i))

    tpid, tepoch = client.init("tx-w2")
    seqs = {0: 0, 1: 0}
    for name, commit in (("w2-t1", True), ("w2-t2", False)):
        history.complete(history.invoke(TxnBegin("w2", name)), Ok())
        client.add_partitions("tx-w2", tpid, tepoch, [("t", 0), ("t", 1)])
        for partition in (0, 1):
            value = f"{name}-p{partition}".encode()
            op = history.invoke(Produce("w2", "t", partition, value, txn=name))
            base = client.produce(
                "t", partition, [value], pid=tpid, epoch=tepoch, seq=seqs[partition], txn="tx-w2"
            )
            seqs[partition] += 1
            history.complete(op, Ok(partition, base))
        end = TxnCommit("w2", name) if commit else TxnAbortOp("w2", name)
        end_id = history.invoke(end)
        client.end("tx-w2", tpid, tepoch, commit=commit)
        history.complete(end_id, Ok())
    return state, client


def reads(client: Client) -> dict[tuple[str, int], list[tuple[int, bytes | None]]]:
    return {("t", p): client.read_committed("t", p) for p in (0, 1)}


def test_a_correct_run_against_the_mock_broker_checks_clean() -> None:
    history = History()
    state, client = run_workload(history)
    committed = reads(client)
    assert b"w2-t2-p0" not in {
        v for _, v in committed[("t", 0)]
    }  # the reader really drops aborted data
    result = check(history, snapshot_cluster(state), committed_reads=committed)
    assert result.ok, result.render()
    assert result.counters["records"] == 10
    assert result.counters["markers"] == 4
    assert result.counters["txn.committed"] == result.counters["txn.aborted"] == 1


def test_a_batch_stored_twice_is_a_duplicate() -> None:
    history = History()
    state, _ = run_workload(history)
    part = state.partition("t", 0)
    assert part is not None
    first = part.log.batches[0]
    # A broker that forgot its dedup window appends a retried batch again.
    part.log.append(
        first.data,
        record_count=2,
        producer_id=first.producer_id,
        producer_epoch=first.producer_epoch,
    )
    result = check(history, snapshot_cluster(state))
    assert ViolationKind.DUPLICATE in result.kinds
    assert ViolationKind.SEQUENCE_GAP in result.kinds  # the copy's sequence repeats
    assert result.failure_class is ViolationKind.DUPLICATE


def test_a_wrong_reported_offset_is_caught() -> None:
    history = History()
    state, _ = run_workload(history)
    lied = History()
    for o in history:
        op_id = lied.invoke(o.op)
        outcome = o.outcome
        assert outcome is not None
        if isinstance(o.op, Produce) and o.op.value == b"w1-3" and isinstance(outcome, Ok):
            outcome = Ok(outcome.partition, (outcome.offset or 0) + 1)
        lied.complete(op_id, outcome)
    result = check(lied, snapshot_cluster(state))
    assert result.kinds == {ViolationKind.WRONG_OFFSET}, result.render()


def test_an_open_transaction_at_the_end_is_hanging() -> None:
    history = History()
    state, client = run_workload(history)
    tpid, tepoch = client.init("tx-w3")
    history.complete(history.invoke(TxnBegin("w3", "w3-t1")), Ok())
    client.add_partitions("tx-w3", tpid, tepoch, [("t", 1)])
    op = history.invoke(Produce("w3", "t", 1, b"w3-t1-p1", txn="w3-t1"))
    base = client.produce("t", 1, [b"w3-t1-p1"], pid=tpid, epoch=tepoch, seq=0, txn="tx-w3")
    history.complete(op, Ok(1, base))
    result = check(history, snapshot_cluster(state))
    assert result.kinds == {ViolationKind.HANGING_TRANSACTION}, result.render()
    # Both the undecided batch and the stuck last stable offset are reported.
    assert len(result.violations) == 2
