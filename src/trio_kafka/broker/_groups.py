"""Committed offsets and a minimal classic group coordinator.

Theory of operation
-------------------
Offsets. `committed` maps (group, topic, partition) to the last committed offset and its
metadata. A transactional commit (TxnOffsetCommit) first lands in `pending`, keyed by
(group, producer id); the transaction's COMMIT marker moves it into `committed`, an ABORT
drops it. While a group has pending transactional offsets, an OffsetFetch that requires
stable offsets (v7+) is answered UNSTABLE_OFFSET_COMMIT for those partitions, as Kafka does.

Groups. Just enough of the classic protocol for the consumers of confluent-kafka and
kafka-python: a JoinGroup opens a new generation with every current member; the first
member (or the one that joined when the leader was gone) is the leader and receives every
member's subscription metadata; the leader's SyncGroup carries the assignments, which the
coordinator hands back to every member. Any member's JoinGroup starts a rebalance and the
others learn it from REBALANCE_IN_PROGRESS on Heartbeat, then rejoin. Members are not
waited for: this is a mock for tests with a handful of consumers, not a faithful
rebalancer. Member session timeouts are checked by `expire(now_ms)`.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from trio_kafka.errors import ErrorCode


@attrs.frozen
class CommittedOffset:
    offset: int
    metadata: str | None = ""
    leader_epoch: int = -1
    commit_time_ms: int = -1


@attrs.define(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    last_seen_ms: int
    assignment: bytes = b""


@attrs.define(eq=False)
class Group:
    group_id: str
    protocol_type: str = ""
    protocol_name: str | None = None
    generation_id: int = 0
    leader: str | None = None
    members: dict[str, Member] = attrs.field(factory=dict)
    # True between a JoinGroup and the leader's SyncGroup.
    rebalancing: bool = False


@attrs.frozen
class JoinResult:
    error: ErrorCode
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] = attrs.field(factory=list)


@attrs.define(eq=False)
class GroupCoordinator:
    """Every group's members and committed offsets."""

    # Generates member ids (injected for determinism).
    next_member_suffix: Callable[[], int]
    groups: dict[str, Group] = attrs.field(factory=dict)
    committed: dict[tuple[str, str, int], CommittedOffset] = attrs.field(factory=dict)
    # (group, producer id) -> {(topic, partition): offset} awaiting the txn's marker.
    pending: dict[tuple[str, int], dict[tuple[str, int], CommittedOffset]] = attrs.field(
        factory=dict
    )

    # -- offsets ---------------------------------------------------------------------

    def commit(self, group_id: str, topic: str, partition: int, offset: CommittedOffset) -> None:
        self.committed[group_id, topic, partition] = offset

    def commit_pending(
        self, group_id: str, producer_id: int, topic: str, partition: int, offset: CommittedOffset
    ) -> None:
        self.pending.setdefault((group_id, producer_id), {})[topic, partition] = offset

    def end_transaction(self, group_id: str, producer_id: int, *, commit: bool) -> None:
        offsets = self.pending.pop((group_id, producer_id), {})
        if commit:
            for (topic, partition), offset in offsets.items():
                self.committed[group_id, topic, partition] = offset

    def fetch(
        self, group_id: str, topic: str, partition: int, *, require_stable: bool
    ) -> tuple[ErrorCode, CommittedOffset | None]:
        if require_stable:
            for (group, _), offsets in self.pending.items():
                if group == group_id and (topic, partition) in offsets:
                    return ErrorCode.UNSTABLE_OFFSET_COMMIT, None
        return ErrorCode.NONE, self.committed.get((group_id, topic, partition))

    def committed_partitions(self, group_id: str) -> list[tuple[str, int]]:
        return sorted((t, p) for (g, t, p) in self.committed if g == group_id)

    # -- membership ------------------------------------------------------------------

    def join(
        self,
        group_id: str,
        member_id: str,
        *,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        now_ms: int,
    ) -> JoinResult:
        if not group_id:
            return JoinResult(ErrorCode.INVALID_GROUP_ID)
        group = self.groups.setdefault(group_id, Group(group_id))
        if group.members and group.protocol_type and protocol_type != group.protocol_type:
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if member_id and member_id not in group.members:
            return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if not member_id:
            member_id = f"{client_id or 'member'}-{self.next_member_suffix()}"
        group.members[member_id] = Member(
            member_id,
            group_instance_id,
            client_id,
            client_host,
            session_timeout_ms,
            rebalance_timeout_ms,
            protocols,
            now_ms,
        )
        # The protocol every member supports, in the first member's order of preference.
        names = [name for name, _ in protocols]
        for member in group.members.values():
            supported = {name for name, _ in member.protocols}
            names = [name for name in names if name in supported]
        if not names:
            del group.members[member_id]
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        group.protocol_type = protocol_type
        group.protocol_name = names[0]
        if group.leader not in group.members:
            group.leader = member_id
        group.generation_id += 1
        group.rebalancing = True
        members: list[tuple[str, str | None, bytes]] = []
        if member_id == group.leader:
            for member in group.members.values():
                metadata = dict(member.protocols).get(group.protocol_name, b"")
                members.append((member.member_id, member.group_instance_id, metadata))
        return JoinResult(
            ErrorCode.NONE,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader,
            member_id,
            members,
        )

    def _member(
        self, group_id: str, member_id: str, generation_id: int
    ) -> tuple[ErrorCode, Group | None]:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID, None
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION, None
        return ErrorCode.NONE, group

    def sync(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        assignments: dict[str, bytes],
        now_ms: int,
    ) -> tuple[ErrorCode, bytes]:
        error, group = self._member(group_id, member_id, generation_id)
        if group is None:
            return error, b""
        group.members[member_id].last_seen_ms = now_ms
        if member_id == group.leader:
            for member in group.members.values():
                member.assignment = assignments.get(member.member_id, b"")
            group.rebalancing = False
        elif group.rebalancing:
            # The leader has not sent assignments yet: rejoin and try again.
            return ErrorCode.REBALANCE_IN_PROGRESS, b""
        return ErrorCode.NONE, group.members[member_id].assignment

    def heartbeat(
        self, group_id: str, member_id: str, generation_id: int, now_ms: int
    ) -> ErrorCode:
        error, group = self._member(group_id, member_id, generation_id)
        if group is None:
            return error
        group.members[member_id].last_seen_ms = now_ms
        return ErrorCode.REBALANCE_IN_PROGRESS if group.rebalancing else ErrorCode.NONE

    def leave(self, group_id: str, member_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        del group.members[member_id]
        if group.members:
            group.rebalancing = True
            group.generation_id += 1
        else:
            group.leader = None
            group.rebalancing = False
        return ErrorCode.NONE

    def validate_commit(self, group_id: str, member_id: str, generation_id: int) -> ErrorCode:
        """OffsetCommit from a group member must carry its generation (-1: a simple commit)."""
        if generation_id < 0 and not member_id:
            return ErrorCode.NONE
        error, _ = self._member(group_id, member_id, generation_id)
        return error

    def expire(self, now_ms: int) -> None:
        for group in self.groups.values():
            for member in list(group.members.values()):
                if now_ms >= member.last_seen_ms + member.session_timeout_ms:
                    self.leave(group.group_id, member.member_id)
