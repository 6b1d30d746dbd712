"""The transaction coordinator: one state machine per transactional id.

Theory of operation
-------------------
Kafka's TransactionCoordinator, without its log: for each transactional id a
`TxnMetadata` holds the producer id and epoch handed out, the transaction timeout, the
partitions and consumer groups of the open transaction, and a `TransactionState`:

    Empty --AddPartitions--> Ongoing --EndTxn--> PrepareCommit --markers--> CompleteCommit
                                      \\-EndTxn/timeout/fence-> PrepareAbort --markers--> CompleteAbort
    Complete* --AddPartitions--> Ongoing;  Empty|Complete* --InitProducerId--> Empty
    Empty|Complete* --expiration--> Dead (the id is forgotten)

Every transition goes through `TxnMetadata.transition`, checked against `_ALLOWED` (the
previous states each state may follow, as in Kafka's TransactionState). The Prepare*
states last while the markers are written: `end_txn` returns a `MarkerJob`, the caller
writes the markers to every partition and calls `complete`. A request that arrives in
between (InitProducerId, AddPartitionsToTxn, EndTxn) gets CONCURRENT_TRANSACTIONS and
retries, exactly what a Kafka client does against a real coordinator.

Epochs. InitProducerId bumps the epoch (a new instance fences the old one: its requests
then carry an older epoch and get PRODUCER_FENCED from the coordinator and
INVALID_PRODUCER_EPOCH from partition leaders). When the epoch would reach 32767 a new
producer id is allocated with epoch 0 ("exhaustion"). KIP-360: InitProducerId may name the
producer id and epoch the client holds; they must be the current ones (or the previous
ones when the request is a retry), else PRODUCER_FENCED. An InitProducerId that finds a
transaction Ongoing aborts it with a bumped epoch and answers CONCURRENT_TRANSACTIONS; the
retry bumps once more. A transaction Ongoing for longer than its timeout is aborted by
`expire`, with a bumped epoch, so the stalled producer is fenced.

Transactions v2 (KIP-890 part 2), when the cluster enables them and the client sends
EndTxn v5: every EndTxn bumps the epoch (a new producer id on exhaustion), the markers
carry the new epoch, and the response returns it; a retried EndTxn with the previous epoch
is recognised and answered with the current one; aborting an Empty transaction is
allowed (it only bumps the epoch). Produce then adds partitions implicitly (see
`add_partitions(..., implicit=True)`).

Pure: time arrives as `now_ms`, producer ids from an injected generator.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

import attrs

from trio_kafka.errors import ErrorCode

#: Kafka's `transaction.max.timeout.ms` default.
MAX_TRANSACTION_TIMEOUT_MS = 900_000
#: Kafka's `transactional.id.expiration.ms` default (7 days).
TRANSACTIONAL_ID_EXPIRATION_MS = 7 * 24 * 3600 * 1000
#: An epoch at or above this cannot be bumped: a new producer id is allocated instead.
EXHAUSTED_EPOCH = 32767 - 1


class TransactionState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"


S = TransactionState
#: state -> the states it may follow (Kafka's TransactionState.validPreviousStates).
_ALLOWED: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    # Empty and Complete*: a transactions-v2 abort of an empty transaction.
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
}


class IllegalTransitionError(RuntimeError):
    """A transition `_ALLOWED` forbids: a bug in the coordinator, never a client error."""


@attrs.define(eq=False)
class TxnMetadata:
    """A transactional id's state. Mutated only by `TransactionCoordinator`."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState
    last_update_ms: int
    # The producer id and epoch before the last bump, to recognise retried requests.
    last_producer_id: int = -1
    last_producer_epoch: int = -1
    # The open transaction: its partitions, its consumer groups, when it started.
    partitions: set[tuple[str, int]] = attrs.field(factory=set)
    groups: set[str] = attrs.field(factory=set)
    start_ms: int = -1

    def transition(self, new: TransactionState, now_ms: int) -> None:
        if self.state not in _ALLOWED[new]:
            raise IllegalTransitionError(
                f"transaction {self.transactional_id!r}: {self.state.value} -> {new.value}"
            )
        self.state = new
        self.last_update_ms = now_ms


@attrs.frozen
class MarkerJob:
    """Markers to write: a control batch in every partition, then offsets for groups."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: tuple[tuple[str, int], ...]
    groups: tuple[str, ...]
    coordinator_epoch: int


@attrs.frozen
class CoordinatorAnswer:
    """A coordinator answer: an error code, the producer id and epoch, markers to write."""

    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1
    markers: MarkerJob | None = None


def _counter(start: int) -> Callable[[], int]:
    state = [start]

    def next_id() -> int:
        state[0] += 1
        return state[0] - 1

    return next_id


@attrs.define(eq=False)
class TransactionCoordinator:
    """Every transactional id's `TxnMetadata`, and the rules that change them."""

    # Allocates producer ids, shared with idempotent producers (injected for determinism).
    next_producer_id: Callable[[], int] = attrs.field(factory=lambda: _counter(1000))
    max_timeout_ms: int = MAX_TRANSACTION_TIMEOUT_MS
    id_expiration_ms: int = TRANSACTIONAL_ID_EXPIRATION_MS
    # Bumped when the coordinator moves; written into markers.
    coordinator_epoch: int = 0
    txns: dict[str, TxnMetadata] = attrs.field(factory=dict)

    # -- InitProducerId ---------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str | None,
        timeout_ms: int,
        now_ms: int,
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> CoordinatorAnswer:
        if transactional_id is None:
            # Idempotent only: Kafka hands out a fresh producer id, whatever was sent.
            return CoordinatorAnswer(ErrorCode.NONE, self.next_producer_id(), 0)
        if timeout_ms <= 0 or timeout_ms > self.max_timeout_ms:
            return CoordinatorAnswer(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        meta = self.txns.get(transactional_id)
        if meta is None or meta.state is S.DEAD:
            meta = TxnMetadata(
                transactional_id, self.next_producer_id(), 0, timeout_ms, S.EMPTY, now_ms
            )
            self.txns[transactional_id] = meta
            return CoordinatorAnswer(ErrorCode.NONE, meta.producer_id, meta.producer_epoch)
        # Kafka's TransactionCoordinator.handleInitProducerId: a named producer id must be
        # the current one (or the one an epoch exhaustion rotated away from); the epoch is
        # checked only when the epoch is bumped, so a stale instance arriving during a
        # transaction still fences it (as Kafka does).
        named = producer_id != -1
        if named and not (
            producer_id == meta.producer_id
            or (producer_id == meta.last_producer_id and producer_epoch >= EXHAUSTED_EPOCH)
        ):
            return CoordinatorAnswer(ErrorCode.PRODUCER_FENCED)
        match meta.state:
            case S.PREPARE_COMMIT | S.PREPARE_ABORT:
                return CoordinatorAnswer(ErrorCode.CONCURRENT_TRANSACTIONS)
            case S.ONGOING:
                # Fence the previous instance: abort its transaction under a bumped epoch.
                job = self._abort_with_bump(meta, now_ms)
                return CoordinatorAnswer(ErrorCode.CONCURRENT_TRANSACTIONS, markers=job)
            case S.EMPTY | S.COMPLETE_COMMIT | S.COMPLETE_ABORT:
                if named and producer_epoch != meta.producer_epoch:
                    # prepareIncrementProducerEpoch: the epoch this producer's own last
                    # bump replaced is a retry of that bump; any other is fenced. A new
                    # instance's init (or a fence) leaves no last epoch, so the instance
                    # it replaced cannot pass for a retry (sim transactional 3001759).
                    if producer_epoch == meta.last_producer_epoch != -1:
                        return CoordinatorAnswer(
                            ErrorCode.NONE, meta.producer_id, meta.producer_epoch
                        )
                    return CoordinatorAnswer(ErrorCode.PRODUCER_FENCED)
                self._bump(meta, keep_last=named)
                meta.timeout_ms = timeout_ms
                meta.partitions.clear()
                meta.groups.clear()
                meta.transition(S.EMPTY, now_ms)
                return CoordinatorAnswer(ErrorCode.NONE, meta.producer_id, meta.producer_epoch)
            case S.DEAD:  # pragma: no cover - replaced above
                raise IllegalTransitionError("dead transactional id still registered")

    # -- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------

    def _check_producer(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[ErrorCode, TxnMetadata | None]:
        meta = self.txns.get(transactional_id)
        if meta is None or meta.state is S.DEAD or meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, None
        if producer_epoch != meta.producer_epoch:
            return ErrorCode.PRODUCER_FENCED, None
        if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS, None
        return ErrorCode.NONE, meta

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[tuple[str, int]],
        now_ms: int,
    ) -> ErrorCode:
        """Add partitions to the open transaction (opening it if none is open)."""
        error, meta = self._check_producer(transactional_id, producer_id, producer_epoch)
        if meta is None:
            return error
        self._begin(meta, now_ms)
        meta.partitions.update(partitions)
        return ErrorCode.NONE

    def verify_partition(
        self,
        transactional_id: str | None,
        producer_id: int,
        producer_epoch: int,
        partition: tuple[str, int],
    ) -> ErrorCode:
        """KIP-890 part 1: is this transactional Produce part of an open transaction?"""
        if transactional_id is None:
            return ErrorCode.NONE  # produce v<3 carries no id: nothing to verify against
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if producer_epoch < meta.producer_epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if meta.state is not S.ONGOING or partition not in meta.partitions:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

    def add_group(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        now_ms: int,
    ) -> ErrorCode:
        error, meta = self._check_producer(transactional_id, producer_id, producer_epoch)
        if meta is None:
            return error
        self._begin(meta, now_ms)
        meta.groups.add(group_id)
        return ErrorCode.NONE

    def check_offset_commit(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> ErrorCode:
        """TxnOffsetCommit: the group must be in the producer's open transaction."""
        error, meta = self._check_producer(transactional_id, producer_id, producer_epoch)
        if meta is None:
            return error
        if meta.state is not S.ONGOING or group_id not in meta.groups:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

    def _begin(self, meta: TxnMetadata, now_ms: int) -> None:
        if meta.state is not S.ONGOING:
            meta.partitions.clear()
            meta.groups.clear()
            meta.start_ms = now_ms
        meta.transition(S.ONGOING, now_ms)

    # -- EndTxn --------------------------------------------------------------------

    def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        now_ms: int,
        *,
        v2: bool = False,
    ) -> CoordinatorAnswer:
        meta = self.txns.get(transactional_id)
        if meta is None or meta.state is S.DEAD:
            return CoordinatorAnswer(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        current = (meta.producer_id, meta.producer_epoch)
        if (
            v2
            and (producer_id, producer_epoch)
            == (meta.last_producer_id, meta.last_producer_epoch)
            != current
        ):
            # A retried v2 EndTxn: the first attempt already bumped the epoch.
            wanted = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
            pending = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
            if meta.state is wanted:
                return CoordinatorAnswer(ErrorCode.NONE, *current)
            if meta.state is pending:
                return CoordinatorAnswer(ErrorCode.CONCURRENT_TRANSACTIONS)
            return CoordinatorAnswer(ErrorCode.PRODUCER_FENCED)
        if producer_id != meta.producer_id:
            return CoordinatorAnswer(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if producer_epoch != meta.producer_epoch:
            return CoordinatorAnswer(ErrorCode.PRODUCER_FENCED)
        match meta.state, commit:
            case S.ONGOING, _:
                rotated = self._bump(meta) if v2 else None
                meta.transition(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, now_ms)
                job = self._job(meta, commit, rotated_from=rotated)
                return CoordinatorAnswer(ErrorCode.NONE, meta.producer_id, meta.producer_epoch, job)
            case S.EMPTY | S.COMPLETE_COMMIT | S.COMPLETE_ABORT, False if v2:
                # v2: an abort with nothing in flight still bumps the epoch.
                self._bump(meta)
                meta.partitions.clear()
                meta.groups.clear()
                meta.transition(S.PREPARE_ABORT, now_ms)
                job = self._job(meta, False)
                return CoordinatorAnswer(ErrorCode.NONE, meta.producer_id, meta.producer_epoch, job)
            case S.COMPLETE_COMMIT, True:
                return CoordinatorAnswer(ErrorCode.NONE, *current)  # retry of a completed commit
            case S.COMPLETE_ABORT, False:
                return CoordinatorAnswer(ErrorCode.NONE, *current)
            case S.PREPARE_COMMIT, True:
                return CoordinatorAnswer(ErrorCode.CONCURRENT_TRANSACTIONS)
            case S.PREPARE_ABORT, False:
                return CoordinatorAnswer(ErrorCode.CONCURRENT_TRANSACTIONS)
            case _:
                return CoordinatorAnswer(ErrorCode.INVALID_TXN_STATE)

    def complete(self, transactional_id: str, now_ms: int) -> None:
        """The markers of a Prepare* transaction are written: it is complete."""
        meta = self.txns[transactional_id]
        match meta.state:
            case S.PREPARE_COMMIT:
                meta.transition(S.COMPLETE_COMMIT, now_ms)
            case S.PREPARE_ABORT:
                meta.transition(S.COMPLETE_ABORT, now_ms)
            case _:
                raise IllegalTransitionError(
                    f"transaction {transactional_id!r} completed in state {meta.state.value}"
                )
        meta.partitions.clear()
        meta.groups.clear()
        meta.start_ms = -1

    # -- Time ----------------------------------------------------------------------

    def expire(self, now_ms: int, *, transaction_version: int = 1) -> list[MarkerJob]:
        """Abort transactions past their timeout (fencing their producer) and forget ids
        idle past `id_expiration_ms`. Returns the marker jobs to carry out.

        Under `transaction.version` 2 the abort keeps the epoch it replaced (so the
        timed-out producer may retry into the bumped epoch); under 0 and 1 it is a fence,
        as Kafka 4.4 answers (conformance test)."""
        jobs: list[MarkerJob] = []
        for txn_id, meta in list(self.txns.items()):
            if meta.state is S.ONGOING and now_ms >= meta.start_ms + meta.timeout_ms:
                jobs.append(self._abort_with_bump(meta, now_ms, retriable=transaction_version >= 2))
            elif (
                meta.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
                and now_ms >= meta.last_update_ms + self.id_expiration_ms
            ):
                meta.transition(S.DEAD, now_ms)
                del self.txns[txn_id]
        return jobs

    def next_deadline_ms(self) -> int | None:
        """When `expire` next has something to abort (for a simulator's scheduler)."""
        deadlines = [m.start_ms + m.timeout_ms for m in self.txns.values() if m.state is S.ONGOING]
        return min(deadlines) if deadlines else None

    # -- helpers -------------------------------------------------------------------

    def _bump(self, meta: TxnMetadata, *, keep_last: bool = True) -> tuple[int, int] | None:
        """Bump the epoch; on exhaustion allocate a new producer id and return the old
        (producer id, epoch). `keep_last=False` (a new instance's InitProducerId, which
        names no producer id) records no last epoch, as Kafka does, so no older instance
        can pass for a retry of this bump."""
        old = meta.producer_id, meta.producer_epoch
        meta.last_producer_id = old[0]
        meta.last_producer_epoch = old[1] if keep_last else -1
        if meta.producer_epoch >= EXHAUSTED_EPOCH:
            meta.producer_id, meta.producer_epoch = self.next_producer_id(), 0
            return old
        meta.producer_epoch += 1
        return None

    def _abort_with_bump(
        self, meta: TxnMetadata, now_ms: int, *, retriable: bool = False
    ) -> MarkerJob:
        # Markers go out under the bumped epoch, so partition leaders fence the old
        # producer too. An exhausted epoch cannot be bumped in place: the abort then uses
        # the old one (the next InitProducerId allocates a new id).
        # A fence for a new instance leaves no last epoch: nobody retries a fence. A
        # timeout's abort under transactions v2 keeps the epoch it replaced, as Kafka
        # 4.4 does (conformance test): the timed-out producer's InitProducerId with its
        # id and epoch is then a retry of that bump and gets the bumped epoch.
        if meta.producer_epoch < EXHAUSTED_EPOCH:
            meta.last_producer_id = meta.producer_id
            meta.last_producer_epoch = meta.producer_epoch if retriable else -1
            meta.producer_epoch += 1
        meta.transition(S.PREPARE_ABORT, now_ms)
        return self._job(meta, False)

    def _job(
        self, meta: TxnMetadata, commit: bool, *, rotated_from: tuple[int, int] | None = None
    ) -> MarkerJob:
        producer_id, epoch = meta.producer_id, meta.producer_epoch
        if rotated_from is not None:
            # A v2 bump that exhausted the epoch handed out a new producer id, but the
            # partitions hold the old one's records: its markers carry the old id, one
            # epoch up (the last epoch that id can have).
            producer_id, epoch = rotated_from[0], rotated_from[1] + 1
        return MarkerJob(
            meta.transactional_id,
            producer_id,
            epoch,
            commit,
            tuple(sorted(meta.partitions)),
            tuple(sorted(meta.groups)),
            self.coordinator_epoch,
        )
