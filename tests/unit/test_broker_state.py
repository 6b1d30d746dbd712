"""The broker's pure state: logs, cluster-level transactions, groups, SASL sessions."""

from __future__ import annotations

import itertools

import scramp

from trio_kafka.broker._groups import CommittedOffset, GroupCoordinator
from trio_kafka.broker._log import AbortedTxn, PartitionLog
from trio_kafka.broker._sasl import SaslConfig, SaslSession, SaslStage
from trio_kafka.broker._state import ClusterOptions, ClusterState
from trio_kafka.broker._txn import TransactionState
from trio_kafka.errors import ErrorCode
from trio_kafka.records import BatchBuilder, ControlType, decode_batches, parse_control_record

T0 = 1_700_000_000_000


def batch(n: int = 1, *, pid: int = -1, epoch: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    b = BatchBuilder()
    for i in range(n):
        b.append(T0 + i, None, b"x")
    return b.build(producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


# -- the log -------------------------------------------------------------------------


def test_last_stable_offset_follows_the_oldest_open_transaction() -> None:
    log = PartitionLog()
    log.append(b"\0" * 61, record_count=2)
    log.append(b"\0" * 61, record_count=3, producer_id=1, is_transactional=True)
    log.append(b"\0" * 61, record_count=1, producer_id=2, is_transactional=True)
    assert (log.high_watermark, log.last_stable_offset) == (6, 2)
    log.end_transaction(1, marker_offset=6, committed=False)
    assert log.last_stable_offset == 5
    assert log.aborted == [AbortedTxn(1, 2, 6)]
    log.end_transaction(2, marker_offset=7, committed=True)
    assert log.last_stable_offset == log.high_watermark
    assert log.aborted_in_range(0, 3) == [AbortedTxn(1, 2, 6)]
    assert log.aborted_in_range(7, 9) == []


def test_read_returns_whole_batches_and_always_the_first() -> None:
    log = PartitionLog()
    for _ in range(4):
        log.append(b"\0" * 100, record_count=2)
    assert [b.base_offset for b in log.read(3, 1)] == [2]  # over max_bytes, still returned
    assert [b.base_offset for b in log.read(3, 250)] == [2, 4]
    assert [b.base_offset for b in log.read(0, 10_000, upper=4)] == [0, 2]
    assert log.read(8, 10_000) == []


# -- transactions across the cluster -------------------------------------------------


def _cluster(**options: object) -> tuple[ClusterState, Clock]:
    clock = Clock()
    ids = itertools.count(100)
    state = ClusterState([0], ClusterOptions(**options), clock=clock)  # type: ignore[arg-type]
    state.txn.next_producer_id = lambda: next(ids)
    state.create_topic("t", 2)
    return state, clock


def _open_txn(state: ClusterState, now: int) -> tuple[int, int]:
    r = state.txn.init_producer_id("tx", 10_000, now)
    assert (
        state.txn.add_partitions("tx", r.producer_id, r.producer_epoch, [("t", 0), ("t", 1)], now)
        is ErrorCode.NONE
    )
    part = state.partition("t", 0)
    assert part is not None
    out = part.produce(
        batch(2, pid=r.producer_id, epoch=r.producer_epoch, seq=0, txn=True),
        state.topics["t"].config,
        now,
    )
    assert out.error is ErrorCode.NONE
    return r.producer_id, r.producer_epoch


def test_timeout_writes_abort_markers_with_a_bumped_epoch_and_fences() -> None:
    state, clock = _cluster()
    pid, epoch = _open_txn(state, clock.now)
    clock.now += 9_999
    state.tick()
    assert state.txn.txns["tx"].state is TransactionState.ONGOING
    clock.now += 1
    state.tick()
    assert state.txn.txns["tx"].state is TransactionState.COMPLETE_ABORT
    for index in (0, 1):
        part = state.partition("t", index)
        assert part is not None
        control = decode_batches(part.log.batches[-1].data)
        (marker,) = list(control)
        assert marker.is_control
        assert (marker.producer_id, marker.producer_epoch) == (pid, epoch + 1)
        assert parse_control_record(marker.records[0]).type is ControlType.ABORT
        assert part.log.last_stable_offset == part.log.high_watermark
    p0 = state.partition("t", 0)
    assert p0 is not None
    assert p0.log.aborted[0].first_offset == 0
    late = p0.produce(
        batch(1, pid=pid, epoch=epoch, seq=2, txn=True), state.topics["t"].config, clock.now
    )
    assert late.error is ErrorCode.INVALID_PRODUCER_EPOCH
    assert state.txn.end_txn("tx", pid, epoch, True, clock.now).error is ErrorCode.PRODUCER_FENCED


def test_marker_delay_keeps_the_transaction_prepared_meanwhile() -> None:
    state, clock = _cluster(marker_delay_ms=500)
    pid, epoch = _open_txn(state, clock.now)
    r = state.txn.end_txn("tx", pid, epoch, True, clock.now)
    assert r.markers is not None
    state.start_markers(r.markers)
    assert state.txn.txns["tx"].state is TransactionState.PREPARE_COMMIT
    assert (
        state.txn.end_txn("tx", pid, epoch, True, clock.now).error
        is ErrorCode.CONCURRENT_TRANSACTIONS
    )
    assert (
        state.txn.add_partitions("tx", pid, epoch, [("t", 0)], clock.now)
        is ErrorCode.CONCURRENT_TRANSACTIONS
    )
    clock.now += 500
    state.tick()
    assert state.txn.txns["tx"].state is TransactionState.COMPLETE_COMMIT
    p0 = state.partition("t", 0)
    assert p0 is not None
    assert p0.log.last_stable_offset == 3


def test_transactional_offsets_commit_with_the_marker() -> None:
    state, clock = _cluster()
    pid, epoch = _open_txn(state, clock.now)
    state.txn.add_group("tx", pid, epoch, "g", clock.now)
    state.groups.commit_pending("g", pid, "t", 0, CommittedOffset(42))
    assert state.groups.fetch("g", "t", 0, require_stable=True) == (
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
        None,
    )
    assert state.groups.fetch("g", "t", 0, require_stable=False) == (ErrorCode.NONE, None)
    r = state.txn.end_txn("tx", pid, epoch, True, clock.now)
    assert r.markers is not None
    state.start_markers(r.markers)
    error, offset = state.groups.fetch("g", "t", 0, require_stable=True)
    assert error is ErrorCode.NONE
    assert offset is not None and offset.offset == 42


def test_aborted_transaction_drops_its_offsets() -> None:
    groups = GroupCoordinator(next_member_suffix=itertools.count().__next__)
    groups.commit_pending("g", 7, "t", 0, CommittedOffset(5))
    groups.end_transaction("g", 7, commit=False)
    assert groups.fetch("g", "t", 0, require_stable=True) == (ErrorCode.NONE, None)


def test_topic_creation_rules_and_round_robin_leaders() -> None:
    state = ClusterState([0, 1, 2], clock=lambda: T0)
    assert state.create_topic("a", 4) == (ErrorCode.NONE, None)
    assert [p.leader for p in state.topics["a"].partitions] == [0, 1, 2, 0]
    assert state.create_topic("a", 1)[0] is ErrorCode.TOPIC_ALREADY_EXISTS
    assert state.create_topic("bad name!", 1)[0] is ErrorCode.INVALID_TOPIC_EXCEPTION
    assert state.create_topic("z", 0)[0] is ErrorCode.INVALID_PARTITIONS
    assert state.create_topic("c", 1, {"max.message.bytes": "x"})[0] is ErrorCode.INVALID_CONFIG


def test_a_replication_factor_the_brokers_cannot_hold_is_refused_as_kafka_refuses_it() -> None:
    state = ClusterState([0, 1, 2], clock=lambda: T0)
    for factor in (-1, 1, 3):
        assert state.create_topic(f"rf{factor}", 1, replication_factor=factor)[0] is ErrorCode.NONE
    for factor in (0, -2):
        error, message = state.create_topic("bad", 1, replication_factor=factor)
        assert error is ErrorCode.INVALID_REPLICATION_FACTOR
        assert (
            message == "Replication factor must be larger than 0, or -1 to use the default value."
        )
    error, message = state.create_topic("four", 1, replication_factor=4)
    assert error is ErrorCode.INVALID_REPLICATION_FACTOR
    assert message is not None and "only 3 broker(s) are registered" in message


# -- groups --------------------------------------------------------------------------


def test_single_member_group_round_trip() -> None:
    groups = GroupCoordinator(next_member_suffix=itertools.count(1).__next__)
    join = groups.join(
        "g",
        "",
        group_instance_id=None,
        client_id="c",
        client_host="h",
        protocol_type="consumer",
        protocols=[("range", b"sub")],
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        now_ms=T0,
    )
    assert join.error is ErrorCode.NONE
    assert join.leader == join.member_id
    assert join.members == [(join.member_id, None, b"sub")]
    assert (
        groups.heartbeat("g", join.member_id, join.generation_id, T0)
        is ErrorCode.REBALANCE_IN_PROGRESS
    )
    assert groups.sync("g", join.member_id, join.generation_id, {join.member_id: b"asg"}, T0) == (
        ErrorCode.NONE,
        b"asg",
    )
    assert groups.heartbeat("g", join.member_id, join.generation_id, T0) is ErrorCode.NONE
    assert groups.heartbeat("g", join.member_id, 99, T0) is ErrorCode.ILLEGAL_GENERATION
    groups.expire(T0 + 10_000)
    assert (
        groups.heartbeat("g", join.member_id, join.generation_id, T0) is ErrorCode.UNKNOWN_MEMBER_ID
    )


# -- SASL ----------------------------------------------------------------------------

CONFIG = SaslConfig({"alice": "pw"})


def test_plain_accepts_the_right_password_only() -> None:
    ok = SaslSession(CONFIG)
    assert ok.handshake("PLAIN", 1)[0] is ErrorCode.NONE
    assert ok.step(b"\0alice\0pw").error is ErrorCode.NONE
    assert ok.authenticated
    assert ok.principal == "alice"
    bad = SaslSession(CONFIG)
    bad.handshake("PLAIN", 1)
    assert bad.step(b"\0alice\0nope").error is ErrorCode.SASL_AUTHENTICATION_FAILED
    assert bad.stage is SaslStage.FAILED


def test_handshake_refusals() -> None:
    session = SaslSession(SaslConfig({"a": "b"}, mechanisms=("SCRAM-SHA-512",)))
    error, enabled = session.handshake("PLAIN", 1)
    assert (error, enabled) == (ErrorCode.UNSUPPORTED_SASL_MECHANISM, ["SCRAM-SHA-512"])
    assert session.step(b"x").error is ErrorCode.ILLEGAL_SASL_STATE


def _scram(password: str, mechanism: str = "SCRAM-SHA-512") -> tuple[SaslSession, bool]:
    session = SaslSession(CONFIG, nonce=lambda: "servernonce")
    session.handshake(mechanism, 1)
    client = scramp.ScramClient([mechanism], "alice", password, c_nonce="clientnonce")
    first = session.step(client.get_client_first().encode())
    assert first.error is ErrorCode.NONE
    client.set_server_first(first.token.decode())
    final = session.step(client.get_client_final().encode())
    if final.error is not ErrorCode.NONE:
        return session, False
    client.set_server_final(final.token.decode())
    return session, True


def test_scram_with_the_right_password_authenticates() -> None:
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        session, ok = _scram("pw", mechanism)
        assert ok
        assert session.authenticated
        assert session.principal == "alice"


def test_scram_with_a_wrong_password_fails() -> None:
    session, ok = _scram("wrong")
    assert not ok
    assert session.stage is SaslStage.FAILED
    assert not session.authenticated
